// y = x W^T straight from GGUF-quantised weight blocks (llama.cpp's Q4_0, Q4_1, Q8_0,
// Q4_K, Q6_K), so a projection streams ~4.5 bits per weight instead of 16.
//
// The method is llama.cpp's: each row of x is quantised once per call to int8 blocks
// of 32 with a float scale dx = amax / 127, and every weight block is dotted with it
// in integers (VNNI dpbusd, or maddubs + madd), then scaled and summed in float32.
// Every weight format is read as w = sc * u + mn, u unsigned (4 or 6 bits) with a
// float scale and offset per 4-element lane group (Q8_0: signed, sign moved onto x),
// so one loop serves all formats: per unit of kUnit weights and per x row,
//   acc[lane] += float(sum of 4 u * xq) * (sc * dx) + mn * (float(sum of 4 xq) * dx).
//
// Batch invariance: a (x row, output) pair is always reduced by one thread, over the
// same units in the same order with the same lane layout, whichever tile of x rows
// (1 to kQuantTile) it is computed in and however many rows the call has; the row's
// int8 quantisation depends on that row alone. Q4_0 / Q4_1 / Q8_0 blocks are regrouped
// in pairs when the projection is built (same bytes: resident size == GGUF size, plus
// one block per row for an odd block count); K-quant blocks are read as they are.
// Scales are decoded per unit, once for all rows of a tile.
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
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

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
  at::Tensor blocks;  // uint8 [rows, bytes per row] in the kernel layout (kernel_layout)
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
// A unit is kUnit weights (kUnit / 32 blocks of 32) as kLanes int32 / float lanes,
// lane k holding elements 4k .. 4k + 3 of the unit.

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)

constexpr int64_t kLanes = 16;
using VI = __m512i;
using VF = __m512;

inline VF vzero() { return _mm512_setzero_ps(); }
inline VF vload(const float* p) { return _mm512_loadu_ps(p); }
inline VI xload(const int8_t* p) { return _mm512_loadu_si512(p); }
inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(VF v) { return _mm512_reduce_add_ps(v); }
inline VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF vscaled(VF v, float k) { return _mm512_mul_ps(v, _mm512_set1_ps(k)); }

// Lane sums of 4 u * x products as floats (exact: |sum| < 2^17).
inline VF dot_lanes(VI u, VI x) {
#if defined(__AVX512VNNI__)
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x));
#else
  return _mm512_cvtepi32_ps(
      _mm512_madd_epi16(_mm512_maddubs_epi16(u, x), _mm512_set1_epi16(1)));
#endif
}
inline VI abs_bytes(VI w) { return _mm512_abs_epi8(w); }
// x with w's sign, so |w| * sign(w) x == w x in the unsigned-by-signed product.
inline VI signed_x(VI x, VI w) {
  return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
}

// One float per block of the unit (2), each over that block's 8 lanes.
inline VF per_block(const float* v) {
  return _mm512_insertf32x8(_mm512_set1_ps(v[0]), _mm256_set1_ps(v[1]), 1);
}
// The unit's blocks' fp16 scales (2, consecutive at p), each over its block's 8 lanes.
inline VF halves_per_block(const uint8_t* p) {
  int32_t two;
  std::memcpy(&two, p, 4);
  const __m512 ab = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(two)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), ab);
}
// Q6_K unit i's 4 int8 scales (one per 16 weights) times d, each over 4 lanes.
inline VF q6k_scales(const uint8_t* scales, float d, int64_t i) {
  int32_t four;
  std::memcpy(&four, scales + 4 * i, 4);
  const __m128 s = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four))),
                              _mm_set1_ps(d));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), _mm512_castps128_ps512(s));
}

inline VI nibble_mask() { return _mm512_set1_epi8(0x0F); }

