// Batch-invariant bfloat16 projections on AVX-512 (the avx512_bf16 dot product where
// the build targets it): y[T, N] = x[T, K] W^T (+ bias), float32 accumulation and one
// rounding to bfloat16 at the end.
//
// oneDNN picks its blocking, and so its summation order, by the number of rows, so a
// row's result depends on the batch it runs in. Here each output element is one
// chain over k in a fixed order: K is never split, threads split only the output
// columns, and every row tile (6 rows, or fewer at the end) runs the same
// instructions per row. A row is bit-identical whatever T, its position in x and the
// thread count.
//
// W is packed once into groups of 64 output columns (the last group narrower), each
// [K/2][width][2]: per k-pair the group's columns' two weights side by side, which
// _mm512_dpbf16_ps reads as 16 columns x 2 k per vector. A row tile shares each
// weight load, so a 64-row decode batch reads W from memory once (and from L2 per
// tile); rows come in blocks whose activations stay in L2 while W streams past.
#pragma once

#if defined(__AVX512F__)

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nontemporal.h"
#include "vec16.h"

namespace specdec_kernels {

constexpr int64_t kInvGroup = 64;  // output columns per packed group: four vectors
#if defined(__AVX512BF16__)
constexpr int kInvRows = 6;  // 24 accumulators + 4 weights + a broadcast: 29 registers
#else
constexpr int kInvRows = 4;  // the widening path needs two registers per weight vector
#endif
constexpr int64_t kInvRowBlockBytes = 256 * 1024;  // activations kept in L2 per pass

// W [n, k] (k even) -> groups of 64 columns, each [k/2][width][2]: n * k values.
inline void pack_bf16_invariant_layout(const uint16_t* w, uint16_t* out, int64_t n,
                                       int64_t k) {
  const int64_t pairs = k / 2, groups = (n + kInvGroup - 1) / kInvGroup;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t c0 = g * kInvGroup, width = std::min(kInvGroup, n - c0);
      uint16_t* dst = out + c0 * k;
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t c = 0; c < width; ++c) {
          const uint16_t* src = w + (c0 + c) * k + 2 * p;
          *dst++ = src[0];
          *dst++ = src[1];
        }
    }
  });
}

// acc += x pair * w pair, per lane: the one multiply-add of every (row, column, k-pair).
inline __m512 inv_dot(__m512 acc, __m512i x_pair, __m512i w_pair) {
#if defined(__AVX512BF16__)
  return _mm512_dpbf16_ps(acc, (__m512bh)x_pair, (__m512bh)w_pair);
#else
  // bf16 x bf16 products are exact in float32, so mul + add rounds like the FMA.
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x_pair, 16)),
                        _mm512_castsi512_ps(_mm512_slli_epi32(w_pair, 16)), acc);
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x_pair, hi)),
                         _mm512_castsi512_ps(_mm512_and_si512(w_pair, hi)), acc);
#endif
}

// float32 -> bf16 bits (round to nearest even) in 16 words.
inline __m256i inv_round(__m512 v) {
#if defined(__AVX512BF16__)
  return (__m256i)_mm512_cvtneps_pbh(v);
#else
  return _mm512_cvtepi32_epi16(Vec16::rne_bits(v));
#endif
}

