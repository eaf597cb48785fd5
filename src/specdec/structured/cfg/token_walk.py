"""Push the whole vocabulary through a lexer DFA at once (numpy, no per-token Python).

Starting from lexer state ``q`` (a partial lexeme), every token's bytes are fed in
lock-step. Each token ends one of three ways:

* **inside**: all its bytes extend the lexeme; whether it is allowed depends on the
  lexer state only, never on the parser stack;
* **boundary**: at byte ``k`` the lexeme cannot grow, its state has a winning terminal
  ``T``, so the lexeme closes as ``T`` and bytes ``k:`` start a new lexeme; only here
  is the parser consulted (once per ``T``, for all such tokens together);
* **dead**: a byte the lexeme cannot take, in a state that is no complete terminal.

A walk's result does not depend on the parser stack, so it is cached per lexer state
(and per path of boundaries) and reused by every stack that reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.structured.cfg.lexer import LexerDFA


@dataclass
class WalkResult:
    inside: np.ndarray  # int64 token ids that end inside the lexeme
    boundaries: dict[int, tuple[np.ndarray, np.ndarray]]  # terminal -> (rows, byte offsets)


def walk(dfa: LexerDFA, start_state: int, rows: np.ndarray, offsets: np.ndarray,
         lengths: np.ndarray, matrix: np.ndarray, token_ids: np.ndarray) -> WalkResult:
    """Walk vocabulary rows ``rows`` (into ``matrix``) from byte ``offsets`` and ``start_state``.

    ``matrix[r]`` holds row ``r``'s bytes, ``lengths[r]`` their number and
    ``token_ids[r]`` its token id (see ``TokenVocabulary.byte_matrix``).
    """
    state = np.full(rows.shape[0], start_state, dtype=np.int32)
    off = offsets.astype(np.int32, copy=True)
    inside: list[np.ndarray] = []
    ends: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    table, winner = dfa.table, dfa.winner
    while rows.size:
        done = off >= lengths[rows]
        if done.any():
            inside.append(token_ids[rows[done]])
            keep = ~done
            rows, off, state = rows[keep], off[keep], state[keep]
            if not rows.size:
                break
        nxt = table[state, matrix[rows, off]]
        stuck = nxt < 0
        if stuck.any():
            closing = winner[state[stuck]]
            s_rows, s_off = rows[stuck], off[stuck]
            for terminal in np.unique(closing[closing >= 0]).tolist():
                sel = closing == terminal
                ends.setdefault(terminal, []).append((s_rows[sel], s_off[sel]))
            keep = ~stuck
            rows, off, nxt = rows[keep], off[keep], nxt[keep]
        state = nxt
        off += 1
    boundaries = {
        t: (np.concatenate([r for r, _ in parts]), np.concatenate([o for _, o in parts]))
        for t, parts in ends.items()
    }
    empty = np.zeros(0, dtype=np.int64)
    return WalkResult(np.concatenate(inside) if inside else empty, boundaries)