// Unit j of a pair record's bytes (Q8_0: 64 signed bytes).
inline VI bytes_unit(const uint8_t* qs, int64_t j) { return _mm512_loadu_si512(qs + j * 64); }
// Unit i of 32-byte nibble groups (Q4_K qs, a Q4_0 / Q4_1 pair record): low then high
// nibbles of bytes 32i .. 32i + 31.
inline VI q4k_unit(const uint8_t* qs, int64_t i) {
  __m512i v = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + i * 32)));
  v = _mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4);
  return _mm512_and_si512(v, nibble_mask());
}
// Q6_K unit i (0..3) of a super-block: half i / 2, sub-blocks 2 (i % 2), +1: low
// (i even) or high nibbles of ql[64], with 2 bits of each qh[32] byte on top.
inline VI q6k_unit(const uint8_t* blk, int64_t i) {
  const int64_t half = i / 2;
  const bool high = i % 2;
  __m512i ql = _mm512_loadu_si512(blk + half * 64);
  if (high) ql = _mm512_srli_epi16(ql, 4);
  __m512i qh = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + half * 32)));
  qh = _mm512_mask_srli_epi16(qh, 0xFFFF0000u, qh, 2);
  if (high) qh = _mm512_srli_epi16(qh, 4);
  qh = _mm512_slli_epi16(_mm512_and_si512(qh, _mm512_set1_epi8(3)), 4);
  return _mm512_or_si512(_mm512_and_si512(ql, nibble_mask()), qh);
}

#elif defined(__AVX2__)

constexpr int64_t kLanes = 8;
using VI = __m256i;
using VF = __m256;

inline VF vzero() { return _mm256_setzero_ps(); }
inline VF vload(const float* p) { return _mm256_loadu_ps(p); }
inline VI xload(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(VF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF vscaled(VF v, float k) { return _mm256_mul_ps(v, _mm256_set1_ps(k)); }

inline VF dot_lanes(VI u, VI x) {
  return _mm256_cvtepi32_ps(
      _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
}
inline VI abs_bytes(VI w) { return _mm256_abs_epi8(w); }
inline VI signed_x(VI x, VI w) { return _mm256_sign_epi8(x, w); }

inline VF per_block(const float* v) { return _mm256_set1_ps(v[0]); }
inline VF halves_per_block(const uint8_t* p) { return _mm256_set1_ps(half_at(p)); }
inline VF q6k_scales(const uint8_t* scales, float d, int64_t i) {
  const float a = d * static_cast<float>(static_cast<int8_t>(scales[2 * i]));
  const float b = d * static_cast<float>(static_cast<int8_t>(scales[2 * i + 1]));
  return _mm256_setr_ps(a, a, a, a, b, b, b, b);
}

inline VI nibble_mask() { return _mm256_set1_epi8(0x0F); }
inline VI bytes_unit(const uint8_t* qs, int64_t j) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + j * 32));
}
// Q4_K unit i (one sub-block): low (i even) or high nibbles of qs[i / 2 * 32 ..].
inline VI q4k_unit(const uint8_t* qs, int64_t i) {
  __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + i / 2 * 32));
  if (i % 2) v = _mm256_srli_epi16(v, 4);
  return _mm256_and_si256(v, nibble_mask());
}
// Q6_K unit i (0..7): half i / 4, sub-block k = i % 4: nibble k / 2 of ql[k % 2 * 32 ..],
// bits 2k of qh.
inline VI q6k_unit(const uint8_t* blk, int64_t i) {
  const int64_t half = i / 4, k = i % 4;
  __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + half * 64 + k % 2 * 32));
  if (k >= 2) ql = _mm256_srli_epi16(ql, 4);
  __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + half * 32));
  qh = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(static_cast<int>(2 * k)));
  qh = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4);
  return _mm256_or_si256(_mm256_and_si256(ql, nibble_mask()), qh);
}

#else  // portable: the same lanes in plain arrays

constexpr int64_t kLanes = 8;
struct VI { uint8_t b[32]; };
struct VF { float f[8]; };

