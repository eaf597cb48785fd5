// Fused CPU kernels for the decoder's small per-layer operations.
//
// Each replaces several eager PyTorch ops (and their dispatch and memory traffic)
// with one pass: residual add + RMSNorm, SiLU(gate) * up, RoPE + KV-cache write,
// and paged attention that reads keys/values straight from the cache blocks
// (no gather copy, each KV row read once for all query heads of its group).
// float32 and bfloat16; accumulation is always float32.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

using at::BFloat16;

// ------------------------------------------------------------ 16 floats ---
// Vec16: sixteen float lanes, AVX-512 where the compiler targets it, plain arrays
// (auto-vectorised) elsewhere. Loads from bfloat16 widen exactly; stores to
// bfloat16 round to nearest even exactly as c10::BFloat16 does (NaN -> 0x7FC0).

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
  Vec16 round_bf16() const {  // the float value of store(BFloat16) then load
    return {_mm512_castsi512_ps(_mm512_slli_epi32(rne_bits(v), 16))};
  }
  Vec16 operator+(Vec16 o) const { return {_mm512_add_ps(v, o.v)}; }
  Vec16 operator-(Vec16 o) const { return {_mm512_sub_ps(v, o.v)}; }
  Vec16 operator*(Vec16 o) const { return {_mm512_mul_ps(v, o.v)}; }
  Vec16 operator/(Vec16 o) const { return {_mm512_div_ps(v, o.v)}; }
  static Vec16 fma(Vec16 a, Vec16 b, Vec16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec16 max(Vec16 a, Vec16 b) { return {_mm512_max_ps(a.v, b.v)}; }
  float sum() const { return _mm512_reduce_add_ps(v); }
  float max() const { return _mm512_reduce_max_ps(v); }
  // Lanes outside [lo, hi) become fill.
  Vec16 keep_range(int64_t lo, int64_t hi, float fill) const {
    const uint32_t below_hi = hi >= 16 ? 0xFFFFu : (1u << hi) - 1;
    const uint32_t below_lo = lo >= 16 ? 0xFFFFu : (1u << lo) - 1;
    return {_mm512_mask_mov_ps(_mm512_set1_ps(fill),
                               static_cast<__mmask16>(below_hi & ~below_lo), v)};
  }
  // exp, ~1 ulp on the reduced range (degree-6 Taylor after 2^n scaling); exp(-inf) = 0.
  Vec16 exp() const {
    const __m512 x = _mm512_min_ps(v, _mm512_set1_ps(88.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    return {_mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n))};
  }
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
  float sum() const { float s = 0.f; for (float e : v) s += e; return s; }
  float max() const { float m = v[0]; for (float e : v) m = std::max(m, e); return m; }
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
template <typename T> inline T from_f(float x) { return static_cast<T>(x); }  // RNE for bf16

#define DISPATCH_FLOAT_BF16(dtype, NAME, ...)                                  \
  [&] {                                                                        \
    if ((dtype) == at::kFloat) { using scalar_t = float; return __VA_ARGS__(); } \
    TORCH_CHECK((dtype) == at::kBFloat16, NAME ": float32 or bfloat16 only");  \
    using scalar_t = BFloat16;                                                 \
    return __VA_ARGS__();                                                      \
  }()

void check_cpu_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// ---------------------------------------------------------------- RMSNorm ---

// residual += x (rounded to the residual dtype, as an eager add would);
// out = residual * rsqrt(mean(residual^2) + eps) * weight, one rounding.
template <typename T>
void add_rms_norm_impl(T* out, T* residual, const T* x, const T* weight, int64_t rows,
                       int64_t n, float eps) {
  const int64_t nv = n / 16 * 16;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* res = residual + r * n;
      const T* add = x ? x + r * n : nullptr;
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
      T* o = out + r * n;
      for (int64_t i = 0; i < nv; i += 16)
        (Vec16::load(res + i) * scale * Vec16::load(weight + i)).store(o + i);
      for (int64_t i = nv; i < n; ++i) o[i] = from_f<T>(to_f(res[i]) * rstd * to_f(weight[i]));
    }
  });
}

