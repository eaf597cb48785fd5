// y = x W^T straight from GGUF-quantised weight blocks (llama.cpp's Q4_0, Q4_1, Q8_0,
// Q4_K, Q6_K), so a projection streams ~4.5 bits per weight instead of 16.
//
// The method is llama.cpp's: each row of x is quantised once per call to int8 blocks
// of 32 with a float scale dx = amax / 127, and every weight block is dotted with it
// in integers (VNNI dpbusd, or maddubs + madd), then scaled and summed in float32.
// The weights are repacked when the projection is built (llama.cpp's "repacked" CPU
// layouts): vector lanes run across kLanes output rows, not along `in`, so one integer
// dot step serves kLanes outputs and the per-block float work (int -> float, scale,
// fma) is one vector instruction per kLanes outputs and x row, not per output. A pass
// over a group's weights serves a tile of x rows, each unpacked weight vector reused.
//
// Batch invariance: every (x row, output) is reduced by one thread, over the blocks in
// order, with the same float operations whichever tile of x rows (1 to kQuantTile) or
// lane it falls in (a group's missing rows are zero weights, run by the same code) and
// however many rows the call has; the row's int8 quantisation depends on that row alone.
// Resident size: GGUF's bytes (Q4_K + 3 %) plus the last group's padding.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "huge_page_arena.h"
#include "nontemporal.h"
#include "vec16.h"

namespace specdec_kernels {

// ------------------------------------------------------------- formats ---

enum class GgufFormat { kQ4_0, kQ4_1, kQ8_0, kQ4_K, kQ6_K };

struct GgufFormatInfo {
  GgufFormat format;
  const char* name;     // as gguf.GGMLQuantizationType spells it
  int64_t block_elems;  // weights per block
  int64_t block_bytes;  // bytes per block
};

inline const std::array<GgufFormatInfo, 5>& gguf_format_table() {
  static const std::array<GgufFormatInfo, 5> table{{
      {GgufFormat::kQ4_0, "Q4_0", 32, 18},
      {GgufFormat::kQ4_1, "Q4_1", 32, 20},
      {GgufFormat::kQ8_0, "Q8_0", 32, 34},
      {GgufFormat::kQ4_K, "Q4_K", 256, 144},
      {GgufFormat::kQ6_K, "Q6_K", 256, 210},
  }};
  return table;
}

inline const GgufFormatInfo& gguf_format_info(GgufFormat f) {
  return gguf_format_table()[static_cast<size_t>(f)];
}

// A run of output rows of one format.
struct QuantSegment {
  GgufFormat format = GgufFormat::kQ4_0;
  int64_t row0 = 0;  // first output column of y it fills
  int64_t rows = 0;
  at::Tensor blocks;  // uint8 [groups of kLanes rows, bytes per group] (kernel_layout)
};

// A whole projection: segments stacked along the outputs, one in_features.
struct QuantWeight {
  std::vector<QuantSegment> segments;
  int64_t in_features = 0;
  int64_t out_features = 0;
  at::Tensor bias;  // float32 [out], or undefined

  int64_t nbytes() const {
    int64_t n = 0;
    for (const QuantSegment& s : segments) n += s.blocks.numel();
    return n;
  }
  int64_t groups() const {  // groups of kLanes outputs, across the segments
    int64_t n = 0;
    for (const QuantSegment& s : segments) n += s.blocks.size(0);
    return n;
  }
};

namespace quant {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
#endif
}

// ------------------------------------------------------ lane primitives ---
// The kernels' vectors run across output rows: lane l of every vector belongs to output
// row l of a group of kLanes rows. A weight step vector (VB) holds, per lane, 4 weight
// bytes of that row for 4 consecutive inputs, so one dot step (VNNI dpbusd) with the
// 4 x bytes broadcast adds those 4 products to kLanes int32 sums at once (VA), and the
// per-block float work (int -> float, scale, fma) is one instruction per kLanes outputs.

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)

constexpr int64_t kLanes = 16;
constexpr bool kVnni =
#if defined(__AVX512VNNI__)
    true;
#else
    false;
#endif
using VB = __m512i;  // 64 weight bytes: 4 per lane
using VA = __m512i;  // 16 int32 sums
using VF = __m512;