inline VF vzero() { return VF{}; }
inline VF vload(const float* p) { VF r; std::memcpy(r.f, p, sizeof r.f); return r; }
inline VI xload(const int8_t* p) { VI r; std::memcpy(r.b, p, 32); return r; }
inline VF vmul(VF a, VF b) { for (int k = 0; k < 8; ++k) a.f[k] *= b.f[k]; return a; }
inline VF vfma(VF a, VF b, VF c) {
  for (int k = 0; k < 8; ++k) c.f[k] = std::fma(a.f[k], b.f[k], c.f[k]);
  return c;
}
inline float vsum(VF v) {
  return ((v.f[0] + v.f[4]) + (v.f[2] + v.f[6])) + ((v.f[1] + v.f[5]) + (v.f[3] + v.f[7]));
}
inline VF vadd(VF a, VF b) { for (int k = 0; k < 8; ++k) a.f[k] += b.f[k]; return a; }
inline VF vscaled(VF v, float k) { for (float& e : v.f) e *= k; return v; }

inline VF dot_lanes(VI u, VI x) {
  VF r;
  for (int k = 0; k < 8; ++k) {
    int32_t s = 0;
    for (int i = 4 * k; i < 4 * k + 4; ++i) s += int32_t(u.b[i]) * int32_t(int8_t(x.b[i]));
    r.f[k] = static_cast<float>(s);
  }
  return r;
}
inline VI abs_bytes(VI w) {
  for (uint8_t& e : w.b) e = static_cast<uint8_t>(std::abs(int(int8_t(e))));
  return w;
}
inline VI signed_x(VI x, VI w) {
  for (int i = 0; i < 32; ++i) {
    const int8_t s = int8_t(w.b[i]);
    x.b[i] = s < 0 ? uint8_t(-int8_t(x.b[i])) : s == 0 ? 0 : x.b[i];
  }
  return x;
}
inline VF per_block(const float* v) { VF r; for (float& e : r.f) e = v[0]; return r; }
inline VF halves_per_block(const uint8_t* p) { const float h = half_at(p); return per_block(&h); }
inline VF q6k_scales(const uint8_t* scales, float d, int64_t i) {
  VF r;
  for (int k = 0; k < 8; ++k) r.f[k] = d * static_cast<float>(static_cast<int8_t>(scales[2 * i + k / 4]));
  return r;
}
inline VI bytes_unit(const uint8_t* qs, int64_t j) { VI r; std::memcpy(r.b, qs + j * 32, 32); return r; }
inline VI q4k_unit(const uint8_t* qs, int64_t i) {
  VI r;
  for (int l = 0; l < 32; ++l) r.b[l] = (qs[i / 2 * 32 + l] >> (4 * (i % 2))) & 0x0F;
  return r;
}
inline VI q6k_unit(const uint8_t* blk, int64_t i) {
  const int64_t half = i / 4, k = i % 4;
  VI r;
  for (int l = 0; l < 32; ++l) {
    const uint8_t ql = (blk[half * 64 + k % 2 * 32 + l] >> (4 * (k / 2))) & 0x0F;
    const uint8_t qh = (blk[128 + half * 32 + l] >> (2 * k)) & 3;
    r.b[l] = static_cast<uint8_t>(ql | (qh << 4));
  }
  return r;
}

#endif

constexpr int64_t kUnit = 4 * kLanes;         // weights per unit
constexpr int64_t kBlocksPerUnit = kUnit / 32;  // x blocks per unit
constexpr int64_t kPairUnits = 64 / kUnit;      // units per pair record (below)
// x rows per pass over a weight unit: two accumulators each, in registers.
constexpr int64_t kQuantTile = kLanes == 16 ? 8 : 4;
constexpr int64_t kOutBlock = 64;  // output rows kept in cache per x sweep

// One unit of weights: w = sc * u + mn per lane (Q8_0: u = |w|, sign: w itself).
struct Unit {
  VI u;
  VI sign;
  VF sc;
  VF mn;
};

// ------------------------------------------------------ x quantisation ---

// x rows as int8 blocks of 32, padded to whole pairs of blocks; per lane (4 elements) the
// block's scale dx and the lane's float(sum of q) * dx.
struct QuantizedRows {
  int64_t units = 0;
  std::vector<int8_t> q;  // [T, units * kUnit]
  std::vector<float> d;   // [T, units * kLanes]
  std::vector<float> s;   // [T, units * kLanes]

