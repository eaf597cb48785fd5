// The inner loop of paged attention: one (request, KV head) through its block table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "vec16.h"

namespace specdec_kernels {

// -------------------------------------------------------- paged attention ---

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Context positions per online-softmax step: four 16-lane score vectors share one max,
// one rescale and one sum (the reductions are a latency chain; 16 per step made a
// decode at batch 32 and 128 positions latency-bound).
constexpr int64_t kChunk = 64;

// Lane j of the result = the sum of the lanes of parts[j].
inline Vec16 transpose_sum(const Vec16* parts) {
#if defined(__AVX512F__)
  __m512 s[8], u[4], v[2];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = parts[2 * i].v, b = parts[2 * i + 1].v;
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(s[2 * i]), b = _mm512_castps_pd(s[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; ++i)
    v[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return {_mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)))};
#elif defined(__AVX2__) && defined(__FMA__)
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

// One query head held in registers; dot() gives sixteen partial sums of q . k.
template <typename T, int NV, bool Pair = kPairDot<T, NV>>
struct QueryTile {
  Vec16 q[NV];
  void load(const T* src) {
    for (int v = 0; v < NV; ++v) q[v] = Vec16::load(src + 16 * v);
  }
  Vec16 dot(const T* k) const {
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
  void add(const T* const* v_row, int64_t n, const float (*prob)[kChunk], int mb) {
    for (int64_t j = 0; j < n; ++j) {
      Vec16 value[NV];
      for (int v = 0; v < NV; ++v) value[v] = Vec16::load(v_row[j] + 16 * v);
      for (int m = 0; m < mb; ++m) {
        const Vec16 pj = Vec16::broadcast(prob[m][j]);
        for (int v = 0; v < NV; ++v) acc[m][v] = Vec16::fma(pj, value[v], acc[m][v]);
      }
    }
  }
  void store(int m, T* dst, float inv) const {
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
template <int NV>
inline void store_pair_lanes(const __m512* acc, BFloat16* dst, float inv) {
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
  static uint32_t bf16_pair(float lo, float hi) {
    return static_cast<uint32_t>(BFloat16(lo).x) | (static_cast<uint32_t>(BFloat16(hi).x) << 16);
  }
  void add(const T* const* v_row, int64_t n, const float (*prob)[kChunk], int mb) {
    static const BFloat16 zeros[NV * 16] = {};
    for (int64_t j = 0; j < n; j += 2) {
      const T* a = v_row[j];
      const T* b = j + 1 < n ? v_row[j + 1] : zeros;
      __m512i pairs[NV];
      interleave_rows<NV>(a, b, pairs);
      for (int m = 0; m < mb; ++m) {
        const float next = j + 1 < n ? prob[m][j + 1] : 0.f;
        const __m512bh p = (__m512bh)_mm512_set1_epi32(bf16_pair(prob[m][j], next));
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)pairs[v], p);
      }
    }
  }
  void store(int m, T* dst, float inv) const { store_pair_lanes<NV>(acc[m], dst, inv); }
};
#endif

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

// Ask for the next chunk's K/V rows while this one computes.
template <typename T>
inline void prefetch_chunk(const int32_t* table, int64_t p0, int64_t hi, int64_t block_size,
                           const T* key_cache, const T* value_cache, int64_t row_stride,
                           int64_t offset, int64_t row_bytes) {
  prefetch_positions(table, p0, std::min<int64_t>(p0 + kChunk, hi), block_size, key_cache,
                     value_cache, row_stride, offset, row_bytes);
}

// One (request, KV head): its M = q_len x (g1 - g0) queries (query heads g0 .. g1 of
// the G sharing the KV head) attend causally to the request's context through its
// block table. A query's values do not depend on the others run with it: any split of
// a group's heads gives the same output.
// Up to kPass queries at a time keep their accumulators in registers; positions go
// in chunks of kChunk with an online softmax, each K/V row read once per pass.
template <typename T, int NV>
void attend_one(T* out, const T* q, const T* key_cache, const T* value_cache,
                const int32_t* table, int64_t q_start, int64_t q_len, int64_t ctx_len,
                int64_t kv_head, int64_t hq, int64_t hkv, int64_t block_size, float scale,
                int64_t window, int64_t g0, int64_t g1) {
  constexpr int kPass = 4;
  constexpr int64_t dim = NV * 16;
  const int64_t group = hq / hkv, span = g1 - g0, m_count = q_len * span;
  const int64_t row_stride = hkv * dim;
  for (int64_t m0 = 0; m0 < m_count; m0 += kPass) {
    const int mb = static_cast<int>(std::min<int64_t>(kPass, m_count - m0));
    QueryTile<T, NV> query[kPass];
    OutputTile<T, NV, kPass> output;
    T* out_row[kPass];
    int64_t first[kPass], last[kPass];
    float row_max[kPass], row_sum[kPass];
    int64_t lo = ctx_len, hi = 0;
    for (int mi = 0; mi < mb; ++mi) {
      const int64_t m = m0 + mi, i = m / span, head = kv_head * group + g0 + m % span;
      query[mi].load(q + ((q_start + i) * hq + head) * dim);
      out_row[mi] = out + ((q_start + i) * hq + head) * dim;
      last[mi] = ctx_len - q_len + i;
      first[mi] = window > 0 ? std::max<int64_t>(0, last[mi] - window + 1) : 0;
      row_max[mi] = kNegInf;
      row_sum[mi] = 0.f;
      lo = std::min(lo, first[mi]);
      hi = std::max(hi, last[mi] + 1);
    }
    output.clear(mb);
    alignas(64) float prob[kPass][kChunk];
    const T* k_row[kChunk];
    const T* v_row[kChunk];
    Vec16 parts[16];
    for (int64_t p0 = lo / kChunk * kChunk; p0 < hi; p0 += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, hi - p0);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t slot = cache_slot(table, p0 + j, block_size);
        k_row[j] = key_cache + slot * row_stride + kv_head * dim;
        v_row[j] = value_cache + slot * row_stride + kv_head * dim;
      }
      prefetch_chunk(table, p0 + kChunk, hi, block_size, key_cache, value_cache, row_stride,
                     kv_head * dim, dim * static_cast<int64_t>(sizeof(T)));
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
          for (int64_t j = 0; j < 16; ++j) parts[j] = Vec16::zero();
          for (int64_t j = a; j < b; ++j) parts[j - s] = query[mi].dot(k_row[j]);
          scores[s / 16] = (transpose_sum(parts) * Vec16::broadcast(scale))
                               .keep_range(a - s, b - s, kNegInf);
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
    for (int mi = 0; mi < mb; ++mi) output.store(mi, out_row[mi], 1.f / row_sum[mi]);
  }
}

}  // namespace specdec_kernels
