// The inner loop of paged attention: one (request, KV head) through its block table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "vec16.h"

namespace specdec_kernels {

// -------------------------------------------------------- paged attention ---

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Context positions per online-softmax step: four 16-lane score vectors share one max,
// one rescale and one sum (the reductions are a latency chain; 16 per step made a
// decode at batch 32 and 128 positions latency-bound).
constexpr int64_t kChunk = 64;
// K/V bytes of a call's context that later passes of its queries expect to find in L2
// (512 KB on Zen 3, 1-2 MB since).
constexpr int64_t kRowsKeptInL2 = 384 << 10;

// Lane j of the result = the sum of the lanes of part(j), j = 0 .. 15. The AVX-512 form
// asks for the parts in order and reduces each pair as it comes (a tree of unpacks and
// shuffles): a few vectors live, not sixteen.
template <typename Part>
inline Vec16 transpose_sum(const Part& part) {
#if defined(__AVX512F__)
  auto s = [&](int i) {
    const __m512 a = part(2 * i).v, b = part(2 * i + 1).v;
    return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  };
  auto u = [&](int i) {
    const __m512d a = _mm512_castps_pd(s(2 * i));
    const __m512d b = _mm512_castps_pd(s(2 * i + 1));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  };
  auto v = [&](int i) {
    const __m512 a = u(2 * i);
    const __m512 b = u(2 * i + 1);
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  const __m512 v0 = v(0);
  const __m512 v1 = v(1);
  return {_mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)))};
#else
  Vec16 parts[16];
  for (int j = 0; j < 16; ++j) parts[j] = part(j);
#if defined(__AVX2__) && defined(__FMA__)
  // Each part's halves added, then horizontal pairs (hadd) down to one sum per part.
  auto eight = [](const Vec16* p) {
    __m256 h[4];
    for (int i = 0; i < 4; ++i)
      h[i] = _mm256_hadd_ps(_mm256_add_ps(p[2 * i].lo, p[2 * i].hi),
                            _mm256_add_ps(p[2 * i + 1].lo, p[2 * i + 1].hi));
    const __m256 a = _mm256_hadd_ps(h[0], h[1]), b = _mm256_hadd_ps(h[2], h[3]);
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  };
  return {eight(parts), eight(parts + 8)};
#else
  Vec16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = parts[j].sum();
  return r;
#endif
#endif
}

#if defined(__AVX512BF16__)
constexpr bool kHasBf16Dot = true;
#else
constexpr bool kHasBf16Dot = false;
#endif

// bfloat16 heads with an even number of 16-lane vectors use the AVX512-BF16 pair
// dot product (two bf16 products per fp32 lane, exact products, fp32 sums).
template <typename T, int NV>
constexpr bool kPairDot = kHasBf16Dot && std::is_same_v<T, BFloat16> && NV % 2 == 0;

// One query head held in registers; dot() gives sixteen partial sums of q . k (k in
// the cache's dtype: T, or float16 under float32 queries).
template <typename T, int NV, bool Pair = kPairDot<T, NV>>
struct QueryTile {
  Vec16 q[NV];
  void load(const T* src) {
    for (int v = 0; v < NV; ++v) q[v] = Vec16::load(src + 16 * v);
  }
  template <typename K>
  Vec16 dot(const K* k) const {
    Vec16 acc = Vec16::zero();
    for (int v = 0; v < NV; ++v) acc = Vec16::fma(q[v], Vec16::load(k + 16 * v), acc);
    return acc;
  }
};

#if defined(__AVX512BF16__)
template <typename T, int NV>
struct QueryTile<T, NV, true> {
  __m512i q[NV / 2];
  void load(const T* src) {
    for (int h = 0; h < NV / 2; ++h) q[h] = _mm512_loadu_si512(src + 32 * h);
  }
  Vec16 dot(const T* k) const {
    __m512 acc = _mm512_setzero_ps();
    for (int h = 0; h < NV / 2; ++h)
      acc = _mm512_dpbf16_ps(acc, (__m512bh)q[h], (__m512bh)_mm512_loadu_si512(k + 32 * h));
    return {acc};
  }
};
#endif