  const int8_t* q_at(int64_t t, int64_t unit) const { return q.data() + (t * units + unit) * kUnit; }
  const float* d_at(int64_t t, int64_t unit) const { return d.data() + (t * units + unit) * kLanes; }
  const float* s_at(int64_t t, int64_t unit) const { return s.data() + (t * units + unit) * kLanes; }
};

// dx = amax / 127, q = nearbyint(x / dx) (0 where the block is all zeros).
template <typename T>
inline void quantize_block(const T* x, int64_t n, int8_t* q, float* d, float* s) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(to_f(x[i])));
  const float dx = amax / 127.f;
  for (int64_t i = 0; i < 32; ++i)
    q[i] = (i < n && dx != 0.f) ? static_cast<int8_t>(std::nearbyint(to_f(x[i]) / dx)) : 0;
  for (int64_t k = 0; k < 8; ++k) {
    const int32_t sum = q[4 * k] + q[4 * k + 1] + q[4 * k + 2] + q[4 * k + 3];
    d[k] = dx;
    s[k] = static_cast<float>(sum) * dx;
  }
}

template <typename T>
QuantizedRows quantize_rows(const T* x, int64_t rows, int64_t in) {
  QuantizedRows out;
  out.units = (in + 63) / 64 * kPairUnits;  // whole pairs of blocks
  out.q.assign(rows * out.units * kUnit, 0);
  out.d.assign(rows * out.units * kLanes, 0.f);
  out.s.assign(rows * out.units * kLanes, 0.f);
  const int64_t blocks = out.units * kBlocksPerUnit;
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < blocks; ++b)
        quantize_block(x + r * in + b * 32, std::clamp<int64_t>(in - b * 32, 0, 32),
                       out.q.data() + (r * blocks + b) * 32, out.d.data() + (r * blocks + b) * 8,
                       out.s.data() + (r * blocks + b) * 8);
  });
  return out;
}

// ------------------------------------------------------- pair records ---
// Q4_0, Q4_1 and Q8_0 rows are repacked once, when the projection is built, into one
// record per pair of blocks (2p, 2p + 1; a zero block past an odd row's end), the same
// bytes regrouped so a unit is one load and no shuffle:
//   Q4_0: fp16 dA dB, 32 bytes of element i of A (low nibble) | of B (high nibble)
//   Q4_1: fp16 dA dB mA mB, 32 nibble bytes as Q4_0
//   Q8_0: fp16 dA dB, 32 int8 of A, 32 of B

struct PairLayout {
  int64_t scale_bytes;   // fp16 scales (and mins) at the record's start
  int64_t record_bytes;  // per pair of blocks
};

inline PairLayout pair_layout(GgufFormat f) {
  switch (f) {
    case GgufFormat::kQ4_0: return {4, 36};
    case GgufFormat::kQ4_1: return {8, 40};
    default: return {4, 68};  // Q8_0
  }
}

inline bool is_pair_format(GgufFormat f) {
  return f == GgufFormat::kQ4_0 || f == GgufFormat::kQ4_1 || f == GgufFormat::kQ8_0;
}

// The 4-bit value of element i (0..31) of a Q4_0 / Q4_1 block's 16 nibble bytes.
inline uint8_t nibble_at(const uint8_t* qs, int i) {
  return i < 16 ? qs[i] & 0x0F : qs[i - 16] >> 4;
}

inline void repack_pair(GgufFormat f, const uint8_t* a, const uint8_t* b, uint8_t* rec) {
  static const uint8_t zeros[34] = {};
  if (!b) b = zeros;
  std::memcpy(rec, a, 2);
  std::memcpy(rec + 2, b, 2);
  if (f == GgufFormat::kQ8_0) {
    std::memcpy(rec + 4, a + 2, 32);
    std::memcpy(rec + 36, b + 2, 32);
    return;
  }
  const int64_t qs = f == GgufFormat::kQ4_1 ? 4 : 2;  // nibbles' offset in a block
  if (f == GgufFormat::kQ4_1) {
    std::memcpy(rec + 4, a + 2, 2);
    std::memcpy(rec + 6, b + 2, 2);
  }
  uint8_t* out = rec + pair_layout(f).scale_bytes;
  for (int i = 0; i < 32; ++i)
    out[i] = static_cast<uint8_t>(nibble_at(a + qs, i) | (nibble_at(b + qs, i) << 4));
}

