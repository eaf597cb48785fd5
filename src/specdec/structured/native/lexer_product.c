/* The product of k byte DFAs, breadth first over bytes (cfg/lexer.py's construction):
 * product states are numbered in the order a byte-by-byte walk finds them, state 0 is
 * (0, ..., 0), a member's DEAD is -1 and a product state with every member dead is DEAD.
 *
 * tables: the members' [n_j, columns] tables stacked (columns: 256 bytes, or byte
 * classes); offsets[j]: member j's first row. Writes keys [capacity, k] and out
 * [capacity, columns]; slots: hash_size int32 (a power of
 * two >= 2 * capacity), zeroed by the caller. Returns the number of states, or -1 when
 * there are more than capacity (the caller retries with more). */
#include <stdint.h>
#include <string.h>

static uint64_t hash_key(const int32_t *key, int32_t k) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t j = 0; j < k; ++j) h = (h ^ (uint32_t)key[j]) * 1099511628211ull;
    return h ^ (h >> 29);
}

int64_t lexer_product(const int32_t *tables, const int64_t *offsets, int32_t k, int32_t columns,
                      int32_t *keys, int32_t *out, int64_t capacity,
                      int32_t *slots, int64_t hash_size) {
    int32_t next[k], previous[k];  /* C99 variable-length arrays */
    int64_t count = 1;
    memset(keys, 0, sizeof(int32_t) * (size_t)k);
    slots[hash_key(keys, k) & (uint64_t)(hash_size - 1)] = 1;
    for (int64_t state = 0; state < count; ++state) {
        int32_t target = -1;
        for (int32_t b = 0; b < columns; ++b) {
            int32_t alive = 0, same = b > 0;
            for (int32_t j = 0; j < k; ++j) {
                const int32_t s = keys[state * k + j];
                next[j] = s < 0 ? -1 : tables[(offsets[j] + s) * columns + b];
                alive |= next[j] >= 0;
                same &= next[j] == previous[j];
            }
            if (!same) {
                memcpy(previous, next, sizeof(int32_t) * (size_t)k);
                if (!alive) {
                    target = -1;
                } else {
                    uint64_t h = hash_key(next, k) & (uint64_t)(hash_size - 1);
                    for (;;) {
                        const int32_t slot = slots[h];
                        if (slot == 0) {
                            if (count == capacity) return -1;
                            memcpy(keys + count * k, next, sizeof(int32_t) * (size_t)k);
                            slots[h] = (int32_t)(++count);
                            target = (int32_t)(count - 1);
                            break;
                        }
                        if (!memcmp(keys + (int64_t)(slot - 1) * k, next,
                                    sizeof(int32_t) * (size_t)k)) {
                            target = slot - 1;
                            break;
                        }
                        h = (h + 1) & (uint64_t)(hash_size - 1);
                    }
                }
            }
            out[state * columns + b] = target;
        }
    }
    return count;
}

/* Bytes that every row of table [rows, 256] treats alike share a class, numbered by
 * their first byte (a byte-by-byte walk's order). Writes class_of[256] and the first
 * byte of each class to first[256]; returns the number of classes. Columns are grouped
 * by a hash and then compared in full, so a collision never merges two classes. */
int32_t byte_classes(const int32_t *table, int64_t rows, int32_t *class_of,
                     int32_t *first) {
    uint64_t h[256];
    for (int32_t b = 0; b < 256; ++b) h[b] = 1469598103934665603ull;
    for (int64_t r = 0; r < rows; ++r) {
        const int32_t *row = table + r * 256;
        for (int32_t b = 0; b < 256; ++b) h[b] = (h[b] ^ (uint32_t)row[b]) * 1099511628211ull;
    }
    int32_t n = 0;
    for (int32_t b = 0; b < 256; ++b) {
        int32_t found = -1;
        for (int32_t c = 0; c < n && found < 0; ++c) {
            const int32_t a = first[c];
            if (h[a] != h[b]) continue;
            int64_t r = 0;
            while (r < rows && table[r * 256 + a] == table[r * 256 + b]) ++r;
            if (r == rows) found = c;
        }
        if (found < 0) {
            found = n++;
            first[found] = b;
        }
        class_of[b] = found;
    }
    return n;
}
