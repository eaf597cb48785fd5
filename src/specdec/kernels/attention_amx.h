// Paged attention for bfloat16 on CPUs with AMX tiles: one request, all KV heads.
//
// The vector kernel in attention_tile.h spends most of its time on per-query
// horizontal sums and a serial online softmax (~60 cycles per position and KV head
// with the data in L2). Here (~40), for up to 16 queries per KV head at a time:
//   1. scores: one AMX tile product per 16 positions, the K rows loaded straight from
//      the cache block (a strided tile load) against the queries' transposed tile,
//      giving a [16 positions x 16 queries] float32 tile;
//   2. an exact two-pass softmax: for up to 4 queries (decodes, short verifications)
//      along each query's gathered row, else down the tile's lanes; probabilities
//      are rounded to bfloat16 position pairs, as in the vector kernel's pair path;
//   3. P.V with AVX512-BF16 pair dot products, the queries' float32 accumulators in
//      registers.
// One call takes all KV heads of a request, so each 16-row slice of a cache block is
// read whole. Needs block_size % 16 == 0 and head_dim % 32 == 0; the caller checks.
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define SPECDEC_HAS_AMX 1

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <vector>

#include "attention_tile.h"
#include "vec16.h"

namespace specdec_kernels {

// Linux hands out AMX tile state only on request (arch_prctl XCOMP_PERM).
inline bool amx_usable() {
  static const bool ok = [] {
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0 .. count - 1 as 16 rows x 64 bytes, for this thread. Load before the tile
// kernels, _tile_release() after (oneDNN loads its own configuration).
inline void configure_full_tiles(int count) {
  TileConfig cfg;
  for (int t = 0; t < count; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// Two sets of tiles for attend_amx: 0/3 (scores), 1/4 (keys), 2/5 (queries).
inline void configure_attention_tiles() { configure_full_tiles(6); }

// dst[16 positions][16 queries] = K rows (stride bytes apart) . the queries' tile.
// GCC's tile intrinsics paste the tile number into the assembly, so each tile set
// (scores C, keys A, queries B) gets its own function.
#define SPECDEC_SCORE_TILE(NAME, C, A, B)                                                 \
  template <int64_t kSlices>                                                              \
  inline void NAME(const BFloat16* k, int64_t stride, const uint32_t (*qt)[16][16],       \
                   float* dst) {                                                          \
    _tile_zero(C);                                                                        \
    for (int64_t s = 0; s < kSlices; ++s) {                                               \
      _tile_loadd(A, k + 32 * s, stride);                                                 \
      _tile_loadd(B, qt[s], 64);                                                          \
      _tile_dpbf16ps(C, A, B);                                                            \
    }                                                                                     \
    _tile_stored(C, dst, 64);                                                             \
  }
SPECDEC_SCORE_TILE(score_tile_even, 0, 1, 2)
SPECDEC_SCORE_TILE(score_tile_odd, 3, 4, 5)
#undef SPECDEC_SCORE_TILE

struct AmxScratch {
  std::vector<float> scores;      // [positions][16 queries]
  std::vector<uint32_t> probs;    // [positions / 2][16 queries] bf16 pairs (p, p + 1)
  std::vector<float> rows;        // [4 queries][positions]
};

// Queries m0 .. m0 + mb of one KV head, as the right-hand tile and their masks.
template <int NV>
struct QueryBlock {
  static constexpr int64_t dim = NV * 16, slices = dim / 32;
  alignas(64) uint32_t qt[slices][16][16];  // qt[s][k][n] = q_n[32s + 2k .. + 1] (bf16 pair)
  alignas(64) int32_t first[16], last[16];
  BFloat16* out_row[16];
  int64_t lo, hi;

  void build(BFloat16* out, const BFloat16* q, int64_t q_start, int64_t q_len,
             int64_t ctx_len, int64_t kv_head, int64_t hq, int64_t group, int64_t m0, int mb,
             int64_t window) {
    std::fill(&qt[0][0][0], &qt[0][0][0] + slices * 256, 0u);
    lo = ctx_len;
    hi = 0;
    for (int n = 0; n < 16; ++n) {
      if (n >= mb) {  // unused lanes: no position passes the mask
        first[n] = INT_MAX;
        last[n] = -1;
        continue;
      }
      const int64_t m = m0 + n, i = m / group, head = kv_head * group + m % group;
      const uint32_t* src =
          reinterpret_cast<const uint32_t*>(q + ((q_start + i) * hq + head) * dim);
      for (int64_t pair = 0; pair < dim / 2; ++pair) qt[pair / 16][pair % 16][n] = src[pair];
      out_row[n] = out + ((q_start + i) * hq + head) * dim;
      last[n] = static_cast<int32_t>(ctx_len - q_len + i);
      first[n] =
          window > 0 ? static_cast<int32_t>(std::max<int64_t>(0, last[n] - window + 1)) : 0;
      lo = std::min<int64_t>(lo, first[n]);
      hi = std::max<int64_t>(hi, last[n] + 1);
    }
  }
};

// The sum of 16 partial sums in one fixed order, for floats or lane-wise for Vec16s:
// both softmax paths normalise a query with bit-identical sums, so a decode and the
// same query inside a verification give the same output.
template <typename T>
inline T tree_sum(const T* part) {
  T half[8], quarter[4];
  for (int i = 0; i < 8; ++i) half[i] = part[i] + part[i + 8];
  for (int i = 0; i < 4; ++i) quarter[i] = half[i] + half[i + 4];
  return (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]);
}

// Softmax down each lane of scores [positions base .. hi) x 16 queries: mask and
// scale in place, then exp into bf16 pairs (p, p + 1) per query; returns the sums.
inline void softmax_columns(float* scores, uint32_t* probs, int64_t base, int64_t hi,
                            const int32_t* first, const int32_t* last, float scale,
                            float* sums) {
  const __m512i first_v = _mm512_load_si512(first), last_v = _mm512_load_si512(last);
  const __m512 neg_inf = _mm512_set1_ps(kNegInf), scale_v = _mm512_set1_ps(scale);
  __m512 row_max = _mm512_set1_ps(-FLT_MAX);
  for (int64_t p = base; p < hi; ++p) {
    float* row = scores + (p - base) * 16;
    const __m512i pv = _mm512_set1_epi32(static_cast<int32_t>(p));
    const __mmask16 keep = _mm512_cmp_epi32_mask(pv, last_v, _MM_CMPINT_LE) &
                           _mm512_cmp_epi32_mask(pv, first_v, _MM_CMPINT_NLT);
    const __m512 x = _mm512_mask_mul_ps(neg_inf, keep, _mm512_loadu_ps(row), scale_v);
    _mm512_storeu_ps(row, x);
    row_max = _mm512_max_ps(row_max, x);
  }
  // Lane n of the result = (row p, row p + 1) of query n.
  const __m512i interleave = _mm512_set_epi16(
      31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
      23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  Vec16 partial[16];  // partial[j]: positions base + j (mod 16), as softmax_rows sums
  for (Vec16& v : partial) v = Vec16::zero();
  for (int64_t p = base; p < hi; p += 2) {
    const Vec16 a = (Vec16::load(scores + (p - base) * 16) - Vec16{row_max}).exp();
    const Vec16 b = p + 1 < hi
                        ? (Vec16::load(scores + (p + 1 - base) * 16) - Vec16{row_max}).exp()
                        : Vec16::zero();
    const int64_t j = (p - base) % 16;
    partial[j] = partial[j] + a;
    partial[j + 1] = partial[j + 1] + b;
    const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(b.v, a.v);  // [a | b]
    _mm512_storeu_si512(probs + (p - base) / 2 * 16,
                        _mm512_permutexvar_epi16(interleave, packed));
  }
  tree_sum(partial).store(sums);
}

// Softmax of queries 0 .. mb - 1 (mb <= 4: decodes, short verifications), one query
// at a time with lanes = positions, so no exp is spent on unused lanes: its column of
// the scores tiles is gathered into rows[n] (masked, scaled), then exponentiated into
// the bf16 row probs[n][span] (a position pair is one 32-bit word); sums[n] = its sum.
inline void softmax_rows(const float* scores, float* rows, BFloat16* probs, int64_t base,
                         int64_t span, int mb, const int32_t* first, const int32_t* last,
                         float scale, float* sums) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i column = _mm512_slli_epi32(lane, 4);  // lane * 16 floats
  const __m512 neg_inf = _mm512_set1_ps(kNegInf), scale_v = _mm512_set1_ps(scale);
  for (int n = 0; n < mb; ++n) {
    float* row = rows + n * span;
    const __m512i lo_n = _mm512_set1_epi32(first[n]), hi_n = _mm512_set1_epi32(last[n] + 1);
    __m512 row_max = _mm512_set1_ps(-FLT_MAX);
    for (int64_t c = 0; c < span; c += 16) {
      const __m512i p = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(base + c)));
      const __mmask16 keep = _mm512_cmp_epi32_mask(p, lo_n, _MM_CMPINT_NLT) &
                             _mm512_cmp_epi32_mask(p, hi_n, _MM_CMPINT_LT);
      const __m512 x = _mm512_mask_i32gather_ps(neg_inf, keep, column, scores + c * 16 + n, 4);
      const __m512 y = _mm512_mask_mul_ps(neg_inf, keep, x, scale_v);
      _mm512_storeu_ps(row + c, y);
      row_max = _mm512_max_ps(row_max, y);
    }
    const Vec16 top = Vec16::broadcast(_mm512_reduce_max_ps(row_max));
    Vec16 row_sum = Vec16::zero();
    for (int64_t c = 0; c < span; c += 16) {
      const Vec16 e = (Vec16::load(row + c) - top).exp();
      row_sum = row_sum + e;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(probs + n * span + c),
                          (__m256i)_mm512_cvtneps_pbh(e.v));
    }
    alignas(64) float lanes[16];
    row_sum.store(lanes);
    sums[n] = tree_sum(lanes);
  }
}

// out_row[m] = sum over positions of P[m] V / sums[m] for QN queries whose
// accumulators stay in registers. The bf16 pair (p, p + 1) of query m is
// probs[(p - base) / 2 * pair_stride + m * query_stride].
template <int NV, int QN>
void attend_values(const BFloat16* value_cache, const int32_t* table, int64_t block_size,
                   int64_t row_stride, int64_t head_offset, int64_t base, int64_t hi,
                   const uint32_t* probs, int64_t pair_stride, int64_t query_stride,
                   BFloat16* const* out_row, const float* sums) {
  static const BFloat16 zeros[NV * 16] = {};
  __m512 acc[QN][NV];
  for (int m = 0; m < QN; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int64_t p0 = base; p0 < hi; p0 += 16) {
    const BFloat16* rows =
        value_cache + cache_slot(table, p0, block_size) * row_stride + head_offset;
    const int64_t n = std::min<int64_t>(16, hi - p0);
    const uint32_t* pair = probs + (p0 - base) / 2 * pair_stride;
    for (int64_t j = 0; j < n; j += 2, pair += pair_stride) {
      const BFloat16* a = rows + j * row_stride;
      const BFloat16* b = j + 1 < n ? a + row_stride : zeros;
      __m512i pairs[NV];
      interleave_rows<NV>(a, b, pairs);
      for (int m = 0; m < QN; ++m) {
        const __m512bh w = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair[m * query_stride]));
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)pairs[v], w);
      }
    }
  }
  for (int m = 0; m < QN; ++m) store_pair_lanes<NV>(acc[m], out_row[m], 1.f / sums[m]);
}