// Raw GGUF rows [rows, row_bytes] -> the layout the kernels read: pair records for the
// 32-element formats, for the K-quants raw itself (so pass a copy the caller owns).
inline at::Tensor kernel_layout(GgufFormat f, const at::Tensor& raw) {
  if (!is_pair_format(f)) return raw.contiguous();
  const GgufFormatInfo& info = gguf_format_info(f);
  const at::Tensor src = raw.contiguous();
  const int64_t rows = src.size(0), blocks = src.size(1) / info.block_bytes;
  const int64_t pairs = (blocks + 1) / 2, rec = pair_layout(f).record_bytes;
  at::Tensor out = at::empty({rows, pairs * rec}, src.options());
  const uint8_t* in = src.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t p = 0; p < pairs; ++p) {
        const uint8_t* a = in + r * src.size(1) + 2 * p * info.block_bytes;
        repack_pair(f, a, 2 * p + 1 < blocks ? a + info.block_bytes : nullptr,
                    dst + (r * pairs + p) * rec);
      }
  });
  return out;
}

// ------------------------------------------------------- format readers ---
// Reader::row(w, in, emit) calls emit(unit, index) for every unit of one output row
// (in the kernel layout), in order.

// Q4_0 / Q4_1 pair records: w = d q - 8 d, or d q + m.
template <GgufFormat F>
struct ReadPairQ4 {
  static constexpr bool kSigned = false, kMin = true;
  template <class Emit> static void row(const uint8_t* w, int64_t in, Emit&& emit) {
    const PairLayout layout = pair_layout(F);
    const int64_t pairs = (in / 32 + 1) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint8_t* rec = w + p * layout.record_bytes;
      for (int64_t j = 0; j < kPairUnits; ++j) {
        Unit u;
        u.u = q4k_unit(rec + layout.scale_bytes, j);
        u.sc = halves_per_block(rec + 2 * j);
        u.mn = F == GgufFormat::kQ4_1 ? halves_per_block(rec + 4 + 2 * j) : vscaled(u.sc, -8.f);
        emit(u, p * kPairUnits + j);
      }
    }
  }
};
using ReadQ4_0 = ReadPairQ4<GgufFormat::kQ4_0>;
using ReadQ4_1 = ReadPairQ4<GgufFormat::kQ4_1>;

// Q8_0 pair records: w = d q.
struct ReadQ8_0 {
  static constexpr bool kSigned = true, kMin = false;
  template <class Emit> static void row(const uint8_t* w, int64_t in, Emit&& emit) {
    const int64_t pairs = (in / 32 + 1) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint8_t* rec = w + p * 68;
      for (int64_t j = 0; j < kPairUnits; ++j) {
        Unit u;
        u.sign = bytes_unit(rec + 4, j);
        u.u = abs_bytes(u.sign);
        u.sc = halves_per_block(rec + 2 * j);
        emit(u, p * kPairUnits + j);
      }
    }
  }
};