// Output accumulators of kPass queries: acc[m] += p[m][j] * V[j] over a chunk.
// The generic form widens each V row once and runs fp32 FMAs. The bf16 pair form
// interleaves rows j and j+1 element-wise and multiplies by the bf16 pair
// (p[j], p[j+1]) with one dot instruction per 16 lanes (probabilities rounded to
// bf16, as flash attention kernels do); its lanes are in unpack order until store().
template <typename T, int NV, int kPass, bool Pair = kPairDot<T, NV>>
struct OutputTile {
  Vec16 acc[kPass][NV];
  void clear(int mb) {
    for (int m = 0; m < mb; ++m)
      for (int v = 0; v < NV; ++v) acc[m][v] = Vec16::zero();
  }
  void scale(int m, float c) {
    for (int v = 0; v < NV; ++v) acc[m][v] = acc[m][v] * Vec16::broadcast(c);
  }
  template <typename V>
  void add(const V* const* v_row, int64_t n, const float (*prob)[kChunk], int mb) {
#if !defined(__AVX512F__)
    // AVX2's 16 registers: one query's accumulators at a time (up to 4 vectors, 8
    // registers) stay in registers across the chunk's rows, which the next query reads
    // again from L1, instead of every query's loaded and stored at each row (bound by
    // the stores: a decode's attention at 2000 positions 1.14-1.26x slower on Zen 3).
    // Each element sums its rows in the same order either way: the same values.
    constexpr int kHeld = NV < 4 ? NV : 4;
    for (int m = 0; m < mb; ++m) {
      for (int v0 = 0; v0 < NV; v0 += kHeld) {
        Vec16 a[kHeld];
        for (int v = 0; v < kHeld; ++v) a[v] = acc[m][v0 + v];
        for (int64_t j = 0; j < n; ++j) {
          const Vec16 pj = Vec16::broadcast(prob[m][j]);
          for (int v = 0; v < kHeld; ++v)
            a[v] = Vec16::fma(pj, Vec16::load(v_row[j] + 16 * (v0 + v)), a[v]);
        }
        for (int v = 0; v < kHeld; ++v) acc[m][v0 + v] = a[v];
      }
    }
#else
    for (int64_t j = 0; j < n; ++j) {
      Vec16 value[NV];
      for (int v = 0; v < NV; ++v) value[v] = Vec16::load(v_row[j] + 16 * v);
      for (int m = 0; m < mb; ++m) {
        const Vec16 pj = Vec16::broadcast(prob[m][j]);
        for (int v = 0; v < NV; ++v) acc[m][v] = Vec16::fma(pj, value[v], acc[m][v]);
      }
    }
#endif
  }
  template <typename D>
  void store(int m, D* dst, float inv) const {
    for (int v = 0; v < NV; ++v) (acc[m][v] * Vec16::broadcast(inv)).store(dst + 16 * v);
  }
};

#if defined(__AVX512BF16__)
// Rows a and b (NV * 16 bf16 each) interleaved element-wise into pairs (a[i], b[i]),
// the operand of a pair dot product with a (p_a, p_b) weight; lanes in unpack order.
template <int NV, typename T>
inline void interleave_rows(const T* a, const T* b, __m512i* pairs) {
  for (int h = 0; h < NV / 2; ++h) {
    const __m512i x = _mm512_loadu_si512(a + 32 * h), y = _mm512_loadu_si512(b + 32 * h);
    pairs[2 * h] = _mm512_unpacklo_epi16(x, y);
    pairs[2 * h + 1] = _mm512_unpackhi_epi16(x, y);
  }
}