// Queries per attend_values call: what fits in registers beside the value pairs.
template <int NV>
constexpr int kValueQueries = NV <= 4 ? 4 : NV == 8 ? 2 : 1;

template <int NV>
void attend_values_n(int count, const BFloat16* value_cache, const int32_t* table,
                     int64_t block_size, int64_t row_stride, int64_t head_offset, int64_t base,
                     int64_t hi, const uint32_t* probs, int64_t pair_stride,
                     int64_t query_stride, BFloat16* const* out_row, const float* sums) {
#define SPECDEC_VALUES(QN)                                                                    \
  return attend_values<NV, std::min(QN, kValueQueries<NV>)>(                                 \
      value_cache, table, block_size, row_stride, head_offset, base, hi, probs, pair_stride, \
      query_stride, out_row, sums)
  switch (count) {
    case 1: SPECDEC_VALUES(1);
    case 2: SPECDEC_VALUES(2);
    case 3: SPECDEC_VALUES(3);
    default: SPECDEC_VALUES(4);
  }
#undef SPECDEC_VALUES
}

// One request, all its KV heads: the chunk loop reads each 16-row slice of a cache
// block for every head at once, so K and V stream through contiguously.
template <int NV>
void attend_amx(BFloat16* out, const BFloat16* q, const BFloat16* key_cache,
                const BFloat16* value_cache, const int32_t* table, int64_t q_start,
                int64_t q_len, int64_t ctx_len, int64_t hq, int64_t hkv, int64_t block_size,
                float scale, int64_t window, AmxScratch& scratch) {
  static_assert(NV % 2 == 0, "head_dim must be a multiple of 32");
  constexpr int64_t dim = NV * 16, slices = dim / 32;
  constexpr int64_t kMaxHeads = 16;
  const int64_t group = hq / hkv, m_count = q_len * group, row_stride = hkv * dim;
  const int64_t row_bytes = row_stride * static_cast<int64_t>(sizeof(BFloat16));
  for (int64_t h0 = 0; h0 < hkv; h0 += kMaxHeads) {
    const int64_t heads = std::min(kMaxHeads, hkv - h0);
    for (int64_t m0 = 0; m0 < m_count; m0 += 16) {
      const int mb = static_cast<int>(std::min<int64_t>(16, m_count - m0));
      QueryBlock<NV> query[kMaxHeads];
      for (int64_t h = 0; h < heads; ++h)
        query[h].build(out, q, q_start, q_len, ctx_len, h0 + h, hq, group, m0, mb, window);
      // Every head's queries cover the same positions.
      const int64_t lo = query[0].lo, hi = query[0].hi;
      const int64_t base = lo / 16 * 16, span = (hi - base + 15) / 16 * 16;
      scratch.scores.resize(heads * span * 16);
      scratch.probs.resize(heads * span / 2 * 16);
      scratch.rows.resize(4 * span);

      // 1. scores^T per head, one AMX tile product per 16 positions.
      for (int64_t p0 = base; p0 < hi; p0 += 16) {
        const BFloat16* k = key_cache + cache_slot(table, p0, block_size) * row_stride + h0 * dim;
        float* dst = scratch.scores.data() + (p0 - base) * 16;
        // Alternate two tile sets so consecutive heads' products overlap.
        int64_t h = 0;
        for (; h + 1 < heads; h += 2) {
          score_tile_even<slices>(k + h * dim, row_bytes, query[h].qt, dst + h * span * 16);
          score_tile_odd<slices>(k + (h + 1) * dim, row_bytes, query[h + 1].qt,
                                 dst + (h + 1) * span * 16);
        }
        if (h < heads)
          score_tile_even<slices>(k + h * dim, row_bytes, query[h].qt, dst + h * span * 16);
      }

      for (int64_t h = 0; h < heads; ++h) {
        const QueryBlock<NV>& qb = query[h];
        const int64_t kv_head = h0 + h;
        uint32_t* probs = scratch.probs.data() + h * span / 2 * 16;
        alignas(64) float sums[16];
        const int64_t head_offset = kv_head * dim;
        float* scores = scratch.scores.data() + h * span * 16;
        // 2. softmax: per query (few queries), or down the lanes of the scores tiles.
        const bool by_row = mb <= 4;
        if (by_row)
          softmax_rows(scores, scratch.rows.data(), reinterpret_cast<BFloat16*>(probs), base,
                       span, mb, qb.first, qb.last, scale, sums);
        else
          softmax_columns(scores, probs, base, hi, qb.first, qb.last, scale, sums);
        const int64_t pair_stride = by_row ? 1 : 16, query_stride = by_row ? span / 2 : 1;
        // 3. out = P V, a register-full of queries at a time.
        for (int g0 = 0; g0 < mb; g0 += kValueQueries<NV>)
          attend_values_n<NV>(std::min(kValueQueries<NV>, mb - g0), value_cache, table,
                              block_size, row_stride, head_offset, base, hi,
                              probs + g0 * query_stride, pair_stride, query_stride,
                              qb.out_row + g0, sums + g0);
      }
    }
  }
}

}  // namespace specdec_kernels

#endif