// Returns norm(residual [+= x]); x may be None (first layer).
at::Tensor add_rms_norm(const c10::optional<at::Tensor>& x, at::Tensor residual,
                        const at::Tensor& weight, double eps) {
  check_cpu_contiguous(residual, "residual");
  check_cpu_contiguous(weight, "weight");
  const int64_t n = residual.size(-1);
  TORCH_CHECK(weight.numel() == n && weight.scalar_type() == residual.scalar_type(),
              "weight must be [hidden] in the residual's dtype");
  if (x) {
    check_cpu_contiguous(*x, "x");
    TORCH_CHECK(x->sizes() == residual.sizes() && x->scalar_type() == residual.scalar_type(),
                "x and residual differ in shape or dtype");
  }
  auto out = at::empty_like(residual);
  DISPATCH_FLOAT_BF16(residual.scalar_type(), "add_rms_norm", [&] {
    add_rms_norm_impl<scalar_t>(out.data_ptr<scalar_t>(), residual.data_ptr<scalar_t>(),
                                x ? x->data_ptr<scalar_t>() : nullptr,
                                weight.data_ptr<scalar_t>(), residual.numel() / n, n,
                                static_cast<float>(eps));
  });
  return out;
}

// ------------------------------------------------------------- SiLU * up ---

template <typename T>
void silu_mul_impl(T* out, const T* gate_up, int64_t rows, int64_t inter) {
  const int64_t nv = inter / 16 * 16;
  const Vec16 one = Vec16::broadcast(1.f), zero = Vec16::zero();
  at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* gate = gate_up + r * 2 * inter;
      const T* up = gate + inter;
      T* o = out + r * inter;
      for (int64_t i = 0; i < nv; i += 16) {
        const Vec16 g = Vec16::load(gate + i);
        (g / (one + (zero - g).exp()) * Vec16::load(up + i)).store(o + i);
      }
      for (int64_t i = nv; i < inter; ++i) {
        const float g = to_f(gate[i]);
        o[i] = from_f<T>(g / (1.f + std::exp(-g)) * to_f(up[i]));
      }
    }
  });
}

// gate_up [T, 2I] -> silu(gate) * up [T, I]
at::Tensor silu_mul(const at::Tensor& gate_up) {
  check_cpu_contiguous(gate_up, "gate_up");
  const int64_t inter = gate_up.size(-1) / 2;
  auto sizes = gate_up.sizes().vec();
  sizes.back() = inter;
  auto out = at::empty(sizes, gate_up.options());
  DISPATCH_FLOAT_BF16(gate_up.scalar_type(), "silu_mul", [&] {
    silu_mul_impl<scalar_t>(out.data_ptr<scalar_t>(), gate_up.data_ptr<scalar_t>(),
                            gate_up.numel() / (2 * inter), inter);
  });
  return out;
}

// ------------------------------------------------------ RoPE + KV write ---

// x*cos + rotate_half(x)*sin with each product and the sum rounded to T, exactly as
// the eager formulation rounds (no fused multiply-add: built with -ffp-contract=off).
template <typename T>
inline void rope(T* dst, const T* x, const T* cos, const T* sin, int64_t dim) {
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
    dst[i] = from_f<T>(lo);
    dst[i + half] = from_f<T>(hi);
  }
}