inline VB ldb(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline VB nib_lo(VB v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline VB nib_hi(VB v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
// lo | (bits 2j, 2j + 1 of hi) << 4
inline VB join_hi2(VB lo, VB hi, int j) {
  const __m512i h = _mm512_and_si512(_mm512_srli_epi16(hi, 2 * j), _mm512_set1_epi8(3));
  return _mm512_or_si512(lo, _mm512_slli_epi16(h, 4));
}
inline VB babs(VB v) { return _mm512_abs_epi8(v); }
inline VA iset1(int32_t v) { return _mm512_set1_epi32(v); }
inline int32_t four(const void* p) { int32_t v; std::memcpy(&v, p, 4); return v; }
// acc + per lane sum of 4 (u unsigned) * (x signed, the same 4 bytes in every lane).
inline VA dot_u(VA acc, VB u, const int8_t* x) {
#if defined(__AVX512VNNI__)
  // x's 4 bytes as the instruction's {1to16} memory operand: GCC does not fold the
  // set1 into vpdpbusd, and a separate broadcast per step costs as much as the step.
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, _mm512_set1_epi32(four(x))),
                                                 _mm512_set1_epi16(1)));
#endif
}
// maddubs products (int16 pairs) of u with x's 4 bytes, their sums, and their int32 sum.
inline VA mul16(VB u, const int8_t* x) { return _mm512_maddubs_epi16(u, _mm512_set1_epi32(four(x))); }
inline VA add16(VA a, VA b) { return _mm512_add_epi16(a, b); }
inline VA widen_add(VA acc, VA p) { return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1))); }
// acc + per lane sum of 4 (w signed) * (x signed), as |w| times x with w's sign (Q8_0
// without VNNI, where maddubs of (w + 128) would saturate).
inline VA dot_s(VA acc, VB w, VB wabs, const int8_t* x) {
  __m512i xb = _mm512_set1_epi32(four(x));
  xb = _mm512_mask_sub_epi8(xb, _mm512_movepi8_mask(w), _mm512_setzero_si512(), xb);
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(wabs, xb), _mm512_set1_epi16(1)));
}
inline VF cvt(VA v) { return _mm512_cvtepi32_ps(v); }
inline VF vzero() { return _mm512_setzero_ps(); }
inline VF vset1(float v) { return _mm512_set1_ps(v); }
inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline VF vneg(VF a) { return _mm512_sub_ps(_mm512_setzero_ps(), a); }
inline VF ld_half(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF ld_u8f(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VF ld_i8f(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline void vstore(float* p, VF v) { _mm512_storeu_ps(p, v); }

#elif defined(__AVX2__)

constexpr int64_t kLanes = 8;
constexpr bool kVnni = false;
using VB = __m256i;
using VA = __m256i;
using VF = __m256;

inline VB ldb(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VB nib_lo(VB v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline VB nib_hi(VB v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
inline VB join_hi2(VB lo, VB hi, int j) {
  const __m256i h = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
  return _mm256_or_si256(lo, _mm256_slli_epi16(h, 4));
}
inline VB babs(VB v) { return _mm256_abs_epi8(v); }
inline VA iset1(int32_t v) { return _mm256_set1_epi32(v); }
inline int32_t four(const void* p) { int32_t v; std::memcpy(&v, p, 4); return v; }
// maddubs pairs stay below 2^15: u <= 63 (or |w| <= 128) times |x| <= 127, twice.
inline VA dot_u(VA acc, VB u, const int8_t* x) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_set1_epi32(four(x))),
                                                 _mm256_set1_epi16(1)));
}
inline VA mul16(VB u, const int8_t* x) { return _mm256_maddubs_epi16(u, _mm256_set1_epi32(four(x))); }
inline VA add16(VA a, VA b) { return _mm256_add_epi16(a, b); }
inline VA widen_add(VA acc, VA p) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1))); }
inline VA dot_s(VA acc, VB w, VB wabs, const int8_t* x) {
  const __m256i xb = _mm256_sign_epi8(_mm256_set1_epi32(four(x)), w);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, xb), _mm256_set1_epi16(1)));
}
inline VF cvt(VA v) { return _mm256_cvtepi32_ps(v); }
inline VF vzero() { return _mm256_setzero_ps(); }
inline VF vset1(float v) { return _mm256_set1_ps(v); }
inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline VF vneg(VF a) { return _mm256_sub_ps(_mm256_setzero_ps(), a); }
inline VF ld_half(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF ld_u8f(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline VF ld_i8f(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline void vstore(float* p, VF v) { _mm256_storeu_ps(p, v); }

#else  // portable: the same lanes in plain arrays

constexpr int64_t kLanes = 8;
constexpr bool kVnni = false;
struct VB { uint8_t b[32]; };
struct VA { int32_t i[8]; };
struct VF { float f[8]; };

inline VB ldb(const uint8_t* p) { VB r; std::memcpy(r.b, p, 32); return r; }
inline VB nib_lo(VB v) { for (uint8_t& e : v.b) e &= 0x0F; return v; }
inline VB nib_hi(VB v) { for (uint8_t& e : v.b) e >>= 4; return v; }
inline VB join_hi2(VB lo, VB hi, int j) {
  for (int k = 0; k < 32; ++k) lo.b[k] |= static_cast<uint8_t>(((hi.b[k] >> (2 * j)) & 3) << 4);
  return lo;
}
inline VB babs(VB v) { return v; }  // unused: dot_s multiplies signed bytes directly
inline VA iset1(int32_t v) { VA r; for (int32_t& e : r.i) e = v; return r; }
inline VA dot_u(VA acc, VB u, const int8_t* x) {
  for (int l = 0; l < 8; ++l)
    for (int k = 0; k < 4; ++k) acc.i[l] += int32_t(u.b[4 * l + k]) * int32_t(x[k]);
  return acc;
}
inline VA dot_s(VA acc, VB w, VB, const int8_t* x) {
  for (int l = 0; l < 8; ++l)
    for (int k = 0; k < 4; ++k) acc.i[l] += int32_t(int8_t(w.b[4 * l + k])) * int32_t(x[k]);
  return acc;
}
inline VF cvt(VA v) { VF r; for (int l = 0; l < 8; ++l) r.f[l] = static_cast<float>(v.i[l]); return r; }
inline VF vzero() { return VF{}; }
inline VF vset1(float v) { VF r; for (float& e : r.f) e = v; return r; }
inline VF vmul(VF a, VF b) { for (int k = 0; k < 8; ++k) a.f[k] *= b.f[k]; return a; }
inline VF vadd(VF a, VF b) { for (int k = 0; k < 8; ++k) a.f[k] += b.f[k]; return a; }
inline VF vfma(VF a, VF b, VF c) {
  for (int k = 0; k < 8; ++k) c.f[k] = std::fma(a.f[k], b.f[k], c.f[k]);
  return c;
}
inline VF vneg(VF a) { for (float& e : a.f) e = -e; return a; }
inline VF ld_half(const uint8_t* p) { VF r; for (int l = 0; l < 8; ++l) r.f[l] = half_at(p + 2 * l); return r; }
inline VF ld_u8f(const uint8_t* p) { VF r; for (int l = 0; l < 8; ++l) r.f[l] = float(p[l]); return r; }
inline VF ld_i8f(const uint8_t* p) { VF r; for (int l = 0; l < 8; ++l) r.f[l] = float(int8_t(p[l])); return r; }
inline void vstore(float* p, VF v) { std::memcpy(p, v.f, sizeof v.f); }

#endif

constexpr int64_t kStep = 4 * kLanes;  // bytes of one weight step vector
// x rows per pass over a group's weights (each unpacked step vector serves them all):
// 8 on every path, so a speculative step's 5 rows are one pass (AVX2 had 4: two passes,
// the second for one row, made a 5-row Q8_0 LM head ~1.7x slower).
constexpr int64_t kQuantTile = 8;
constexpr int64_t kRowChunk = 64;  // a multiple of kQuantTile

// ------------------------------------------------------ x quantisation ---

// x rows as int8 blocks of 32 (the last padded with zeros): per block dx = amax / 127,
// float(sum q) * dx, and the integer sums per 32 and per 16. Stored tile-major, a tile
// of kQuantTile rows block by block ([T / kQuantTile][blocks][kQuantTile]), so a tile's
// rows sit at fixed offsets from one pointer and the kernels need no pointer per row.
struct QuantizedRows {
  int64_t blocks = 0;      // 32-blocks per row
  std::vector<int8_t> q;   // [tiles, blocks, kQuantTile, 32]
  std::vector<float> d;    // [tiles, blocks, kQuantTile]
  std::vector<float> s;    // [tiles, blocks, kQuantTile]: float(sum q) * d
  std::vector<int32_t> s32;  // [tiles, blocks, kQuantTile]
  std::vector<int32_t> s16;  // [tiles, blocks, kQuantTile, 2]

  // Index of row t0 + r, block b, for a tile start t0 (a multiple of kQuantTile).
  int64_t at(int64_t t0, int64_t r, int64_t b) const { return t0 * blocks + b * kQuantTile + r; }
  int64_t at(int64_t t, int64_t b) const { return at(t - t % kQuantTile, t % kQuantTile, b); }
};

// dx = amax / 127, q = nearbyint(x / dx) (0 where the block is all zeros), and the sums
// of q's halves (lo: q[0 .. 16), hi: q[16 .. 32)), vectorised: the same IEEE division and
// round-to-nearest-even (cvtps under the default rounding mode) as the scalar form, so
// the same q; the sums are taken from the int32 lanes before they are narrowed.
inline void quantize32(const float* f, int8_t* q, float& d, int32_t& lo, int32_t& hi) {
  lo = hi = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
  const __m512 a = _mm512_loadu_ps(f), b = _mm512_loadu_ps(f + 16);
  d = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b))) / 127.f;
  if (d == 0.f) return (void)std::memset(q, 0, 32);
  const __m512 dv = _mm512_set1_ps(d);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_div_ps(a, dv));
  const __m512i qb = _mm512_cvtps_epi32(_mm512_div_ps(b, dv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(qb));
  lo = _mm512_reduce_add_epi32(qa);
  hi = _mm512_reduce_add_epi32(qb);
#elif defined(__AVX2__)
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 v[4], m = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(f + 8 * k), m = _mm256_max_ps(m, _mm256_and_ps(v[k], abs_mask));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  d = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h))) / 127.f;
  if (d == 0.f) return (void)std::memset(q, 0, 32);
  const __m256 dv = _mm256_set1_ps(d);
  __m256i i[4];
  for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_div_ps(v[k], dv));
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  auto hsum = [](__m256i x) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
  };
  lo = hsum(_mm256_add_epi32(i[0], i[1]));
  hi = hsum(_mm256_add_epi32(i[2], i[3]));
