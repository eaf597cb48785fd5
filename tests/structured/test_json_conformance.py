"""json.lark against JSONTestSuite (https://github.com/nst/JSONTestSuite) test_parsing.

``y_`` files must be accepted, ``n_`` files rejected. ``i_`` (implementation-defined)
policy: the grammar decides on bytes, so ``i_`` files are accepted when they are
RFC 8259 JSON over well-formed-looking UTF-8 (big numbers, lone surrogate escapes
``\\uD800``, overlong or surrogate UTF-8 byte sequences in strings are *accepted*:
the byte automaton checks UTF-8 structure, lead byte and continuation count, not
overlongs or surrogates), and rejected when they are not (UTF-16 / BOM inputs,
invalid lead or continuation bytes, nesting deeper than 1000).
The test pins nothing for ``i_`` beyond "decides without error".
"""

from __future__ import annotations

from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[3] / "shared/testdata/JSONTestSuite/test_parsing"
FILES = sorted(SUITE.glob("*.json")) if SUITE.is_dir() else []
pytestmark = pytest.mark.skipif(not FILES, reason=f"JSONTestSuite not found at {SUITE}")


def _accepts_bytes(json_grammar, data: bytes) -> bool:
    matcher = json_grammar.matcher()
    return matcher.accept_text(data) and matcher.is_accepting()


@pytest.mark.parametrize("path", [p for p in FILES if p.name.startswith("y_")],
                         ids=lambda p: p.name)
def test_y_files_are_accepted(json_grammar, path):
    assert _accepts_bytes(json_grammar, path.read_bytes())


@pytest.mark.parametrize("path", [p for p in FILES if p.name.startswith("n_")],
                         ids=lambda p: p.name)
def test_n_files_are_rejected(json_grammar, path):
    assert not _accepts_bytes(json_grammar, path.read_bytes())


def test_i_files_are_decided(json_grammar):
    decided = {p.name: _accepts_bytes(json_grammar, p.read_bytes())
               for p in FILES if p.name.startswith("i_")}
    assert decided
    assert not decided["i_structure_UTF-8_BOM_empty_object.json"]


def test_y_files_are_accepted_token_by_token(json_grammar, tokenizer):
    """Same documents through the real tokenizer: every token allowed by the mask too."""
    for path in FILES:
        if not path.name.startswith("y_"):
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        matcher = json_grammar.matcher()
        for tok in tokenizer.encode(text, add_special_tokens=False):
            assert matcher.is_token_allowed(tok), (path.name, tok)
            assert matcher.accept_token(tok), (path.name, tok)
        assert matcher.is_accepting() and matcher.is_token_allowed(2), path.name
