"""lark's LALR(1) table driven on immutable stacks of state numbers.

Only states are kept (no parse values): a stack is a tuple, so it can be shared,
hashed and used as a cache key, and "what if" feeding never mutates anything. The
loop is lark's ``ParserState.feed_token``: reduce while the table says so, then shift.
"""

from __future__ import annotations

from dataclasses import dataclass

from lark.parsers.lalr_analysis import Shift

Stack = tuple[int, ...]
END = "$END"
MAX_STACK_DEPTH = 1000  # deeper nesting is rejected (bounds memory and time per token)


@dataclass
class ParseRows:
    """An LALR table in :class:`LALRTable`'s own form, one row per state."""

    # terminal -> (True, next state) to shift | (False, (rule length, rule origin)) to reduce
    actions: list[dict[str, tuple[bool, object]]]
    gotos: list[dict[str, int]]  # nonterminal -> state
    start_state: int
    end_state: int


class LALRTable:
    def __init__(self, parse_table, start: str = "start"):
        """``parse_table``: lark's (read for ``start``) or :mod:`.lalr_build`'s ``ParseRows``."""
        if not hasattr(parse_table, "gotos"):
            parse_table = _from_lark(parse_table, start)
        self.actions: dict[int, dict[str, tuple[bool, object]]] = dict(
            enumerate(parse_table.actions))
        self.gotos: dict[int, dict[str, int]] = dict(enumerate(parse_table.gotos))
        self.start_stack: Stack = (parse_table.start_state,)
        self.end_state = parse_table.end_state
        self._acceptable: dict[Stack, tuple[frozenset[str], int]] = {}

    def feed(self, stack: Stack, terminal: str) -> Stack | None:
        """The stack after shifting ``terminal``, or None if the grammar forbids it."""
        return self.feed_low(stack, terminal)[0]

    def feed_low(self, stack: Stack, terminal: str) -> tuple[Stack | None, int]:
        """:meth:`feed`, and the lowest index of ``stack`` it read: the result depends on
        ``stack[low:]`` only (and on the stack's length through ``MAX_STACK_DEPTH``)."""
        low = len(stack) - 1
        while True:
            act = self.actions[stack[-1]].get(terminal)
            if act is None:
                return None, low
            is_shift, arg = act
            if is_shift:
                return (stack + (arg,) if len(stack) < MAX_STACK_DEPTH else None), low
            size, origin = arg
            base = stack[: len(stack) - size] if size else stack
            low = min(low, len(base) - 1)
            stack = base + (self.gotos[base[-1]][origin],)

    def accepts_end(self, stack: Stack) -> bool:
        """Whether the input may end here (``$END`` reduces to the accepting state)."""
        return self.accepts_end_low(stack)[0]

    def accepts_end_low(self, stack: Stack) -> tuple[bool, int]:
        """:meth:`accepts_end` and the lowest index of ``stack`` it read."""
        low = len(stack) - 1
        while True:
            if stack[-1] == self.end_state:
                return True, low
            act = self.actions[stack[-1]].get(END)
            if act is None or act[0]:
                return False, low
            size, origin = act[1]
            base = stack[: len(stack) - size] if size else stack
            low = min(low, len(base) - 1)
            stack = base + (self.gotos[base[-1]][origin],)

    def acceptable(self, stack: Stack) -> frozenset[str]:
        """Terminals that can really be shifted next (not just listed in the top state)."""
        return self.acceptable_low(stack)[0]

    def acceptable_low(self, stack: Stack) -> tuple[frozenset[str], int]:
        """:meth:`acceptable` and the lowest index of ``stack`` it read."""
        found = self._acceptable.get(stack)
        if found is None:
            low = len(stack) - 1
            names = []
            for t in self.actions[stack[-1]]:
                if t != END:
                    fed, read = self.feed_low(stack, t)
                    low = min(low, read)
                    if fed is not None:
                        names.append(t)
            found = self._acceptable[stack] = (frozenset(names), low)
        return found


def _from_lark(parse_table, start: str):
    """lark's parse table as ``ParseRows`` (reduce: the rule's length and origin)."""
    actions, gotos = [], []
    for state in range(len(parse_table.states)):
        acts, goto = {}, {}
        for symbol, (action, arg) in parse_table.states[state].items():
            if symbol.isupper() or symbol == END:  # lark: terminals are upper case
                acts[symbol] = (True, arg) if action is Shift else \
                    (False, (len(arg.expansion), arg.origin.name))
            else:
                goto[symbol] = arg
        actions.append(acts)
        gotos.append(goto)
    return ParseRows(actions, gotos, parse_table.start_states[start],
                     parse_table.end_states[start])