#else
  float amax = 0.f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(f[i]));
  d = amax / 127.f;
  for (int i = 0; i < 32; ++i) q[i] = d != 0.f ? static_cast<int8_t>(std::nearbyint(f[i] / d)) : 0;
  for (int i = 0; i < 16; ++i) lo += q[i], hi += q[16 + i];
#endif
}

template <typename T>
inline void quantize_block(const T* x, int64_t n, int8_t* q, float& d, int32_t& lo, int32_t& hi) {
  alignas(64) float f[32];
  if (n == 32) {  // exact widening, 16 at a time
    Vec16::load(x).store(f);
    Vec16::load(x + 16).store(f + 16);
  } else {
    for (int64_t i = 0; i < 32; ++i) f[i] = i < n ? to_f(x[i]) : 0.f;
  }
  quantize32(f, q, d, lo, hi);
}

// Size out for rows x in (contents left as they are: every block a kernel reads is
// written by quantize_row_blocks first).
inline void reset_rows(QuantizedRows& out, int64_t rows, int64_t in) {
  const int64_t nb = out.blocks = (in + 31) / 32;
  const int64_t n = (rows + kQuantTile - 1) / kQuantTile * kQuantTile * nb;
  if (static_cast<int64_t>(out.d.size()) >= n) return;
  out.q.resize(n * 32);
  out.d.resize(n);
  out.s.resize(n);
  out.s32.resize(n);
  out.s16.resize(n * 2);
}

