"""Shared by the table-builder tests: LR automata compared up to state numbers, and the
Lark text of every JSON-Schema-Test-Suite group that compiles."""

from __future__ import annotations

from collections.abc import Iterator

from specdec.bench import schema_suite
from specdec.structured.cfg.lalr import LALRTable
from specdec.structured.errors import ConstraintError
from specdec.structured.json_schema import schema_to_lark

SUITE_ROOT = schema_suite.suite_root()


def canonical_automaton(table: LALRTable, names: dict[str, str] | None = None) -> tuple:
    """The LR automaton from its start state: states renumbered in visit order, symbols
    renamed by ``names`` (anonymous terminals may be numbered differently); and the end
    state's number."""
    names = names or {}
    ids = {table.start_stack[0]: 0}
    order = [table.start_stack[0]]
    rows = []
    for state in order:  # grows while visited
        moves = [(s, "s" if shift else "r", a) for s, (shift, a) in table.actions[state].items()]
        moves += [(s, "g", a) for s, a in table.gotos[state].items()]
        row = []
        for symbol, kind, arg in sorted(moves, key=lambda m: (m[0], m[1])):
            if kind != "r":
                if arg not in ids:
                    ids[arg] = len(order)
                    order.append(arg)
                arg = ids[arg]
            row.append((names.get(symbol, symbol), kind, arg))
        rows.append(tuple(row))
    return tuple(rows), ids.get(table.end_state)


def suite_grammars() -> Iterator[str]:
    """The grammar of every suite group (both drafts) that compiles, with the
    specification's options."""
    retrieve = schema_suite.local_remotes(SUITE_ROOT)
    for draft in schema_suite.DRAFTS:
        for _, group in schema_suite.groups(SUITE_ROOT, draft):
            try:
                yield schema_to_lark(group["schema"], retrieve=retrieve, default_draft=draft,
                                     **schema_suite.SPEC_OPTIONS)
            except ConstraintError:
                continue
