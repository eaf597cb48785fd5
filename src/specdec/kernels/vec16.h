// Vec16: sixteen float lanes for the CPU kernels (AVX-512, AVX2 + FMA or a portable
// fallback), with exact bfloat16 <-> float conversions, and IEEE half ones (KV caches).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace specdec_kernels {

using c10::BFloat16;
using c10::Half;

// exp(x) on the x86 forms: n = round(x log2 e), r = x - n ln 2 (ln 2 in two parts),
// exp(r) by Taylor (coefficients highest first), times 2^n; x clamped above, 0 below.
constexpr float kExpMaxX = 88.3f, kExpMinX = -87.3f, kLog2e = 1.44269504f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpTaylor[7] = {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};

// ------------------------------------------------------------ 16 floats ---
// Vec16: sixteen float lanes, AVX-512 where the compiler targets it, two AVX2 halves
// where it targets AVX2 (with FMA), plain arrays (auto-vectorised) elsewhere. exp() is
// the same polynomial on both x86 forms, so the same values. Loads from bfloat16 widen
// exactly; stores to bfloat16 round to nearest even exactly as c10::BFloat16 does
// (NaN -> 0x7FC0). Half loads widen exactly; half stores round to nearest even, as
// c10::Half(float) does (F16C's conversions; the portable form calls c10's).

#if defined(__AVX512F__)

struct Vec16 {
  __m512 v;
  static Vec16 zero() { return {_mm512_setzero_ps()}; }
  static Vec16 broadcast(float x) { return {_mm512_set1_ps(x)}; }
  static Vec16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Vec16 load(const BFloat16* p) {
    __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))};
  }
  static Vec16 load(const Half* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static __m512i rne_bits(__m512 x) {  // float -> bf16 bits in the low half of each lane
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store(BFloat16* p) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rne_bits(v)));
  }
  void store(Half* p) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  Vec16 round_bf16() const {  // the float value of store(BFloat16) then load
    return {_mm512_castsi512_ps(_mm512_slli_epi32(rne_bits(v), 16))};
  }
  Vec16 operator+(Vec16 o) const { return {_mm512_add_ps(v, o.v)}; }
  Vec16 operator-(Vec16 o) const { return {_mm512_sub_ps(v, o.v)}; }
  Vec16 operator*(Vec16 o) const { return {_mm512_mul_ps(v, o.v)}; }
  Vec16 operator/(Vec16 o) const { return {_mm512_div_ps(v, o.v)}; }
  static Vec16 fma(Vec16 a, Vec16 b, Vec16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec16 max(Vec16 a, Vec16 b) { return {_mm512_max_ps(a.v, b.v)}; }
  // Lanes where a > b take x, the others y.
  static Vec16 select_greater(Vec16 a, Vec16 b, Vec16 x, Vec16 y) {
    return {_mm512_mask_mov_ps(y.v, _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ), x.v)};
  }
  float sum() const { return _mm512_reduce_add_ps(v); }
  float max() const { return _mm512_reduce_max_ps(v); }
  // Bit i set where lane i >= o's lane i.
  uint32_t mask_ge(Vec16 o) const { return _mm512_cmp_ps_mask(v, o.v, _CMP_GE_OQ); }
  // Lanes outside [lo, hi) become fill.
  Vec16 keep_range(int64_t lo, int64_t hi, float fill) const {
    const uint32_t below_hi = hi >= 16 ? 0xFFFFu : (1u << hi) - 1;
    const uint32_t below_lo = lo >= 16 ? 0xFFFFu : (1u << lo) - 1;
    return {_mm512_mask_mov_ps(_mm512_set1_ps(fill),
                               static_cast<__mmask16>(below_hi & ~below_lo), v)};
  }
  // exp, ~1 ulp on the reduced range (degree-6 Taylor after 2^n scaling); exp(-inf) = 0.
  Vec16 exp() const {
    const __m512 x = _mm512_min_ps(v, _mm512_set1_ps(kExpMaxX));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kExpTaylor[0]);
    for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMinX), _CMP_GE_OQ);
    return {_mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n))};
  }
};