// Blocks b0 .. b1 of row t (x_row: that row's in values).
template <typename T>
inline void quantize_row_blocks(const T* x_row, int64_t in, int64_t t, int64_t b0, int64_t b1,
                                QuantizedRows& out) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t i = out.at(t, b);
    int8_t* q = out.q.data() + i * 32;
    int32_t lo, hi;
    quantize_block(x_row + b * 32, std::min<int64_t>(in - b * 32, 32), q, out.d[i], lo, hi);
    out.s16[2 * i] = lo;
    out.s16[2 * i + 1] = hi;
    out.s32[i] = lo + hi;
    out.s[i] = static_cast<float>(lo + hi) * out.d[i];
  }
}

template <typename T>
QuantizedRows quantize_rows(const T* x, int64_t rows, int64_t in) {
  QuantizedRows out;
  reset_rows(out, rows, in);
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize_row_blocks(x + r * in, in, r, 0, out.blocks, out);
  });
  return out;
}

// ------------------------------------------------------- kernel layout ---
// Built once per projection: output rows in groups of kLanes (the last padded with zero
// rows, so every group runs the same code), one record per group and block (K-quants:
// super-block) holding the group's scales as kLanes-vectors and its weights as step
// vectors (step s: inputs 4s .. 4s + 3 of every row). 4-bit values are packed as nibbles:
// nibble vector k holds step k (low) and step k + 4 (high) of a 32-block.
//   Q4_0: fp16 d[G] | nibbles 4 x kStep                          (18 G bytes, as GGUF)
//   Q4_1: fp16 d[G] m[G] | nibbles                              (20 G, as GGUF)
//   Q8_0: fp16 d[G] | u = q + 128 (VNNI; else q), 8 x kStep       (34 G, as GGUF)
//   Q4_K: fp16 d[G] dmin[G] | u8 sc[8][G] m[8][G] | 8 x nibbles    (148 G: GGUF + 3 %)
//   Q6_K: fp16 d[G] | int8 sc[16][G] | 8 x (nibbles, 2 x kStep of 2-bit tops)  (210 G)
// Every format is read as w = sc * u + mn with u unsigned (4, 6 or 8 bits): the x side
// of the dot stays signed, u the unsigned operand of dpbusd / maddubs. Q8_0 without
// VNNI keeps q signed (dotted as |q| sign(q) x: no offset to remove).

inline int64_t record_bytes(GgufFormat f) {
  switch (f) {
    case GgufFormat::kQ4_0: return 18 * kLanes;
    case GgufFormat::kQ4_1: return 20 * kLanes;
    case GgufFormat::kQ8_0: return 34 * kLanes;
    case GgufFormat::kQ4_K: return 148 * kLanes;
    default: return 210 * kLanes;  // Q6_K
  }
}