// R rows x C vectors of one column group: x rows r .. r + R (row stride k), the
// group's packed weights wg (stride 2 * width per k-pair), y columns c0 ...
// `last` masks the lanes of the last vector that are columns (width may end mid-vector).
template <int R, int C, typename Out>
inline void inv_tile(const BFloat16* x, int64_t k, const uint16_t* wg, int64_t width,
                     const float* bias, Out* y, int64_t n, __mmask16 last, bool once) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t stride = 2 * width, pairs = k / 2;
  const uint16_t* xr = reinterpret_cast<const uint16_t*>(x);
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* wp = wg + p * stride;
    if (once) stream_once(wp, 2 * stride);
    __m512i wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      wv[c] = c + 1 < C ? _mm512_loadu_si512(wp + 32 * c)
                        : _mm512_maskz_loadu_epi32(last, wp + 32 * c);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, xr + r * k + 2 * p, sizeof(pair));
      const __m512i xv = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = inv_dot(acc[r][c], xv, wv[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    const __mmask16 keep = c + 1 < C ? static_cast<__mmask16>(0xFFFF) : last;
    const __m512 b = bias ? _mm512_maskz_loadu_ps(keep, bias + 16 * c) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i bf = inv_round(_mm512_add_ps(acc[r][c], b));
      if constexpr (std::is_same_v<Out, BFloat16>) {
        _mm256_mask_storeu_epi16(y + r * n + 16 * c, keep, bf);
      } else {
        _mm512_mask_storeu_ps(y + r * n + 16 * c, keep,
                              _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf), 16)));
      }
    }
  }
}

template <int C, typename Out>
inline void inv_rows(int64_t rows, const BFloat16* x, int64_t k, const uint16_t* wg,
                     int64_t width, const float* bias, Out* y, int64_t n, __mmask16 last,
                     bool once) {
  switch (rows) {
    case 1: return inv_tile<1, C>(x, k, wg, width, bias, y, n, last, once);
    case 2: return inv_tile<2, C>(x, k, wg, width, bias, y, n, last, once);
    case 3: return inv_tile<3, C>(x, k, wg, width, bias, y, n, last, once);
    case 4: return inv_tile<4, C>(x, k, wg, width, bias, y, n, last, once);
#if defined(__AVX512BF16__)
    case 5: return inv_tile<5, C>(x, k, wg, width, bias, y, n, last, once);
    case 6: return inv_tile<6, C>(x, k, wg, width, bias, y, n, last, once);
#endif
  }
}

// y [m, n] = x [m, k] W^T (+ bias, float32 [n]); w from pack_bf16_invariant_layout.
template <typename Out>
void bf16_invariant_rows(const BFloat16* x, const uint16_t* w, const float* bias, Out* y,
                         int64_t m, int64_t n, int64_t k) {
  const int64_t groups = (n + kInvGroup - 1) / kInvGroup;
  // The row block only orders the work for the caches: no row's arithmetic sees it.
  const int64_t row_block =
      std::max<int64_t>(1, kInvRowBlockBytes / (2 * k) / kInvRows) * kInvRows;
  // One row tile reads each weight once (nontemporal.h); more re-read it from L2.
  const bool once = m <= kInvRows && stream_weights_once();
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t r0 = 0; r0 < m; r0 += row_block) {
      const int64_t r1 = std::min(m, r0 + row_block);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t c0 = g * kInvGroup, width = std::min(kInvGroup, n - c0);
        const uint16_t* wg = w + c0 * k;
        const float* b = bias ? bias + c0 : nullptr;
        const int vectors = static_cast<int>((width + 15) / 16);
        const int64_t tail = width - 16 * (vectors - 1);
        const __mmask16 last = static_cast<__mmask16>(tail == 16 ? 0xFFFF : (1u << tail) - 1);
        for (int64_t r = r0; r < r1; r += kInvRows) {
          const int64_t rows = std::min<int64_t>(kInvRows, r1 - r);
          const BFloat16* xr = x + r * k;
          Out* yr = y + r * n + c0;
          switch (vectors) {
            case 1: inv_rows<1>(rows, xr, k, wg, width, b, yr, n, last, once); break;
            case 2: inv_rows<2>(rows, xr, k, wg, width, b, yr, n, last, once); break;
            case 3: inv_rows<3>(rows, xr, k, wg, width, b, yr, n, last, once); break;
            default: inv_rows<4>(rows, xr, k, wg, width, b, yr, n, last, once); break;
          }
        }
      }
    }
  });
}

}  // namespace specdec_kernels

#endif