#elif defined(__AVX2__) && defined(__FMA__)

struct Vec16 {
  __m256 lo, hi;  // lanes 0 .. 8, 8 .. 16
  static Vec16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec16 broadcast(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static Vec16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static __m256 widen(const BFloat16* p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  static Vec16 load(const BFloat16* p) { return {widen(p), widen(p + 8)}; }
#if defined(__F16C__)
  static __m256 widen(const Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Vec16 load(const Half* p) { return {widen(p), widen(p + 8)}; }
#else
  static Vec16 load(const Half* p) {
    alignas(32) float f[16];
    for (int i = 0; i < 16; ++i) f[i] = static_cast<float>(p[i]);
    return load(f);
  }
#endif
  static __m256i rne_bits(__m256 x) {  // float -> bf16 bits in the low half of each lane
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  void store(BFloat16* p) const {  // packus works per 128-bit half: reorder its quarters
    const __m256i packed = _mm256_packus_epi32(rne_bits(lo), rne_bits(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
  }
  void store(Half* p) const {
#if defined(__F16C__)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8),
                     _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
#else
    alignas(32) float f[16];
    store(f);
    for (int i = 0; i < 16; ++i) p[i] = Half(f[i]);
#endif
  }
  Vec16 round_bf16() const {  // the float value of store(BFloat16) then load
    return {_mm256_castsi256_ps(_mm256_slli_epi32(rne_bits(lo), 16)),
            _mm256_castsi256_ps(_mm256_slli_epi32(rne_bits(hi), 16))};
  }
  Vec16 operator+(Vec16 o) const { return {_mm256_add_ps(lo, o.lo), _mm256_add_ps(hi, o.hi)}; }
  Vec16 operator-(Vec16 o) const { return {_mm256_sub_ps(lo, o.lo), _mm256_sub_ps(hi, o.hi)}; }
  Vec16 operator*(Vec16 o) const { return {_mm256_mul_ps(lo, o.lo), _mm256_mul_ps(hi, o.hi)}; }
  Vec16 operator/(Vec16 o) const { return {_mm256_div_ps(lo, o.lo), _mm256_div_ps(hi, o.hi)}; }
  static Vec16 fma(Vec16 a, Vec16 b, Vec16 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec16 max(Vec16 a, Vec16 b) {
    return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)};
  }
  // Lanes where a > b take x, the others y.
  static Vec16 select_greater(Vec16 a, Vec16 b, Vec16 x, Vec16 y) {
    return {_mm256_blendv_ps(y.lo, x.lo, _mm256_cmp_ps(a.lo, b.lo, _CMP_GT_OQ)),
            _mm256_blendv_ps(y.hi, x.hi, _mm256_cmp_ps(a.hi, b.hi, _CMP_GT_OQ))};
  }
  // The 8 lanes' sum of a half: pairs of halves, then of quarters, then of the last two.
  static float sum8(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  float sum() const { return sum8(_mm256_add_ps(lo, hi)); }
  uint32_t mask_ge(Vec16 o) const {
    const uint32_t l = _mm256_movemask_ps(_mm256_cmp_ps(lo, o.lo, _CMP_GE_OQ));
    const uint32_t h = _mm256_movemask_ps(_mm256_cmp_ps(hi, o.hi, _CMP_GE_OQ));
    return l | (h << 8);
  }
  float max() const {
    const __m256 m = _mm256_max_ps(lo, hi);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
  // Lanes outside [first, end) become fill.
  Vec16 keep_range(int64_t first, int64_t end, float fill) const {
    const __m256i a = _mm256_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(first, 0, 16)));
    const __m256i b = _mm256_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(end, 0, 16)));
    auto keep = [&](__m256 x, __m256i lane) {  // a <= lane < b
      const __m256i in =
          _mm256_andnot_si256(_mm256_cmpgt_epi32(a, lane), _mm256_cmpgt_epi32(b, lane));
      return _mm256_blendv_ps(_mm256_set1_ps(fill), x, _mm256_castsi256_ps(in));
    };
    return {keep(lo, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
            keep(hi, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15))};
  }
  // exp as the AVX-512 form computes it (its scalef by 2^n, n in [-126, 127] where the
  // result is kept, is the product with 2^n built in the exponent field).
  static __m256 exp8(__m256 v) {
    const __m256 x = _mm256_min_ps(v, _mm256_set1_ps(kExpMaxX));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kExpTaylor[0]);
    for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTaylor[i]));
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMinX), _CMP_GE_OQ);
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
  Vec16 exp() const { return {exp8(lo), exp8(hi)}; }
};

