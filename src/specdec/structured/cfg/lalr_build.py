"""LALR(1) tables built directly: the automaton lark's ``LALR_Analyzer`` builds, faster.

The same construction as lark's (LR(0) item sets, then DeRemer & Pennello's lookaheads:
``Read`` over ``reads``, ``Follow`` over ``includes``, reduce where ``lookback`` says)
with items as integers and terminal sets as bit masks, and without the FIRST/FOLLOW
sets lark computes but LALR never reads. Conflicts are resolved as lark resolves them:
shift wins over reduce; two rules reducing on one terminal raise
:class:`ReduceConflict` (no rule priorities in this subset). States are numbered in
breadth-first order from the start state (lark's numbers follow set iteration order).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from specdec.structured.cfg.lalr import END, ParseRows

Rule = tuple[str, tuple[str, ...]]  # (origin, expansion): symbols are names


class ReduceConflict(ValueError):
    """Two rules reduce on the same terminal in one state (lark: a GrammarError)."""


def build_lalr(rules: Sequence[Rule], start: str = "start") -> ParseRows:
    """The LALR(1) table of ``rules`` (every symbol that is no rule's origin is a terminal)."""
    root = f"$root_{start}"
    rules = [*rules, (root, (start,))]
    g = _Items(rules)
    closures, transitions = _lr0(g, rules, root)
    nullable = _nullable(rules)
    nts: list[tuple[int, str]] = []  # nonterminal transitions (state, nonterminal)
    nt_id: dict[tuple[int, str], int] = {}
    for state, row in enumerate(transitions):
        for symbol in row:
            if symbol in g.by_origin:
                nt_id[(state, symbol)] = len(nts)
                nts.append((state, symbol))
    bits: dict[str, int] = {END: 1}
    direct = [0] * len(nts)
    reads: list[list[int]] = [[] for _ in nts]
    for k, (state, symbol) in enumerate(nts):
        target = transitions[state][symbol]
        mask = 0
        for s2 in transitions[target]:
            if s2 not in g.by_origin:
                mask |= bits.setdefault(s2, 1 << len(bits))
            elif s2 in nullable:
                reads[k].append(nt_id[(target, s2)])
        direct[k] = mask
    direct[nt_id[(0, start)]] |= bits[END]
    includes, lookback = _includes_lookback(g, rules, nts, nt_id, closures, transitions,
                                            nullable)
    follow = _digraph(includes, _digraph(reads, direct))
    lookahead: list[dict[int, int]] = [defaultdict(int) for _ in transitions]
    for state, rule, k in lookback:
        lookahead[state][rule] |= follow[k]
    return _rows(rules, transitions, lookahead, bits, g.by_origin, transitions[0][start])


class _Items:
    """LR(0) items as integers: ``first[r] + dot`` is rule ``r`` with the dot at ``dot``."""

    def __init__(self, rules: list[Rule]):
        self.by_origin: dict[str, list[int]] = defaultdict(list)
        self.first: list[int] = []
        self.next: list[str | None] = []  # the symbol after the dot, None at the end
        self.rule: list[int] = []
        for r, (origin, expansion) in enumerate(rules):
            self.by_origin[origin].append(r)
            self.first.append(len(self.next))
            self.next.extend(expansion)
            self.next.append(None)
            self.rule.extend([r] * (len(expansion) + 1))
        self.by_origin = dict(self.by_origin)
        self._expanded: dict[str, list[int]] = {}
        self._rules = rules

    def expand(self, symbol: str) -> list[int]:
        """The start items of ``symbol``'s rules and of every nonterminal they begin with
        (lark's ``expand_rule``)."""
        found = self._expanded.get(symbol)
        if found is None:
            seen, todo = {symbol}, [symbol]
            while todo:
                for r in self.by_origin[todo.pop()]:
                    expansion = self._rules[r][1]
                    if expansion and expansion[0] in self.by_origin and expansion[0] not in seen:
                        seen.add(expansion[0])
                        todo.append(expansion[0])
            found = self._expanded[symbol] = [self.first[r] for s in seen
                                              for r in self.by_origin[s]]
        return found


def _lr0(g: _Items, rules: list[Rule], root: str) -> tuple[list[set[int]], list[dict]]:
    """The LR(0) item sets' closures and transitions, breadth-first from the start."""
    start_kernel = (g.first[g.by_origin[root][0]],)
    kernels = {start_kernel: 0}
    queue = [start_kernel]
    closures: list[set[int]] = []
    transitions: list[dict[str, int]] = []
    nxt, by_origin = g.next, g.by_origin
    for kernel in queue:  # grows while visited
        closure = set(kernel)
        for item in kernel:
            symbol = nxt[item]
            if symbol in by_origin:
                closure.update(g.expand(symbol))
        moves: dict[str, list[int]] = defaultdict(list)
        for item in closure:
            symbol = nxt[item]
            if symbol is not None:
                moves[symbol].append(item + 1)
        row = {}
        for symbol, items in moves.items():
            key = tuple(sorted(items))
            target = kernels.get(key)
            if target is None:
                target = kernels[key] = len(queue)
                queue.append(key)
            row[symbol] = target
        closures.append(closure)
        transitions.append(row)
    return closures, transitions


def _nullable(rules: list[Rule]) -> set[str]:
    """Nonterminals that derive the empty string (a work list over symbol uses)."""
    missing = [len(expansion) for _, expansion in rules]
    uses: dict[str, list[int]] = defaultdict(list)
    for r, (_, expansion) in enumerate(rules):
        for symbol in expansion:
            uses[symbol].append(r)
    nullable: set[str] = set()
    todo = [origin for origin, expansion in rules if not expansion]
    while todo:
        symbol = todo.pop()
        if symbol in nullable:
            continue
        nullable.add(symbol)
        for r in uses[symbol]:
            missing[r] -= 1
            if missing[r] == 0:
                todo.append(rules[r][0])
    return nullable


def _includes_lookback(g: _Items, rules, nts, nt_id, closures, transitions, nullable):
    """lark's ``compute_includes_lookback``: every item of the nonterminal's rules in the
    state's closure (kernel items too, as lark does) walked to its end. A walk step reads
    one table per state: symbol -> (next state, its nonterminal transition or -1)."""
    includes: list[list[int]] = [[] for _ in nts]
    lookback: list[tuple[int, int, int]] = []  # (state, rule, nonterminal transition)
    steps: list[dict[str, tuple[int, int]] | None] = [None] * len(transitions)
    by_state: dict[int, dict[str, list[int]]] = {}
    first_tail: list[int | None] = [None] * len(rules)  # from here on the rest is nullable
    item_rule, first = g.rule, g.first
    for k, (state, symbol) in enumerate(nts):
        groups = by_state.get(state)
        if groups is None:
            groups = by_state[state] = defaultdict(list)
            for item in closures[state]:
                groups[rules[item_rule[item]][0]].append(item)
        for item in groups.get(symbol, ()):
            r = item_rule[item]
            expansion = rules[r][1]
            tail = first_tail[r]
            if tail is None:
                tail = len(expansion) - 1
                while tail > 0 and expansion[tail] in nullable:
                    tail -= 1
                first_tail[r] = tail
            dot = item - first[r]
            state2 = state
            for j in range(dot, len(expansion)):
                step = steps[state2]
                if step is None:
                    step = steps[state2] = {
                        sym: (target, nt_id.get((state2, sym), -1))
                        for sym, target in transitions[state2].items()}
                state2, k2 = step[expansion[j]]
                if k2 >= 0 and j >= tail:
                    includes[k2].append(k)
            if dot == 0:
                lookback.append((state2, r, k))
    return includes, lookback


def _digraph(relation: list[list[int]], values: list[int]) -> list[int]:
    """DeRemer & Pennello's digraph: ``F(x) = values[x] | F(y) for every y in
    relation[x]`` (strongly connected components share one value), without recursion."""
    out = list(values)
    depth = [0] * len(values)
    stack: list[int] = []
    for root in range(len(values)):
        if depth[root]:
            continue
        stack.append(root)
        depth[root] = len(stack)
        work = [[root, 0, len(stack)]]
        while work:
            frame = work[-1]
            x = frame[0]
            edges = relation[x]
            if frame[1] < len(edges):
                y = edges[frame[1]]
                frame[1] += 1
                if depth[y] == 0:
                    stack.append(y)
                    depth[y] = len(stack)
                    work.append([y, 0, len(stack)])
                    continue
            else:
                work.pop()
                if depth[x] == frame[2]:  # x roots a component: all of it gets x's value
                    while True:
                        z = stack.pop()
                        depth[z] = -1
                        out[z] = out[x]
                        if z == x:
                            break
                if not work:
                    break
                y, x = x, work[-1][0]
            if 0 < depth[y] < depth[x]:
                depth[x] = depth[y]
            out[x] |= out[y]
    return out


def _rows(rules, transitions, lookahead, bits, by_origin, end_state: int) -> ParseRows:
    names = {bit.bit_length() - 1: name for name, bit in bits.items()}
    actions: list[dict] = []
    gotos: list[dict] = []
    for state, row in enumerate(transitions):
        acts: dict[str, tuple[bool, object]] = {}
        goto: dict[str, int] = {}
        for symbol, target in row.items():
            if symbol in by_origin:
                goto[symbol] = target
            else:
                acts[symbol] = (True, target)
        reducing: dict[str, int] = {}
        for r, mask in lookahead[state].items():
            origin, expansion = rules[r]
            while mask:
                low = mask & -mask
                mask ^= low
                terminal = names[low.bit_length() - 1]
                if reducing.setdefault(terminal, r) != r:
                    raise ReduceConflict(f"{terminal}: {rules[reducing[terminal]]} / {rules[r]}")
                if terminal not in acts:  # a shift wins
                    acts[terminal] = (False, (len(expansion), origin))
        actions.append(acts)
        gotos.append(goto)
    return ParseRows(actions, gotos, 0, end_state)
