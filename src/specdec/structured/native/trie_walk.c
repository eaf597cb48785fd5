/* A lexer DFA walked over the vocabulary trie, depth first (see cfg/token_walk.py for
 * what the walk means). Plain C99, no SIMD: the same at every ISA level.
 *
 * From each start node n with lexer state q: the byte of n moves q to q'. If q' is
 * dead, the lexeme closes before n as winner[q] (a boundary at n; none if -1) and the
 * subtree is skipped; otherwise a token ending at n is inside and n's children follow
 * with q'. Outputs are written to caller buffers of num_nodes entries each. */
#include <stdint.h>

int64_t trie_walk(const int32_t *table, const int32_t *winner,
                  const int64_t *byte, const int64_t *child_start,
                  const int64_t *num_children, const uint8_t *is_token,
                  const int64_t *start_nodes, int64_t num_start, int32_t start_state,
                  int64_t *inside, int64_t *num_inside,
                  int64_t *boundary_nodes, int32_t *boundary_terminals,
                  int64_t *num_boundaries,
                  int64_t *stack_nodes, int32_t *stack_states, int64_t stack_capacity) {
    int64_t top = 0, n_inside = 0, n_bound = 0;
    for (int64_t i = num_start - 1; i >= 0; --i) {
        stack_nodes[top] = start_nodes[i];
        stack_states[top] = start_state;
        ++top;
    }
    while (top > 0) {
        --top;
        const int64_t node = stack_nodes[top];
        const int32_t state = stack_states[top];
        const int32_t next = table[(int64_t)state * 256 + byte[node]];
        if (next < 0) {
            const int32_t closing = winner[state];
            if (closing >= 0) {
                boundary_nodes[n_bound] = node;
                boundary_terminals[n_bound] = closing;
                ++n_bound;
            }
            continue;
        }
        if (is_token[node]) inside[n_inside++] = node;
        const int64_t first = child_start[node], count = num_children[node];
        if (top + count > stack_capacity) return -1;
        for (int64_t c = count - 1; c >= 0; --c) {
            stack_nodes[top] = first + c;
            stack_states[top] = next;
            ++top;
        }
    }
    *num_inside = n_inside;
    *num_boundaries = n_bound;
    return 0;
}