// Q4_K super-block (256): fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins for
// its 8 sub-blocks, 128 bytes of nibbles; w = d sc_j q - dmin m_j.
struct ReadQ4_K {
  static constexpr bool kSigned = false, kMin = true;
  static void scales(const uint8_t* q, int j, int& sc, int& m) {  // ggml's get_scale_min_k4
    if (j < 4) {
      sc = q[j] & 63;
      m = q[j + 4] & 63;
    } else {
      sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
  }
  template <class Emit> static void row(const uint8_t* w, int64_t in, Emit&& emit) {
    constexpr int64_t units = 256 / kUnit;
    for (int64_t b = 0; b < in / 256; ++b) {
      const uint8_t* blk = w + b * 144;
      const float d = half_at(blk), dmin = half_at(blk + 2);
      float sc[8], mn[8];
      for (int j = 0; j < 8; ++j) {
        int s, m;
        scales(blk + 4, j, s, m);
        sc[j] = d * static_cast<float>(s);
        mn[j] = -(dmin * static_cast<float>(m));
      }
      for (int64_t i = 0; i < units; ++i) {
        Unit u;
        u.u = q4k_unit(blk + 16, i);
        u.sc = per_block(sc + i * kBlocksPerUnit);
        u.mn = per_block(mn + i * kBlocksPerUnit);
        emit(u, b * units + i);
      }
    }
  }
};

// Q6_K super-block (256): ql[128] low 4 bits, qh[64] high 2 bits, 16 int8 scales (one
// per 16 weights), fp16 d; w = d sc (q - 32).
struct ReadQ6_K {
  static constexpr bool kSigned = false, kMin = true;
  template <class Emit> static void row(const uint8_t* w, int64_t in, Emit&& emit) {
    constexpr int64_t units = 256 / kUnit;
    for (int64_t b = 0; b < in / 256; ++b) {
      const uint8_t* blk = w + b * 210;
      const float d = half_at(blk + 208);
      for (int64_t i = 0; i < units; ++i) {
        Unit u;
        u.u = q6k_unit(blk, i);
        u.sc = q6k_scales(blk + 192, d, i);
        u.mn = vscaled(u.sc, -32.f);
        emit(u, b * units + i);
      }
    }
  }
};

// ------------------------------------------------------------- kernels ---

// The unit's products with one x row: acc += the integer dot scaled, min += the
// offset term (two accumulators, so two short dependency chains).
template <class Reader>
inline void unit_step(VF& acc, VF& min, const Unit& w, const int8_t* xq, const float* xd,
                      const float* xs) {
  VI x = xload(xq);
  if constexpr (Reader::kSigned) x = signed_x(x, w.sign);
  acc = vfma(dot_lanes(w.u, x), vmul(w.sc, vload(xd)), acc);
  if constexpr (Reader::kMin) min = vfma(w.mn, vload(xs), min);
}

// Dot products of one weight row with x rows t0 .. t0 + R, each unit unpacked once.
template <class Reader, int R>
inline void dot_tile(const uint8_t* w, int64_t in, const QuantizedRows& x, int64_t t0,
                     float* out) {
  VF acc[R], min[R];
  for (int r = 0; r < R; ++r) acc[r] = min[r] = vzero();
  Reader::row(w, in, [&](const Unit& u, int64_t i) {
    for (int r = 0; r < R; ++r)
      unit_step<Reader>(acc[r], min[r], u, x.q_at(t0 + r, i), x.d_at(t0 + r, i), x.s_at(t0 + r, i));
  });
  for (int r = 0; r < R; ++r) out[r] = vsum(vadd(acc[r], min[r]));
}

template <class Reader, int R = kQuantTile>
inline void dot_rows(const uint8_t* w, int64_t in, const QuantizedRows& x, int64_t t0,
                     int64_t rows, float* out) {
  if constexpr (R > 1) {
    if (rows < R) return dot_rows<Reader, R - 1>(w, in, x, t0, rows, out);
  }
  dot_tile<Reader, R>(w, in, x, t0, out);
}

// y[:, col0 + n] for output rows n0 .. n1 of one segment (row_bytes per row).
template <class Reader, typename T>
void segment_rows(const uint8_t* w, int64_t row_bytes, int64_t in, const QuantizedRows& x,
                  int64_t rows_x, int64_t n0, int64_t n1, const float* bias, int64_t col0, T* y,
                  int64_t ldy) {
  float out[kQuantTile];
  for (int64_t nb = n0; nb < n1; nb += kOutBlock) {
    const int64_t ne = std::min(n1, nb + kOutBlock);
    for (int64_t t0 = 0; t0 < rows_x; t0 += kQuantTile) {
      const int64_t tile = std::min(kQuantTile, rows_x - t0);
      for (int64_t n = nb; n < ne; ++n) {
        dot_rows<Reader>(w + n * row_bytes, in, x, t0, tile, out);
        const int64_t col = col0 + n;
        for (int64_t r = 0; r < tile; ++r)
          y[(t0 + r) * ldy + col] = from_f<T>(bias ? out[r] + bias[col] : out[r]);
      }
    }
  }
}

template <typename T>
void run_segment(const QuantSegment& seg, int64_t in, const QuantizedRows& x, int64_t rows_x,
                 int64_t n0, int64_t n1, const float* bias, T* y, int64_t ldy) {
  const uint8_t* w = seg.blocks.data_ptr<uint8_t>();  // kernel layout
  const int64_t rb = seg.blocks.size(1);
  switch (seg.format) {
    case GgufFormat::kQ4_0:
      return segment_rows<ReadQ4_0>(w, rb, in, x, rows_x, n0, n1, bias, seg.row0, y, ldy);
    case GgufFormat::kQ4_1:
      return segment_rows<ReadQ4_1>(w, rb, in, x, rows_x, n0, n1, bias, seg.row0, y, ldy);
    case GgufFormat::kQ8_0:
      return segment_rows<ReadQ8_0>(w, rb, in, x, rows_x, n0, n1, bias, seg.row0, y, ldy);
    case GgufFormat::kQ4_K:
      return segment_rows<ReadQ4_K>(w, rb, in, x, rows_x, n0, n1, bias, seg.row0, y, ldy);
    case GgufFormat::kQ6_K:
      return segment_rows<ReadQ6_K>(w, rb, in, x, rows_x, n0, n1, bias, seg.row0, y, ldy);
  }
}

template <typename T>
void quant_linear_impl(const T* x, T* y, int64_t rows_x, const QuantWeight& qw) {
  const QuantizedRows xq = quantize_rows(x, rows_x, qw.in_features);
  const float* bias = qw.bias.defined() ? qw.bias.data_ptr<float>() : nullptr;
  const int64_t out = qw.out_features;
  // Whole output rows per thread: never a split reduction, so no thread-count effect.
  at::parallel_for(0, out, 16, [&](int64_t n0, int64_t n1) {
    for (const QuantSegment& seg : qw.segments) {
      const int64_t lo = std::max(n0, seg.row0), hi = std::min(n1, seg.row0 + seg.rows);
      if (lo < hi)
        run_segment(seg, qw.in_features, xq, rows_x, lo - seg.row0, hi - seg.row0, bias, y, out);
    }
  });
}

}  // namespace quant