#else  // portable fallback

struct Vec16 {
  float v[16];
  static Vec16 zero() { return broadcast(0.f); }
  static Vec16 broadcast(float x) { Vec16 r; for (float& e : r.v) e = x; return r; }
  template <typename T> static Vec16 load(const T* p) {
    Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = static_cast<float>(p[i]); return r;
  }
  template <typename T> void store(T* p) const {
    for (int i = 0; i < 16; ++i) p[i] = static_cast<T>(v[i]);
  }
  Vec16 round_bf16() const {
    Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = static_cast<float>(BFloat16(v[i])); return r;
  }
#define SPECDEC_VEC_OP(op) \
  Vec16 operator op(Vec16 o) const { Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = v[i] op o.v[i]; return r; }
  SPECDEC_VEC_OP(+) SPECDEC_VEC_OP(-) SPECDEC_VEC_OP(*) SPECDEC_VEC_OP(/)
#undef SPECDEC_VEC_OP
  static Vec16 fma(Vec16 a, Vec16 b, Vec16 c) {
    Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]); return r;
  }
  static Vec16 max(Vec16 a, Vec16 b) {
    Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = std::max(a.v[i], b.v[i]); return r;
  }
  static Vec16 select_greater(Vec16 a, Vec16 b, Vec16 x, Vec16 y) {
    Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] > b.v[i] ? x.v[i] : y.v[i]; return r;
  }
  float sum() const { float s = 0.f; for (float e : v) s += e; return s; }
  float max() const { float m = v[0]; for (float e : v) m = std::max(m, e); return m; }
  uint32_t mask_ge(Vec16 o) const {
    uint32_t m = 0; for (int i = 0; i < 16; ++i) m |= uint32_t(v[i] >= o.v[i]) << i; return m;
  }
  Vec16 keep_range(int64_t lo, int64_t hi, float fill) const {
    Vec16 r = *this;
    for (int64_t i = 0; i < 16; ++i) if (i < lo || i >= hi) r.v[i] = fill;
    return r;
  }
  Vec16 exp() const { Vec16 r; for (int i = 0; i < 16; ++i) r.v[i] = std::exp(v[i]); return r; }
};

#endif

template <typename T> inline Vec16 round_to(Vec16 x);
template <> inline Vec16 round_to<float>(Vec16 x) { return x; }
template <> inline Vec16 round_to<BFloat16>(Vec16 x) { return x.round_bf16(); }

inline float to_f(float x) { return x; }
inline float to_f(BFloat16 x) { return static_cast<float>(x); }
inline float to_f(Half x) { return static_cast<float>(x); }
template <typename T> inline T from_f(float x) { return static_cast<T>(x); }  // RNE for bf16

// dst[0 .. n) = src's values in D (a row written to a KV cache of another dtype).
template <typename D, typename S>
inline void convert_row(D* dst, const S* src, int64_t n) {
  if constexpr (std::is_same_v<D, S>) {
    std::copy(src, src + n, dst);
  } else {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) Vec16::load(src + i).store(dst + i);
    for (; i < n; ++i) dst[i] = from_f<D>(to_f(src[i]));
  }
}

}  // namespace specdec_kernels