// Element i of a 32-block's weights into u (Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K).
inline void decode_row(GgufFormat f, const uint8_t* row, int64_t in, uint8_t* u) {
  const GgufFormatInfo& info = gguf_format_info(f);
  for (int64_t b = 0; b < in / info.block_elems; ++b) {
    const uint8_t* blk = row + b * info.block_bytes;
    uint8_t* o = u + b * info.block_elems;
    switch (f) {
      case GgufFormat::kQ4_0:
      case GgufFormat::kQ4_1: {
        const uint8_t* qs = blk + (f == GgufFormat::kQ4_1 ? 4 : 2);
        for (int i = 0; i < 16; ++i) o[i] = qs[i] & 0x0F, o[16 + i] = qs[i] >> 4;
        break;
      }
      case GgufFormat::kQ8_0: std::memcpy(o, blk + 2, 32); break;
      case GgufFormat::kQ4_K:  // sub-block j: low (j even) or high nibbles of qs[j / 2 * 32 ..]
        for (int j = 0; j < 8; ++j)
          for (int l = 0; l < 32; ++l) o[32 * j + l] = (blk[16 + j / 2 * 32 + l] >> (4 * (j % 2))) & 0x0F;
        break;
      default:  // Q6_K: half h, quarter k: nibble k / 2 of ql[h 64 + k % 2 32 + l], bits 2k of qh
        for (int h = 0; h < 2; ++h)
          for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 32; ++l) {
              const uint8_t ql = (blk[h * 64 + k % 2 * 32 + l] >> (4 * (k / 2))) & 0x0F;
              const uint8_t qh = (blk[128 + h * 32 + l] >> (2 * k)) & 3;
              o[h * 128 + k * 32 + l] = static_cast<uint8_t>(ql | (qh << 4));
            }
    }
  }
}

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min.
inline void q4k_scale_min(const uint8_t* q, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Step vectors of one 32-block (u: kLanes rows' 32 elements each, row stride in):
// nibbles (4 x kStep) and for Q6_K the 2-bit tops (2 x kStep), or 8 x kStep bytes.
inline void pack_nibbles(const uint8_t* const* u, uint8_t* out) {
  for (int k = 0; k < 4; ++k)
    for (int64_t l = 0; l < kLanes; ++l)
      for (int i = 0; i < 4; ++i) {
        const uint8_t lo = u[l][4 * k + i] & 0x0F, hi = u[l][4 * (k + 4) + i] & 0x0F;
        out[k * kStep + 4 * l + i] = static_cast<uint8_t>(lo | (hi << 4));
      }
}
inline void pack_tops(const uint8_t* const* u, uint8_t* out) {  // step 4h + j: bits 2j
  for (int h = 0; h < 2; ++h)
    for (int64_t l = 0; l < kLanes; ++l)
      for (int i = 0; i < 4; ++i) {
        uint8_t v = 0;
        for (int j = 0; j < 4; ++j) v |= static_cast<uint8_t>((u[l][4 * (4 * h + j) + i] >> 4) << (2 * j));
        out[h * kStep + 4 * l + i] = v;
      }
}
inline void pack_bytes(const uint8_t* const* u, uint8_t* out) {
  for (int s = 0; s < 8; ++s)
    for (int64_t l = 0; l < kLanes; ++l) std::memcpy(out + s * kStep + 4 * l, u[l] + 4 * s, 4);
}

// Raw GGUF rows [rows, row_bytes] -> [groups, records * record bytes].
inline at::Tensor kernel_layout(GgufFormat f, const at::Tensor& raw) {
  const GgufFormatInfo& info = gguf_format_info(f);
  const at::Tensor src = raw.contiguous();
  const int64_t rows = src.size(0), row_bytes = src.size(1);
  const int64_t blocks = row_bytes / info.block_bytes, in = blocks * info.block_elems;
  const int64_t groups = (rows + kLanes - 1) / kLanes, rec = record_bytes(f);
  at::Tensor out = HugePageArena::zeros({groups, blocks * rec}, at::kByte);
  const uint8_t* in_p = src.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t G = kLanes;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    std::vector<uint8_t> u(G * in, 0);
    std::vector<uint8_t> zero_row(row_bytes, 0);
    const uint8_t* uptr[kLanes];
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* raw_row[kLanes];
      for (int64_t l = 0; l < G; ++l) {
        const int64_t n = g * G + l;
        raw_row[l] = n < rows ? in_p + n * row_bytes : zero_row.data();
        decode_row(f, raw_row[l], in, u.data() + l * in);
      }
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* r = dst + g * blocks * rec + b * rec;
        const uint8_t* hdr[kLanes];
        for (int64_t l = 0; l < G; ++l) hdr[l] = raw_row[l] + b * info.block_bytes;
        auto lanes_at = [&](int64_t e0) {
          for (int64_t l = 0; l < G; ++l) uptr[l] = u.data() + l * in + e0;
          return uptr;
        };
        switch (f) {
          case GgufFormat::kQ4_0:
          case GgufFormat::kQ4_1: {
            const int64_t nh = f == GgufFormat::kQ4_1 ? 2 : 1;  // d (and m) per row
            for (int64_t l = 0; l < G; ++l)
              for (int64_t h = 0; h < nh; ++h) std::memcpy(r + (h * G + l) * 2, hdr[l] + 2 * h, 2);
            pack_nibbles(lanes_at(b * 32), r + nh * 2 * G);
            break;
          }
          case GgufFormat::kQ8_0: {
            for (int64_t l = 0; l < G; ++l) std::memcpy(r + 2 * l, hdr[l], 2);
            pack_bytes(lanes_at(b * 32), r + 2 * G);
            if (kVnni)  // dpbusd's unsigned operand: q + 128
              for (int64_t i = 2 * G; i < 34 * G; ++i) r[i] ^= 0x80;
            break;
          }
          case GgufFormat::kQ4_K: {
            for (int64_t l = 0; l < G; ++l) {
              std::memcpy(r + 2 * l, hdr[l], 2);
              std::memcpy(r + 2 * G + 2 * l, hdr[l] + 2, 2);
              for (int j = 0; j < 8; ++j)
                q4k_scale_min(hdr[l] + 4, j, r[4 * G + j * G + l], r[12 * G + j * G + l]);
            }
            for (int j = 0; j < 8; ++j) pack_nibbles(lanes_at(b * 256 + 32 * j), r + 20 * G + j * 16 * G);
            break;
          }
          default: {  // Q6_K
            for (int64_t l = 0; l < G; ++l) {
              std::memcpy(r + 2 * l, hdr[l] + 208, 2);
              for (int k = 0; k < 16; ++k) r[2 * G + k * G + l] = hdr[l][192 + k];
            }
            for (int j = 0; j < 8; ++j) {
              uint8_t* o = r + 18 * G + j * 24 * G;
              pack_nibbles(lanes_at(b * 256 + 32 * j), o);
              pack_tops(lanes_at(b * 256 + 32 * j), o + 16 * G);
            }
          }
        }
      }
    }
  });
  return out;
}

// ------------------------------------------------------------- kernels ---
// The row (r < R) and step (s < S) loops below are unrolled completely, so ia[], acc[]
// and w[] stay in registers: GCC's own limit (16 peeled iterations) left R >= 4 tiles'
// S x R dot loops rolled, their accumulators on the stack, and made a 4-row call twice
// as slow as a 3-row one.
#define SPECDEC_UNROLL _Pragma("GCC unroll 64")

// Per (x row, output): acc += float(int dot of a scale's span + integer offset) * (sc * dx)
// over the spans in order, plus for Q4_1 / Q4_K min += mn * (float(sum q) dx); y = acc
// + min. One sequence of float operations per (x row, output) whatever the tile, the
// group or the thread: lanes never mix, the reduction over `in` never splits.

