"""The shipped grammars: examples accepted/rejected token by token, lark as the oracle."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark import Lark

from specdec.structured import available_grammars, grammars_dir

CASES = {
    "arithmetic": (
        ["1 + 2 * (x - 3.5) ^ 2", "-(-a)/b_2", "2^3^4", "((1))"],
        ["1 +", "1 2", "(1", "01", "1 ** 2", ""],
    ),
    "sql_select": (
        ["SELECT name, COUNT(*) AS n FROM users u LEFT JOIN orders o ON u.id = o.uid "
         "WHERE age >= 18 AND NOT name IS NULL GROUP BY name ORDER BY n DESC LIMIT 10;",
         "select * from t", "SELECT a FROM t WHERE b = 'it''s' OR c <> 2.5"],
        ["SELECT FROM t", "SELECTx FROM t", "SELECT a FROM t WHERE", "SELECT select FROM t",
         "SELECT a FROM t LIMIT 1.5"],
    ),
    "key_value": (
        ['[server]\nhost = example.com\nport = 8080\ndebug = true\n# comment\nname = "a b"\n',
         "a=1", "\n\npath = /usr/local/bin\n"],
        ["= 1", "[a\n", 'a = "x', "a = 1 b = 2"],
    ),
    "csv": (
        ['a,b,c\n1,"x, y",\n"he said ""hi""",2,3\n', "x\n", ',\n'],
        ['a,"b\n', 'a"b\n', "a,b"],
    ),
}


def test_every_shipped_grammar_is_tested():
    assert set(available_grammars()) == {f"{name}.lark" for name in CASES} | {"json.lark"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_examples(compile_for, accepts, name):
    compiled = compile_for(grammar=name)
    lexer = "basic" if "specdec-lexer: basic" in (grammars_dir() / f"{name}.lark").read_text() \
        else "contextual"
    oracle = Lark((grammars_dir() / f"{name}.lark").read_text(), parser="lalr", lexer=lexer)
    good, bad = CASES[name]
    for text in good:
        oracle.parse(text)
        assert accepts(compiled, text), text
    for text in bad:
        assert not accepts(compiled, text), text


def _arithmetic():
    atom = st.one_of(st.integers(0, 10**6).map(str), st.sampled_from(["x", "y_1", "rate"]))
    return st.recursive(
        atom,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from([" + ", "-", " * ", "/", "^"]), inner).map("".join),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"-{e}"),
        ),
        max_leaves=8,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=_arithmetic())
def test_random_arithmetic_expressions(compile_for, accepts, expr):
    assert accepts(compile_for(grammar="arithmetic"), expr)
    assert not accepts(compile_for(grammar="arithmetic"), expr + " +")


def test_grammar_given_as_text_and_path(compile_for, accepts, tmp_path):
    text = 'start: "yes" | "no"\n'
    assert accepts(compile_for(grammar=text), "yes")
    path = tmp_path / "yn.lark"
    path.write_text(text)
    assert accepts(compile_for(grammar=str(path)), "no")