template <typename T>
void rope_write_kv_impl(T* q_out, const T* qkv, const T* cos, const T* sin, T* key_cache,
                        T* value_cache, const int64_t* slots, int64_t tokens, int64_t hq,
                        int64_t hkv, int64_t dim) {
  const int64_t width = (hq + 2 * hkv) * dim;
  at::parallel_for(0, tokens, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* src = qkv + t * width;
      const T* c = cos + t * dim;
      const T* s = sin + t * dim;
      for (int64_t h = 0; h < hq; ++h) rope(q_out + (t * hq + h) * dim, src + h * dim, c, s, dim);
      T* k_dst = key_cache + slots[t] * hkv * dim;
      for (int64_t h = 0; h < hkv; ++h) rope(k_dst + h * dim, src + (hq + h) * dim, c, s, dim);
      std::copy(src + (hq + hkv) * dim, src + width, value_cache + slots[t] * hkv * dim);
    }
  });
}

// qkv [T, (Hq + 2 Hkv) * D] (the fused projection's output, bias included);
// cos/sin [T, D]; cache [2, slots, Hkv, D]; slot_mapping [T] int64.
// Writes rotated keys and the values at their slots; returns rotated queries [T, Hq, D].
at::Tensor rope_write_kv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                         at::Tensor cache, const at::Tensor& slot_mapping, int64_t num_heads) {
  check_cpu_contiguous(qkv, "qkv");
  check_cpu_contiguous(cos, "cos");
  check_cpu_contiguous(sin, "sin");
  check_cpu_contiguous(cache, "cache");
  check_cpu_contiguous(slot_mapping, "slot_mapping");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong, "slot_mapping must be int64");
  const int64_t tokens = qkv.size(0), hkv = cache.size(2), dim = cache.size(3);
  TORCH_CHECK(qkv.size(1) == (num_heads + 2 * hkv) * dim, "qkv width does not match the heads");
  TORCH_CHECK(cos.size(0) == tokens && cos.size(1) == dim && sin.sizes() == cos.sizes(),
              "cos/sin must be [T, head_dim]");
  TORCH_CHECK(slot_mapping.numel() == tokens, "one slot per token");
  auto dtype = qkv.scalar_type();
  TORCH_CHECK(cache.scalar_type() == dtype && cos.scalar_type() == dtype &&
                  sin.scalar_type() == dtype, "qkv, cos, sin and cache must share a dtype");
  auto q = at::empty({tokens, num_heads, dim}, qkv.options());
  const int64_t num_slots = cache.size(1);
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(slots[t] >= 0 && slots[t] < num_slots, "slot out of range");
  DISPATCH_FLOAT_BF16(dtype, "rope_write_kv", [&] {
    scalar_t* base = cache.data_ptr<scalar_t>();
    rope_write_kv_impl<scalar_t>(q.data_ptr<scalar_t>(), qkv.data_ptr<scalar_t>(),
                                 cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(), base,
                                 base + num_slots * hkv * dim, slots, tokens, num_heads, hkv,
                                 dim);
  });
  return q;
}

// -------------------------------------------------------- paged attention ---

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
  void add(const T* const* v_row, int64_t n, const float (*prob)[16], int mb) {
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
  void add(const T* const* v_row, int64_t n, const float (*prob)[16], int mb) {
    static const BFloat16 zeros[NV * 16] = {};
    for (int64_t j = 0; j < n; j += 2) {
      const T* a = v_row[j];
      const T* b = j + 1 < n ? v_row[j + 1] : zeros;
      __m512i pairs[NV];
      for (int h = 0; h < NV / 2; ++h) {
        const __m512i x = _mm512_loadu_si512(a + 32 * h), y = _mm512_loadu_si512(b + 32 * h);
        pairs[2 * h] = _mm512_unpacklo_epi16(x, y);
        pairs[2 * h + 1] = _mm512_unpackhi_epi16(x, y);
      }
      for (int m = 0; m < mb; ++m) {
        const float next = j + 1 < n ? prob[m][j + 1] : 0.f;
        const __m512bh p = (__m512bh)_mm512_set1_epi32(bf16_pair(prob[m][j], next));
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)pairs[v], p);
      }
    }
  }
  void store(int m, T* dst, float inv) const {
    const __m512 scale = _mm512_set1_ps(inv);
    for (int h = 0; h < NV / 2; ++h) {
      const __m512 lo = _mm512_mul_ps(acc[m][2 * h], scale);
      const __m512 hi = _mm512_mul_ps(acc[m][2 * h + 1], scale);
      const __m512 first = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
      const __m512 second = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
      Vec16{_mm512_shuffle_f32x4(first, first, _MM_SHUFFLE(3, 1, 2, 0))}.store(dst + 32 * h);
      Vec16{_mm512_shuffle_f32x4(second, second, _MM_SHUFFLE(3, 1, 2, 0))}.store(dst + 32 * h + 16);
    }
  }
};
#endif