// acc + the dot of S steps (unsigned w, x's 4 bytes per step). Without VNNI, the maddubs
// int16 pairs of P steps are summed before one widening madd: each pair is at most
// 2 * 15 * 127 (4-bit u: P = 8 stays below 2^15) or 2 * 63 * 127 (6-bit: P = 2).
template <int S, int P>
inline VA dot_span(VA acc, const VB* w, const int8_t* x) {
#if defined(__AVX512VNNI__) || !defined(__AVX2__)
  SPECDEC_UNROLL
  for (int s = 0; s < S; ++s) acc = dot_u(acc, w[s], x + 4 * s);
#else
  SPECDEC_UNROLL
  for (int s0 = 0; s0 < S; s0 += P) {
    VA p = mul16(w[s0], x + 4 * s0);
    SPECDEC_UNROLL
    for (int s = s0 + 1; s < s0 + P; ++s) p = add16(p, mul16(w[s], x + 4 * s));
    acc = widen_add(acc, p);
  }
#endif
  return acc;
}

// The 8 step vectors of a nibble 32-block.
inline void unpack_nibbles(const uint8_t* p, VB (&w)[8]) {
  for (int k = 0; k < 4; ++k) {
    const VB v = ldb(p + k * kStep);
    w[k] = nib_lo(v);
    w[k + 4] = nib_hi(v);
  }
}

// acc[r] += float(init_r + sum of steps s0 .. s0 + S of w * x_r) * (sc * dx_r).
template <int R, int S>
inline void span_u(VF (&acc)[R], const VB* w, VF sc, const QuantizedRows& x, int64_t t0,
                   int64_t b, int s0, const int32_t* init, int init_mul) {
  const int64_t i0 = x.at(t0, 0, b);
  VA ia[R];
  SPECDEC_UNROLL
  for (int r = 0; r < R; ++r) ia[r] = iset1(init_mul * (S == 4 ? init[2 * (i0 + r) + s0 / 4] : init[i0 + r]));
#if defined(__AVX512VNNI__)
  // Row by row within each step: R independent dpbusd chains, not one chain per row.
  SPECDEC_UNROLL
  for (int s = 0; s < S; ++s)
    SPECDEC_UNROLL
    for (int r = 0; r < R; ++r) ia[r] = dot_u(ia[r], w[s], x.q.data() + (i0 + r) * 32 + 4 * (s0 + s));
#else
  SPECDEC_UNROLL
  for (int r = 0; r < R; ++r)  // S = 4: Q6_K's 6-bit spans of 16
    ia[r] = dot_span<S, S == 4 ? 2 : 8>(ia[r], w, x.q.data() + (i0 + r) * 32 + 4 * s0);
#endif
  SPECDEC_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = vfma(cvt(ia[r]), vmul(sc, vset1(x.d[i0 + r])), acc[r]);
}

// Asks for the record's cache lines (a group's next block) ahead of their use.
inline void prefetch_record(const uint8_t* p, int64_t bytes) {
#if defined(__AVX2__) || defined(__AVX512F__)
  for (int64_t i = 0; i < bytes; i += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
#else
  (void)p, (void)bytes;
#endif
}

// next: where given, another group's records, asked for block by block as this tile's
// loop passes (a tile that reads its weights from L1 leaves the memory idle).
template <GgufFormat F, int R>
inline void group_tile(const uint8_t* g, int64_t blocks, const QuantizedRows& x, int64_t t0,
                       float* out /* [R][kLanes] */, const uint8_t* next, bool once) {
  constexpr int64_t G = kLanes;
  VF acc[R], mins[R];
  SPECDEC_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = mins[r] = vzero();
  const int64_t rec = record_bytes(F);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = g + b * rec;
    if (next) prefetch_record(next + b * rec, rec);
    if (once) stream_once(p, rec, kStreamAheadBytes);  // a segment's records lie in order
    VB w[8];
    if constexpr (F == GgufFormat::kQ4_0) {  // w = d (u - 8)
      unpack_nibbles(p + 2 * G, w);
      span_u<R, 8>(acc, w, ld_half(p), x, t0, b, 0, x.s32.data(), -8);
    } else if constexpr (F == GgufFormat::kQ4_1) {  // w = d u + m
      unpack_nibbles(p + 4 * G, w);
      span_u<R, 8>(acc, w, ld_half(p), x, t0, b, 0, x.s32.data(), 0);
      const VF m = ld_half(p + 2 * G);
      SPECDEC_UNROLL
      for (int r = 0; r < R; ++r) mins[r] = vfma(m, vset1(x.s[x.at(t0, r, b)]), mins[r]);
    } else if constexpr (F == GgufFormat::kQ8_0) {  // w = d q (VNNI: d (u - 128))
      SPECDEC_UNROLL
      for (int s = 0; s < 8; ++s) w[s] = ldb(p + 2 * G + s * kStep);
      if constexpr (kVnni) {
        span_u<R, 8>(acc, w, ld_half(p), x, t0, b, 0, x.s32.data(), -128);
      } else {  // maddubs: (q + 128) x could saturate int16, |q| sign(q) x cannot
        // Step by step, all rows at each: R independent sums with few registers live
        // (AVX2 has 16; eight weight steps and their magnitudes held across the rows
        // would spill).
        const int64_t i0 = x.at(t0, 0, b);
        VA ia[R];
        SPECDEC_UNROLL
        for (int r = 0; r < R; ++r) ia[r] = iset1(0);
        SPECDEC_UNROLL
        for (int s = 0; s < 8; ++s) {
          const VB ws = w[s], wa = babs(ws);
          SPECDEC_UNROLL
          for (int r = 0; r < R; ++r) ia[r] = dot_s(ia[r], ws, wa, x.q.data() + (i0 + r) * 32 + 4 * s);
        }
        const VF d = ld_half(p);
        SPECDEC_UNROLL
        for (int r = 0; r < R; ++r) acc[r] = vfma(cvt(ia[r]), vmul(d, vset1(x.d[i0 + r])), acc[r]);
      }
    } else if constexpr (F == GgufFormat::kQ4_K) {  // w = d sc_j u - dmin m_j per 32
      const VF d = ld_half(p), dmin = ld_half(p + 2 * G);
      for (int j = 0; j < 8; ++j) {
        unpack_nibbles(p + 20 * G + j * 16 * G, w);
        const VF sc = vmul(d, ld_u8f(p + 4 * G + j * G));
        const VF mn = vneg(vmul(dmin, ld_u8f(p + 12 * G + j * G)));
        const int64_t xb = 8 * b + j;
        span_u<R, 8>(acc, w, sc, x, t0, xb, 0, x.s32.data(), 0);
        SPECDEC_UNROLL
        for (int r = 0; r < R; ++r) mins[r] = vfma(mn, vset1(x.s[x.at(t0, r, xb)]), mins[r]);
      }
    } else {  // Q6_K: w = d sc_k (u - 32) per 16
      const VF d = ld_half(p);
      for (int j = 0; j < 8; ++j) {
        const uint8_t* o = p + 18 * G + j * 24 * G;
        unpack_nibbles(o, w);
        const VB top0 = ldb(o + 16 * G), top1 = ldb(o + 16 * G + kStep);
        SPECDEC_UNROLL
        for (int s = 0; s < 8; ++s) w[s] = join_hi2(w[s], s < 4 ? top0 : top1, s % 4);
        const int64_t xb = 8 * b + j;
        span_u<R, 4>(acc, w, vmul(d, ld_i8f(p + 2 * G + (2 * j) * G)), x, t0, xb, 0, x.s16.data(), -32);
        span_u<R, 4>(acc, w + 4, vmul(d, ld_i8f(p + 2 * G + (2 * j + 1) * G)), x, t0, xb, 4,
                     x.s16.data(), -32);
      }
    }
  }
  SPECDEC_UNROLL
  for (int r = 0; r < R; ++r) {
    constexpr bool kMin = F == GgufFormat::kQ4_1 || F == GgufFormat::kQ4_K;
    vstore(out + r * G, kMin ? vadd(acc[r], mins[r]) : acc[r]);
  }
}