// Scale and store a bf16 head accumulated by pair dot products, whose lanes are in
// unpack order: acc[2h] lane 4L+k holds element 32h+8L+k, acc[2h+1] element 32h+8L+4+k.
template <int NV, typename D>
inline void store_pair_lanes(const __m512* acc, D* dst, float inv) {
  const __m512 scale = _mm512_set1_ps(inv);
  for (int h = 0; h < NV / 2; ++h) {
    const __m512 lo = _mm512_mul_ps(acc[2 * h], scale);
    const __m512 hi = _mm512_mul_ps(acc[2 * h + 1], scale);
    const __m512 first = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 second = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
    Vec16{_mm512_shuffle_f32x4(first, first, _MM_SHUFFLE(3, 1, 2, 0))}.store(dst + 32 * h);
    Vec16{_mm512_shuffle_f32x4(second, second, _MM_SHUFFLE(3, 1, 2, 0))}.store(dst + 32 * h + 16);
  }
}

// 16 floats rounded to bfloat16 as c10::BFloat16(float) rounds them (to nearest even,
// NaN to 0x7FC0, subnormals kept: VCVTNEPS2BF16 would flush them).
inline void round_bf16(const float* src, uint16_t* dst) {
  const __m512 x = _mm512_loadu_ps(src);
  const __m512i u = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(r));
}

template <typename T, int NV, int kPass>
struct OutputTile<T, NV, kPass, true> {
  __m512 acc[kPass][NV];  // acc[m][2h] lane 4L+k: element 32h+8L+k; [2h+1]: 32h+8L+4+k
  void clear(int mb) {
    for (int m = 0; m < mb; ++m)
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  }
  void scale(int m, float c) {
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_mul_ps(acc[m][v], _mm512_set1_ps(c));
  }
  void add(const T* const* v_row, int64_t n, const float (*prob)[kChunk], int mb) {
    static const BFloat16 zeros[NV * 16] = {};
    // Each query's probabilities rounded to bf16 once, 16 at a time, so that a pair
    // (p[j], p[j + 1]) is one 32-bit broadcast.
    alignas(64) uint16_t rounded[kPass][kChunk];
    for (int m = 0; m < mb; ++m)
      for (int64_t s = 0; s < kChunk; s += 16) round_bf16(prob[m] + s, rounded[m] + s);
    for (int64_t j = 0; j < n; j += 2) {
      const T* a = v_row[j];
      const T* b = j + 1 < n ? v_row[j + 1] : zeros;
      __m512i pairs[NV];
      interleave_rows<NV>(a, b, pairs);
      for (int m = 0; m < mb; ++m) {
        uint32_t pair;
        std::memcpy(&pair, rounded[m] + j, sizeof pair);
        // Past the chunk's last row (odd n) the pair's second half meets the zero row.
        const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)pairs[v], p);
      }
    }
  }
  template <typename D>
  void store(int m, D* dst, float inv) const { store_pair_lanes<NV>(acc[m], dst, inv); }
};
#endif

// Queries that share a pass over the K/V rows: their output accumulators (NV vectors
// each) stay in registers, about 24 of AVX-512's 32. AVX2's 16 registers hold one
// query's at a time (OutputTile::add), so a pass takes more queries, each pass being a
// read of the context: 16 (a 5-token verification's 15 queries of a KV head in one
// pass: 1.3x faster than 4 at 2000 positions on Zen 3; a decode's 3 in either).
constexpr int queries_per_pass(int nv) {
#if defined(__AVX512F__)
  return std::clamp(24 / nv, 1, 8);
#else
  (void)nv;
  return 16;
#endif
}

// The cache slot of context position p through a request's block table.
inline int64_t cache_slot(const int32_t* table, int64_t p, int64_t block_size) {
  return static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
}

// Ask for the K/V rows of positions p0 .. p1 (one KV head's: row_bytes at offset).
template <typename T>
inline void prefetch_positions(const int32_t* table, int64_t p0, int64_t p1, int64_t block_size,
                               const T* key_cache, const T* value_cache, int64_t row_stride,
                               int64_t offset, int64_t row_bytes) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t slot = cache_slot(table, p, block_size);
    const char* k = reinterpret_cast<const char*>(key_cache + slot * row_stride + offset);
    const char* v = reinterpret_cast<const char*>(value_cache + slot * row_stride + offset);
    for (int64_t b = 0; b < row_bytes; b += 64) {
      __builtin_prefetch(k + b);
      __builtin_prefetch(v + b);
    }
  }
}

