/* A lexer DFA walked over the vocabulary trie, depth first (see cfg/token_walk.py for
 * what the walk means). Plain C99, no SIMD: the same at every ISA level.
 *
 * From each start node n with lexer state q: the byte of n moves q to q'. If q' is
 * dead, the lexeme closes before n as winner[q] (a boundary at n; none if -1) and the
 * subtree is skipped; otherwise the tokens spelled by n are inside (their bits are set
 * in the packed mask) and n's children follow with q'. */
#include <stdint.h>

struct trie {  /* the flat trie of byte_trie.py, int32 */
    const int32_t *byte, *child_start, *num_children;
    const int32_t *token_first, *token_count, *token_order;  /* token ids by node */
};

struct scratch {  /* caller buffers of `capacity` entries each */
    int32_t *boundary_nodes, *boundary_terminals, *stack_nodes, *stack_states;
    int64_t capacity, num_boundaries;
    int32_t closing_low, closing_high;  /* the least and greatest boundary terminal */
};

int64_t trie_walk(const int32_t *table, const int32_t *winner, const struct trie *t,
                  struct scratch *s, const int32_t *start_nodes, int64_t num_start,
                  int32_t start_state, uint32_t *inside_mask) {
    int64_t top = 0, n_bound = 0;
    int32_t low = INT32_MAX, high = -1;
    if (num_start > s->capacity) return -1;
    for (int64_t i = num_start - 1; i >= 0; --i) {
        s->stack_nodes[top] = start_nodes[i];
        s->stack_states[top] = start_state;
        ++top;
    }
    while (top > 0) {
        --top;
        const int32_t node = s->stack_nodes[top];
        const int32_t state = s->stack_states[top];
        const int32_t next = table[(int64_t)state * 256 + t->byte[node]];
        if (next < 0) {
            const int32_t closing = winner[state];
            if (closing >= 0) {
                s->boundary_nodes[n_bound] = node;
                s->boundary_terminals[n_bound] = closing;
                ++n_bound;
                if (closing < low) low = closing;
                if (closing > high) high = closing;
            }
            continue;
        }
        const int32_t first_token = t->token_first[node], tokens = t->token_count[node];
        for (int32_t k = 0; k < tokens; ++k) {
            const int32_t id = t->token_order[first_token + k];
            inside_mask[id >> 5] |= (uint32_t)1 << (id & 31);
        }
        const int32_t first = t->child_start[node], count = t->num_children[node];
        if (top + count > s->capacity) return -1;
        for (int32_t c = count - 1; c >= 0; --c) {
            s->stack_nodes[top] = first + c;
            s->stack_states[top] = next;
            ++top;
        }
    }
    s->num_boundaries = n_bound;
    s->closing_low = low;
    s->closing_high = high;
    return 0;
}
