// One row (or one token) of the decoder's small elementwise operations: residual add +
// RMSNorm, SiLU(gate) * up, RoPE + KV-cache write. cpu_kernels.cpp runs them over a
// step's rows in parallel regions; gguf_stack.h runs them inside its one region. Both
// call these, so a row's values never depend on which path or thread computed it.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "vec16.h"

namespace specdec_kernels {

// res += add (rounded to T, as an eager add would; add may be null);
// out = res * rsqrt(mean(res^2) + eps) * weight, one rounding.
template <typename T>
inline void add_rms_norm_row(T* out, T* res, const T* add, const T* weight, int64_t n,
                             float eps) {
  const int64_t nv = n / 16 * 16;
  Vec16 sum_sq = Vec16::zero();
  float tail_sq = 0.f;
  for (int64_t i = 0; i < nv; i += 16) {
    Vec16 h = Vec16::load(res + i);
    if (add) {
      h = round_to<T>(h + Vec16::load(add + i));
      h.store(res + i);
    }
    sum_sq = Vec16::fma(h, h, sum_sq);
  }
  for (int64_t i = nv; i < n; ++i) {
    if (add) res[i] = from_f<T>(to_f(res[i]) + to_f(add[i]));
    tail_sq += to_f(res[i]) * to_f(res[i]);
  }
  const float rstd = 1.f / std::sqrt((sum_sq.sum() + tail_sq) / static_cast<float>(n) + eps);
  const Vec16 scale = Vec16::broadcast(rstd);
  for (int64_t i = 0; i < nv; i += 16)
    (Vec16::load(res + i) * scale * Vec16::load(weight + i)).store(out + i);
  for (int64_t i = nv; i < n; ++i) out[i] = from_f<T>(to_f(res[i]) * rstd * to_f(weight[i]));
}

// out[i] = silu(gate[i]) * up[i] for i in i0 .. i1; i0 and i1 multiples of 16 (or i1
// the row's end), so an element takes the same (vector or scalar) path in any range.
template <typename T>
inline void silu_mul_range(T* out, const T* gate, const T* up, int64_t i0, int64_t i1) {
  const Vec16 one = Vec16::broadcast(1.f), zero = Vec16::zero();
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const Vec16 g = Vec16::load(gate + i);
    (g / (one + (zero - g).exp()) * Vec16::load(up + i)).store(out + i);
  }
  for (; i < i1; ++i) {
    const float g = to_f(gate[i]);
    out[i] = from_f<T>(g / (1.f + std::exp(-g)) * to_f(up[i]));
  }
}

// x*cos + rotate_half(x)*sin with each product and the sum rounded to T, exactly as
// the eager formulation rounds (no fused multiply-add: built with -ffp-contract=off);
// stored in D (a key into a float16 cache: that sum rounded once more, to half).
template <typename T, typename D = T>
inline void rope(D* dst, const T* x, const T* cos, const T* sin, int64_t dim) {
  const int64_t half = dim / 2, nv = half / 16 * 16;
  const Vec16 zero = Vec16::zero();
  for (int64_t i = 0; i < nv; i += 16) {
    const Vec16 a = Vec16::load(x + i), b = Vec16::load(x + half + i);
    round_to<T>(round_to<T>(a * Vec16::load(cos + i)) +
                round_to<T>((zero - b) * Vec16::load(sin + i)))
        .store(dst + i);
    round_to<T>(round_to<T>(b * Vec16::load(cos + half + i)) +
                round_to<T>(a * Vec16::load(sin + half + i)))
        .store(dst + half + i);
  }
  for (int64_t i = nv; i < half; ++i) {
    const float a = to_f(x[i]), b = to_f(x[i + half]);
    const float lo = to_f(from_f<T>(a * to_f(cos[i]))) + to_f(from_f<T>(-b * to_f(sin[i])));
    const float hi = to_f(from_f<T>(b * to_f(cos[i + half]))) +
                     to_f(from_f<T>(a * to_f(sin[i + half])));
    dst[i] = from_f<D>(to_f(from_f<T>(lo)));
    dst[i + half] = from_f<D>(to_f(from_f<T>(hi)));
  }
}

// One token: rotated queries into q_out [hq, dim]; rotated key and value written at the
// token's cache slot (k_slot, v_slot: [hkv, dim] each, in the cache's dtype C). src is
// its q | k | v row.
template <typename T, typename C>
inline void rope_write_token(T* q_out, const T* src, const T* cos, const T* sin, C* k_slot,
                             C* v_slot, int64_t hq, int64_t hkv, int64_t dim) {
  for (int64_t h = 0; h < hq; ++h) rope(q_out + h * dim, src + h * dim, cos, sin, dim);
  for (int64_t h = 0; h < hkv; ++h) rope(k_slot + h * dim, src + (hq + h) * dim, cos, sin, dim);
  convert_row(v_slot, src + (hq + hkv) * dim, hkv * dim);
}

}  // namespace specdec_kernels