template <GgufFormat F, int R = kQuantTile>
inline void group_rows(const uint8_t* g, int64_t blocks, const QuantizedRows& x, int64_t t0,
                       int64_t rows, float* out, const uint8_t* next, bool once) {
  if constexpr (R > 1) {
    if (rows < R) return group_rows<F, R - 1>(g, blocks, x, t0, rows, out, next, once);
  }
  group_tile<F, R>(g, blocks, x, t0, out, next, once);
}

// v rounded to T (the activations' dtype), stored as Out (T, or float32 holding the
// T-rounded value: what a cast of the T output would give, without the second pass).
template <typename T, typename Out>
inline Out round_out(float v) {
  if constexpr (std::is_same_v<T, Out>) return from_f<T>(v);
  else return static_cast<Out>(to_f(from_f<T>(v)));
}

// y[:, row0 + n] for the segment's groups g0 .. g1, all x rows.
template <GgufFormat F, typename T, typename Out>
void segment_groups(const QuantSegment& seg, const QuantizedRows& x, int64_t rows_x, int64_t g0,
                    int64_t g1, const float* bias, Out* y, int64_t ldy, const uint8_t* then) {
  const int64_t bytes = seg.blocks.size(1), blocks = bytes / record_bytes(F);
  const uint8_t* weights = seg.blocks.data_ptr<uint8_t>();
  alignas(64) float out[kQuantTile * kLanes];
  // One tile of rows reads each record once (nontemporal.h); more pass over a group
  // tile by tile.
  const bool once = rows_x <= kQuantTile && stream_weights_once();
  // Chunks of kRowChunk x rows (~100 KB of int8 x at in = 1536) stay in L2 while the
  // groups pass over them; a group's weights stay in L1 across a chunk's tiles.
  for (int64_t c0 = 0; c0 < rows_x; c0 += kRowChunk) {
    const int64_t c1 = std::min(rows_x, c0 + kRowChunk);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* w = weights + g * bytes;
      const int64_t n0 = g * kLanes, lanes = std::min(kLanes, seg.rows - n0);
      for (int64_t t0 = c0; t0 < c1; t0 += kQuantTile) {
        const int64_t tile = std::min(kQuantTile, rows_x - t0);
        // A chunk of several tiles reads each group from L1 after its first tile, leaving
        // the memory idle: its second tile asks for the next group's weights (after the
        // last one, then's). A chunk of one tile streams the groups once, and leaves
        // them to the hardware prefetcher: asking for them too made a 1-row decode
        // step's projections ~5 % slower.
        const uint8_t* next = g + 1 < g1 ? w + bytes : then;
        const bool ask = c1 - c0 > kQuantTile && t0 == c0 + kQuantTile;
        group_rows<F>(w, blocks, x, t0, tile, out, ask ? next : nullptr, once);
        for (int64_t r = 0; r < tile; ++r) {
          Out* yr = y + (t0 + r) * ldy + seg.row0 + n0;
          const float* o = out + r * kLanes;
          if (bias) {
            const float* bs = bias + seg.row0 + n0;
            for (int64_t l = 0; l < lanes; ++l) yr[l] = round_out<T, Out>(o[l] + bs[l]);
          } else {
            for (int64_t l = 0; l < lanes; ++l) yr[l] = round_out<T, Out>(o[l]);
          }
        }
      }
    }
  }
}