// The cache row of each of a request's context positions p0 .. p1 for one KV head
// (element offset slot * row_stride + head_offset), block by block through its table.
inline void row_offsets(const int32_t* table, int64_t p0, int64_t p1, int64_t block_size,
                        int64_t row_stride, int64_t head_offset, int64_t* dst) {
  for (int64_t p = p0; p < p1;) {
    const int64_t block = p / block_size, in_block = p % block_size;
    const int64_t end = std::min(p1, (block + 1) * block_size);
    const int64_t first_slot = static_cast<int64_t>(table[block]) * block_size + in_block;
    for (int64_t i = 0; i < end - p; ++i)
      dst[p - p0 + i] = (first_slot + i) * row_stride + head_offset;
    p = end;
  }
}

// A thread's buffer of at least n row offsets, kept across calls.
inline int64_t* row_offset_buffer(int64_t n) {
  thread_local std::vector<int64_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

// Ask for the K/V rows at offsets[0 .. n) (row_bytes each) while the chunk before computes.
template <typename T>
inline void prefetch_rows(const int64_t* offsets, int64_t n, const T* key_cache,
                          const T* value_cache, int64_t row_bytes) {
  for (int64_t j = 0; j < n; ++j) {
    const char* k = reinterpret_cast<const char*>(key_cache + offsets[j]);
    const char* v = reinterpret_cast<const char*>(value_cache + offsets[j]);
    for (int64_t b = 0; b < row_bytes; b += 64) {
      __builtin_prefetch(k + b);
      __builtin_prefetch(v + b);
    }
  }
}

// ---------------------------------------------------- position partitions ---
// A long context is read in partitions of partition_size() positions (vLLM's paged
// attention v2, flash-decoding): each (request, KV head, partition) is a task of its
// own, so a decode's few KV heads still split evenly across threads and no two threads
// read the same rows. A query whose positions fall in one partition is computed whole,
// as without partitions; one spanning several leaves each partition's unnormalised
// output, max and sum (Partials), merged in partition order (merge_partitions). The
// boundaries are fixed multiples of the size, so a query's values depend on its
// position and context only, never on the batch, the chunk or the threads.
inline int64_t& partition_size_setting() {
  static int64_t size = 512;  // a multiple of kChunk
  return size;
}
inline int64_t partition_size() { return partition_size_setting(); }

// The positions query i of a request reads: [first, last].
struct QuerySpan {
  int64_t first, last;
  int64_t first_part(int64_t size) const { return first / size; }
  int64_t last_part(int64_t size) const { return last / size; }
  bool split(int64_t size) const { return first / size != last / size; }
};

inline QuerySpan query_span(int64_t ctx_len, int64_t q_len, int64_t i, int64_t window) {
  const int64_t last = ctx_len - q_len + i;
  return {window > 0 ? std::max<int64_t>(0, last - window + 1) : 0, last};
}

// The partitions a request's queries read: [first, last].
inline std::pair<int64_t, int64_t> request_parts(int64_t ctx_len, int64_t q_len,
                                                 int64_t window) {
  const int64_t size = partition_size();
  return {query_span(ctx_len, q_len, 0, window).first / size, (ctx_len - 1) / size};
}

// Where queries spanning several partitions leave each one's result: for query row t,
// query head h, partition p (of at most max_parts), acc[((t * hq + h) * max_parts + p) *
// dim ..] the unnormalised output and stats[.. * 2] its max and sum.
struct Partials {
  float* acc = nullptr;
  float* stats = nullptr;
  int64_t hq = 0, max_parts = 0, dim = 0;
  int64_t slot(int64_t t, int64_t h, int64_t p) const { return (t * hq + h) * max_parts + p; }
};

// Query row t, head h (positions span) from its partitions' results, in partition order:
// out = sum_p e^(m_p - m) acc_p / sum_p e^(m_p - m) l_p, m the largest m_p.
template <typename T>
inline void merge_partitions(T* out, const Partials& partials, int64_t t, int64_t h,
                             const QuerySpan& span) {
  const int64_t size = partition_size(), p0 = span.first_part(size), p1 = span.last_part(size);
  const float* stats = partials.stats + 2 * partials.slot(t, h, 0);
  float top = kNegInf;
  for (int64_t p = p0; p <= p1; ++p) top = std::max(top, stats[2 * p]);
  float sum = 0.f;
  for (int64_t p = p0; p <= p1; ++p) sum += std::exp(stats[2 * p] - top) * stats[2 * p + 1];
  const Vec16 inv = Vec16::broadcast(1.f / sum);
  for (int64_t d = 0; d < partials.dim; d += 16) {
    Vec16 acc = Vec16::zero();
    for (int64_t p = p0; p <= p1; ++p)
      acc = Vec16::fma(Vec16::broadcast(std::exp(stats[2 * p] - top)),
                       Vec16::load(partials.acc + partials.slot(t, h, p) * partials.dim + d), acc);
    (acc * inv).store(out + d);
  }
}

// One (request, KV head, partition): its queries (query heads g0 .. g1 of the G sharing
// the KV head, each of the request's q_len rows) that read positions in partition part
// attend causally to them through the request's block table. A query whose positions
// are all in this partition is written to out, normalised; one spanning several leaves
// this partition's part in partials. A query's values do not depend on the others run
// with it: any split of a group's heads gives the same output.
// Up to kPass queries at a time keep their accumulators in registers; positions go
// in chunks of kChunk with an online softmax, each K/V row read once per pass.
// The cache holds C: T, or float16 under float32 queries (widened as loaded: the
// result is that of a float32 cache holding the same half values).
template <typename T, int NV, typename C = T>
void attend_one(T* out, const T* q, const C* key_cache, const C* value_cache,
                const int32_t* table, int64_t q_start, int64_t q_len, int64_t ctx_len,
                int64_t kv_head, int64_t hq, int64_t hkv, int64_t block_size, float scale,
                int64_t window, int64_t g0, int64_t g1, int64_t part, const Partials& partials) {
  constexpr int kPass = queries_per_pass(NV);
  constexpr bool kPair = kPairDot<T, NV> && std::is_same_v<C, T>;
  constexpr int64_t dim = NV * 16;
  const int64_t group = hq / hkv, span = g1 - g0;
  const int64_t row_stride = hkv * dim;
  const int64_t size = partition_size(), part_lo = part * size, part_hi = part_lo + size;
  // The queries reading this partition: rows i_lo .. i_hi (first and last grow with i).
  int64_t i_lo = 0, i_hi = q_len;
  while (i_lo < q_len && query_span(ctx_len, q_len, i_lo, window).last < part_lo) ++i_lo;
  while (i_hi > i_lo && query_span(ctx_len, q_len, i_hi - 1, window).first >= part_hi) --i_hi;
  if (i_hi <= i_lo) return;
  // Every position any query of the call reads, from its first chunk's start: their
  // cache rows looked up once, not per pass of queries.
  const int64_t first_read =
      std::max(part_lo, query_span(ctx_len, q_len, i_lo, window).first);
  const int64_t end_read = std::min(ctx_len, part_hi);
  const int64_t base = first_read / kChunk * kChunk;
  int64_t* const offsets = row_offset_buffer(end_read - base);
  row_offsets(table, base, end_read, block_size, row_stride, kv_head * dim, offsets);
  const int64_t m_end = i_hi * span;
  for (int64_t m0 = i_lo * span; m0 < m_end; m0 += kPass) {
    const int mb = static_cast<int>(std::min<int64_t>(kPass, m_end - m0));
    QueryTile<T, NV, kPair> query[kPass];
    OutputTile<T, NV, kPass, kPair> output;
    int64_t row[kPass], head_of[kPass];
    bool whole[kPass];
    int64_t first[kPass], last[kPass];
    float row_max[kPass], row_sum[kPass];
    int64_t lo = ctx_len, hi = 0;
    for (int mi = 0; mi < mb; ++mi) {
      const int64_t m = m0 + mi, i = m / span, head = kv_head * group + g0 + m % span;
      row[mi] = q_start + i;
      head_of[mi] = head;
      query[mi].load(q + (row[mi] * hq + head) * dim);
      const QuerySpan positions = query_span(ctx_len, q_len, i, window);
      whole[mi] = !positions.split(size);
      first[mi] = std::max(positions.first, part_lo);
      last[mi] = std::min(positions.last, part_hi - 1);
      row_max[mi] = kNegInf;
      row_sum[mi] = 0.f;
      lo = std::min(lo, first[mi]);
      hi = std::max(hi, last[mi] + 1);
    }
    output.clear(mb);
    // The first pass asks for each chunk's rows ahead; the next passes find them in
    // L2 while the call's rows fit there.
    const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(C));
    const bool ask_ahead = m0 == i_lo * span || 2 * (hi - lo) * row_bytes > kRowsKeptInL2;
    alignas(64) float prob[kPass][kChunk];
    static const C zero_row[NV * 16] = {};
    const C* k_row[kChunk];
    const C* v_row[kChunk];
    for (int64_t p0 = lo / kChunk * kChunk; p0 < hi; p0 += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, hi - p0);
      const int64_t* chunk_rows = offsets + (p0 - base);
      for (int64_t j = 0; j < n; ++j) {
        k_row[j] = key_cache + chunk_rows[j];
        v_row[j] = value_cache + chunk_rows[j];
      }
      for (int64_t j = n; j < kChunk; ++j) k_row[j] = zero_row;
      if (ask_ahead && p0 + kChunk < hi)
        prefetch_rows(chunk_rows + kChunk, std::min<int64_t>(kChunk, hi - p0 - kChunk), key_cache,
                      value_cache, row_bytes);
      for (int mi = 0; mi < mb; ++mi) {
        const int64_t j_lo = std::max<int64_t>(0, first[mi] - p0);
        const int64_t j_hi = std::min<int64_t>(n, last[mi] - p0 + 1);
        if (j_hi <= j_lo) {
          for (int64_t s = 0; s < kChunk; s += 16) Vec16::zero().store(prob[mi] + s);
          continue;
        }
        Vec16 scores[kChunk / 16];
        Vec16 top = Vec16::broadcast(kNegInf);
        for (int64_t s = 0; s < kChunk; s += 16) {
          const int64_t a = std::max<int64_t>(j_lo, s), b = std::min<int64_t>(j_hi, s + 16);
          if (b <= a) {
            scores[s / 16] = Vec16::broadcast(kNegInf);
            continue;
          }
          // Rows outside [a, b) (a zero row past the chunk's end) only reach their own
          // lanes, which keep_range masks.
          const C* const* rows = k_row + s;
          const Vec16 sums = transpose_sum([&](int j) { return query[mi].dot(rows[j]); });
          scores[s / 16] = (sums * Vec16::broadcast(scale)).keep_range(a - s, b - s, kNegInf);
          top = Vec16::max(top, scores[s / 16]);
        }
        const float new_max = std::max(row_max[mi], top.max());
        const float correction = std::exp(row_max[mi] - new_max);  // 0 on the first chunk
        Vec16 total = Vec16::zero();
        for (int64_t s = 0; s < kChunk; s += 16) {
          const Vec16 probs = (scores[s / 16] - Vec16::broadcast(new_max)).exp();
          probs.store(prob[mi] + s);
          total = total + probs;
        }
        row_sum[mi] = row_sum[mi] * correction + total.sum();
        row_max[mi] = new_max;
        if (correction != 1.f) output.scale(mi, correction);
      }
      output.add(v_row, n, prob, mb);
    }
    for (int mi = 0; mi < mb; ++mi) {
      if (whole[mi]) {
        output.store(mi, out + (row[mi] * hq + head_of[mi]) * dim, 1.f / row_sum[mi]);
        continue;
      }
      const int64_t slot = partials.slot(row[mi], head_of[mi], part);
      output.store(mi, partials.acc + slot * dim, 1.f);
      partials.stats[2 * slot] = row_max[mi];
      partials.stats[2 * slot + 1] = row_sum[mi];
    }
  }
}

}  // namespace specdec_kernels