// Ask for the next chunk's K/V rows while this one computes.
template <typename T>
inline void prefetch_chunk(const int32_t* table, int64_t p0, int64_t hi, int64_t block_size,
                           const T* key_cache, const T* value_cache, int64_t row_stride,
                           int64_t offset, int64_t row_bytes) {
  const int64_t end = std::min<int64_t>(p0 + 16, hi);
  for (int64_t p = p0; p < end; ++p) {
    const int64_t slot = static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
    const char* k = reinterpret_cast<const char*>(key_cache + slot * row_stride + offset);
    const char* v = reinterpret_cast<const char*>(value_cache + slot * row_stride + offset);
    for (int64_t b = 0; b < row_bytes; b += 64) {
      __builtin_prefetch(k + b);
      __builtin_prefetch(v + b);
    }
  }
}

// One (request, KV head): its M = q_len x G queries (the G query heads sharing the
// KV head) attend causally to the request's context through its block table.
// Up to kPass queries at a time keep their accumulators in registers; positions go
// in chunks of 16 with an online softmax, each K/V row read once per pass.
template <typename T, int NV>
void attend_one(T* out, const T* q, const T* key_cache, const T* value_cache,
                const int32_t* table, int64_t q_start, int64_t q_len, int64_t ctx_len,
                int64_t kv_head, int64_t hq, int64_t hkv, int64_t block_size, float scale,
                int64_t window) {
  constexpr int kPass = 4;
  constexpr int64_t dim = NV * 16;
  const int64_t group = hq / hkv, m_count = q_len * group, row_stride = hkv * dim;
  for (int64_t m0 = 0; m0 < m_count; m0 += kPass) {
    const int mb = static_cast<int>(std::min<int64_t>(kPass, m_count - m0));
    QueryTile<T, NV> query[kPass];
    OutputTile<T, NV, kPass> output;
    T* out_row[kPass];
    int64_t first[kPass], last[kPass];
    float row_max[kPass], row_sum[kPass];
    int64_t lo = ctx_len, hi = 0;
    for (int mi = 0; mi < mb; ++mi) {
      const int64_t m = m0 + mi, i = m / group, head = kv_head * group + m % group;
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
    alignas(64) float prob[kPass][16];
    const T* k_row[16];
    const T* v_row[16];
    Vec16 parts[16];
    for (int64_t p0 = lo / 16 * 16; p0 < hi; p0 += 16) {
      const int64_t n = std::min<int64_t>(16, hi - p0);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t p = p0 + j;
        const int64_t slot = static_cast<int64_t>(table[p / block_size]) * block_size +
                             p % block_size;
        k_row[j] = key_cache + slot * row_stride + kv_head * dim;
        v_row[j] = value_cache + slot * row_stride + kv_head * dim;
      }
      prefetch_chunk(table, p0 + 16, hi, block_size, key_cache, value_cache, row_stride,
                     kv_head * dim, dim * static_cast<int64_t>(sizeof(T)));
      for (int mi = 0; mi < mb; ++mi) {
        const int64_t j_lo = std::max<int64_t>(0, first[mi] - p0);
        const int64_t j_hi = std::min<int64_t>(n, last[mi] - p0 + 1);
        if (j_hi <= j_lo) {
          Vec16::zero().store(prob[mi]);
          continue;
        }
        for (int64_t j = 0; j < 16; ++j) parts[j] = Vec16::zero();
        for (int64_t j = j_lo; j < j_hi; ++j) parts[j] = query[mi].dot(k_row[j]);
        const Vec16 scores = (transpose_sum(parts) * Vec16::broadcast(scale))
                                 .keep_range(j_lo, j_hi, kNegInf);
        const float new_max = std::max(row_max[mi], scores.max());
        const float correction = std::exp(row_max[mi] - new_max);  // 0 on the first chunk
        const Vec16 probs = (scores - Vec16::broadcast(new_max)).exp();
        probs.store(prob[mi]);
        row_sum[mi] = row_sum[mi] * correction + probs.sum();
        row_max[mi] = new_max;
        if (correction != 1.f) output.scale(mi, correction);
      }
      output.add(v_row, n, prob, mb);
    }
    for (int mi = 0; mi < mb; ++mi) output.store(mi, out_row[mi], 1.f / row_sum[mi]);
  }
}