// Formats this build runs (all of them: every ISA path, down to portable code, has
// every format).
inline std::vector<std::string> gguf_formats() {
  std::vector<std::string> names;
  for (const GgufFormatInfo& f : gguf_format_table()) names.emplace_back(f.name);
  return names;
}

// x [..., in] float32 or bfloat16 -> [..., out] in x's dtype.
inline at::Tensor quant_linear(const at::Tensor& x_in, const QuantWeight& qw) {
  TORCH_CHECK(x_in.device().is_cpu(), "gguf projection: x must be on the CPU");
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) == qw.in_features, "gguf projection: x has ",
              x_in.dim() ? x_in.size(-1) : 0, " features, the weight ", qw.in_features);
  const at::Tensor x = x_in.contiguous();
  const int64_t rows = x.numel() / qw.in_features;
  auto sizes = x.sizes().vec();
  sizes.back() = qw.out_features;
  at::Tensor y = at::empty(sizes, x.options());
  if (rows == 0) return y;
  if (x.scalar_type() == at::kFloat) {
    quant::quant_linear_impl(x.data_ptr<float>(), y.data_ptr<float>(), rows, qw);
  } else {
    TORCH_CHECK(x.scalar_type() == at::kBFloat16, "gguf projection: x must be float32 or bfloat16");
    quant::quant_linear_impl(x.data_ptr<BFloat16>(), y.data_ptr<BFloat16>(), rows, qw);
  }
  return y;
}

}  // namespace specdec_kernels