template <typename T, typename Out>
void run_segment(const QuantSegment& seg, const QuantizedRows& x, int64_t rows_x, int64_t g0,
                 int64_t g1, const float* bias, Out* y, int64_t ldy, const uint8_t* then) {
  switch (seg.format) {
    case GgufFormat::kQ4_0: return segment_groups<GgufFormat::kQ4_0, T>(seg, x, rows_x, g0, g1, bias, y, ldy, then);
    case GgufFormat::kQ4_1: return segment_groups<GgufFormat::kQ4_1, T>(seg, x, rows_x, g0, g1, bias, y, ldy, then);
    case GgufFormat::kQ8_0: return segment_groups<GgufFormat::kQ8_0, T>(seg, x, rows_x, g0, g1, bias, y, ldy, then);
    case GgufFormat::kQ4_K: return segment_groups<GgufFormat::kQ4_K, T>(seg, x, rows_x, g0, g1, bias, y, ldy, then);
    case GgufFormat::kQ6_K: return segment_groups<GgufFormat::kQ6_K, T>(seg, x, rows_x, g0, g1, bias, y, ldy, then);
  }
}

// Group g's weights (counted across the segments), or nullptr past the last.
inline const uint8_t* group_bytes(const QuantWeight& qw, int64_t g) {
  for (const QuantSegment& seg : qw.segments) {
    if (g < seg.blocks.size(0)) return seg.blocks.data_ptr<uint8_t>() + g * seg.blocks.size(1);
    g -= seg.blocks.size(0);
  }
  return nullptr;
}

// y[:, n] for the outputs of the projection's groups g0 .. g1 (counted across its
// segments), all x rows: a thread's share of a projection. then: where given, the
// weights this thread reads next, asked for while the last group runs.
template <typename T, typename Out = T>
void quant_groups(const QuantWeight& qw, const QuantizedRows& xq, int64_t rows_x, int64_t g0,
                  int64_t g1, Out* y, const uint8_t* then = nullptr) {
  const float* bias = qw.bias.defined() ? qw.bias.data_ptr<float>() : nullptr;
  int64_t first = 0;
  for (const QuantSegment& seg : qw.segments) {
    const int64_t groups = seg.blocks.size(0);
    const int64_t lo = std::max(g0, first), hi = std::min(g1, first + groups);
    // A segment's last group asks for the next segment's first (or then).
    const uint8_t* after = hi < g1 ? group_bytes(qw, hi) : then;
    if (lo < hi)
      run_segment<T>(seg, xq, rows_x, lo - first, hi - first, bias, y, qw.out_features, after);
    first += groups;
  }
}

template <typename T, typename Out = T>
void quant_linear_impl(const T* x, Out* y, int64_t rows_x, const QuantWeight& qw) {
  const QuantizedRows xq = quantize_rows(x, rows_x, qw.in_features);
  // Whole groups of outputs per thread: never a split reduction, so no thread-count effect.
  at::parallel_for(0, qw.groups(), 1,
                   [&](int64_t a, int64_t z) { quant_groups<T>(qw, xq, rows_x, a, z, y); });
}

}  // namespace quant

// Formats this build runs (all of them: every ISA path, down to portable code, has
// every format).
inline std::vector<std::string> gguf_formats() {
  std::vector<std::string> names;
  for (const GgufFormatInfo& f : gguf_format_table()) names.emplace_back(f.name);
  return names;
}

// x [..., in] float32 or bfloat16 -> [..., out] in x's dtype, or with out_float in
// float32 holding the same x-dtype-rounded values.
inline at::Tensor quant_linear(const at::Tensor& x_in, const QuantWeight& qw,
                               bool out_float = false) {
  TORCH_CHECK(x_in.device().is_cpu(), "gguf projection: x must be on the CPU");
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) == qw.in_features, "gguf projection: x has ",
              x_in.dim() ? x_in.size(-1) : 0, " features, the weight ", qw.in_features);
  const at::Tensor x = x_in.contiguous();
  const int64_t rows = x.numel() / qw.in_features;
  auto sizes = x.sizes().vec();
  sizes.back() = qw.out_features;
  at::Tensor y = at::empty(sizes, x.options().dtype(out_float ? at::kFloat : x.scalar_type()));
  if (rows == 0) return y;
  if (x.scalar_type() == at::kFloat) {
    quant::quant_linear_impl(x.data_ptr<float>(), y.data_ptr<float>(), rows, qw);
  } else {
    TORCH_CHECK(x.scalar_type() == at::kBFloat16, "gguf projection: x must be float32 or bfloat16");
    if (out_float)
      quant::quant_linear_impl(x.data_ptr<BFloat16>(), y.data_ptr<float>(), rows, qw);
    else
      quant::quant_linear_impl(x.data_ptr<BFloat16>(), y.data_ptr<BFloat16>(), rows, qw);
  }
  return y;
}

}  // namespace specdec_kernels