bool supports_head_dim(int64_t dim) {
  return dim == 16 || dim == 32 || dim == 64 || dim == 128 || dim == 256;
}

// q, out [T, Hq, D]; cache [2, slots, Hkv, D]; block_tables [B, max_blocks] int32;
// query_start / query_len / context_len [B] int32 (a request's queries are rows
// query_start .. +query_len of q, its last context_len positions' last query_len).
void paged_attention(at::Tensor out, const at::Tensor& q, const at::Tensor& cache,
                     const at::Tensor& block_tables, const at::Tensor& query_start,
                     const at::Tensor& query_len, const at::Tensor& context_len,
                     int64_t block_size, double scale, int64_t sliding_window) {
  for (const at::Tensor& t : {out, q, cache, block_tables, query_start, query_len, context_len})
    check_cpu_contiguous(t, "paged_attention argument");
  for (const at::Tensor& t : {block_tables, query_start, query_len, context_len})
    TORCH_CHECK(t.scalar_type() == at::kInt, "block tables and lengths must be int32");
  TORCH_CHECK(q.scalar_type() == cache.scalar_type() && out.scalar_type() == q.scalar_type(),
              "q, out and cache must share a dtype");
  const int64_t hq = q.size(1), hkv = cache.size(2), dim = cache.size(3);
  TORCH_CHECK(q.size(2) == dim && hq % hkv == 0 && out.sizes() == q.sizes(), "bad head shapes");
  TORCH_CHECK(supports_head_dim(dim), "paged_attention: unsupported head_dim ", dim);
  const int64_t batch = block_tables.size(0), max_blocks = block_tables.size(1);
  const int64_t num_slots = cache.size(1);
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* qs = query_start.data_ptr<int32_t>();
  const int32_t* ql = query_len.data_ptr<int32_t>();
  const int32_t* cl = context_len.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(ql[b] >= 1 && ql[b] <= cl[b] && qs[b] >= 0 && qs[b] + ql[b] <= q.size(0),
                "bad query range");
    const int64_t blocks = (cl[b] + block_size - 1) / block_size;
    TORCH_CHECK(blocks <= max_blocks, "context longer than the block table");
    for (int64_t i = 0; i < blocks; ++i)
      TORCH_CHECK(tables[b * max_blocks + i] >= 0 &&
                      (tables[b * max_blocks + i] + 1) * block_size <= num_slots,
                  "block id out of range");
  }
  DISPATCH_FLOAT_BF16(q.scalar_type(), "paged_attention", [&] {
    const scalar_t* key_cache = cache.data_ptr<scalar_t>();
    const scalar_t* value_cache = key_cache + num_slots * hkv * dim;
    scalar_t* o = out.data_ptr<scalar_t>();
    const scalar_t* qp = q.data_ptr<scalar_t>();
    auto run = [&](auto attend) {
      at::parallel_for(0, batch * hkv, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t b = task / hkv, h = task % hkv;
          attend(o, qp, key_cache, value_cache, tables + b * max_blocks, qs[b], ql[b], cl[b],
                 h, hq, hkv, block_size, static_cast<float>(scale), sliding_window);
        }
      });
    };
    switch (dim) {
      case 16: return run(attend_one<scalar_t, 1>);
      case 32: return run(attend_one<scalar_t, 2>);
      case 64: return run(attend_one<scalar_t, 4>);
      case 128: return run(attend_one<scalar_t, 8>);
      default: return run(attend_one<scalar_t, 16>);
    }
  });
}


// ------------------------------------------------------ whole decoder stack ---

// A projection: a oneDNN pre-packed weight (PackedLinear) or a plain one.
at::Tensor project(const at::Tensor& x, const at::Tensor& weight,
                   const c10::optional<at::Tensor>& bias) {
  if (weight.is_mkldnn()) {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
    std::vector<c10::IValue> stack{x, weight, bias, c10::IValue(std::string("none")),
                                   c10::IValue(c10::List<c10::optional<at::Scalar>>()),
                                   c10::IValue(c10::optional<std::string>())};
    op.callBoxed(&stack);
    return stack[0].toTensor();
  }
  return at::linear(x, weight, bias);
}

// The decoder layers of the fused Python path (LlamaForCausalLM._forward_fused) for
// a step whose attention is one kernel group, without returning to Python between
// ops. layers[i] = {input_norm, qkv_w, qkv_b, o_w, o_b, post_norm, gate_up_w,
// gate_up_b, down_w, down_b} (biases may be undefined). Returns the final-normed
// hidden states; h is the residual stream, updated in place.
at::Tensor decoder_stack(at::Tensor h, const at::Tensor& cos, const at::Tensor& sin,
                         const std::vector<at::Tensor>& caches,
                         const at::Tensor& slot_mapping,
                         const std::vector<std::vector<c10::optional<at::Tensor>>>& layers,
                         const at::Tensor& final_norm, const at::Tensor& block_tables,
                         const at::Tensor& query_start, const at::Tensor& query_len,
                         const at::Tensor& context_len, int64_t block_size, double scale,
                         int64_t sliding_window, int64_t num_heads, double eps) {
  TORCH_CHECK(caches.size() == layers.size(), "one KV cache per layer");
  c10::optional<at::Tensor> delta;
  const int64_t tokens = h.size(0);
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& w = layers[i];
    TORCH_CHECK(w.size() == 10, "layer parameters: 10 entries");
    at::Tensor x = add_rms_norm(delta, h, *w[0], eps);
    at::Tensor qkv = project(x, *w[1], w[2]);
    at::Tensor q = rope_write_kv(qkv, cos, sin, caches[i], slot_mapping, num_heads);
    at::Tensor attn = at::empty_like(q);
    paged_attention(attn, q, caches[i], block_tables, query_start, query_len, context_len,
                    block_size, scale, sliding_window);
    delta = project(attn.view({tokens, -1}), *w[3], w[4]);
    x = add_rms_norm(delta, h, *w[5], eps);
    delta = project(silu_mul(project(x, *w[6], w[7])), *w[8], w[9]);
  }
  return add_rms_norm(delta, h, final_norm, eps);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_rms_norm", &add_rms_norm, "residual += x; return rms_norm(residual) * weight");
  m.def("silu_mul", &silu_mul, "silu(gate) * up over a fused gate|up projection");
  m.def("rope_write_kv", &rope_write_kv, "RoPE on q and k; write k, v to the paged cache");
  m.def("paged_attention", &paged_attention, "causal attention through block tables");
  m.def("supports_head_dim", &supports_head_dim, "head sizes paged_attention is built for");
  m.def("decoder_stack", &decoder_stack, "all decoder layers of a kernel-group step");
}
