// Fused CPU kernels for the decoder's small per-layer operations.
//
// Each replaces several eager PyTorch ops (and their dispatch and memory traffic)
// with one pass: residual add + RMSNorm, SiLU(gate) * up, RoPE + KV-cache write,
// and paged attention that reads keys/values straight from the cache blocks
// (no gather copy, each KV row read once for all query heads of its group; the
// inner loops are in attention_tile.h, and attention_amx.h for bfloat16 on AMX).
// Weight layouts and KV caches live on 2 MB pages (huge_page_arena.h).
// tile_linear (tile_linear.h) runs decode-sized bfloat16 projections on AMX tiles;
// quant_linear (quant_linear.h) runs projections straight from GGUF-quantised blocks.
// layer() is one decoder layer of the fused forward over a LayerWeights
// (layer_weights.h), its projections dispatched by kind in project();
// decoder_stack runs all layers of a kernel-group step through it in one call;
// argmax_rows serves greedy sampling. float32 and bfloat16; accumulation is always
// float32.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_amx.h"
#include "attention_tasks.h"
#include "attention_tile.h"
#include "bf16_linear.h"
#include "core_round_trip.h"
#include "gguf_stack.h"
#include "huge_page_arena.h"
#include "layer_weights.h"
#include "populate_pages.h"
#include "quant_linear.h"
#include "row_ops.h"
#include "sample_rows.h"
#include "tile_linear.h"
#include "vec16.h"

namespace {

using namespace specdec_kernels;

#define DISPATCH_FLOAT_BF16(dtype, NAME, ...)                                  \
  [&] {                                                                        \
    if ((dtype) == at::kFloat) { using scalar_t = float; return __VA_ARGS__(); } \
    TORCH_CHECK((dtype) == at::kBFloat16, NAME ": float32 or bfloat16 only");  \
    using scalar_t = BFloat16;                                                 \
    return __VA_ARGS__();                                                      \
  }()

// scalar_t: the activations' type; cache_t: the KV cache's, the activations' own or
// float16 under float32 activations (kv_cache_dtype="float16").
#define DISPATCH_ACTIVATION_CACHE(dtype, cache_dtype, NAME, ...)                          \
  [&] {                                                                                   \
    if ((dtype) == at::kFloat && (cache_dtype) == at::kHalf) {                            \
      using scalar_t = float;                                                             \
      using cache_t = Half;                                                               \
      return __VA_ARGS__();                                                               \
    }                                                                                     \
    TORCH_CHECK((cache_dtype) == (dtype), NAME ": a KV cache in ", (cache_dtype),         \
                " with ", (dtype), " activations (the cache takes the activations' dtype, " \
                "or float16 under float32)");                                             \
    return DISPATCH_FLOAT_BF16(dtype, NAME, [&] {                                         \
      using cache_t = scalar_t;                                                           \
      return __VA_ARGS__();                                                               \
    });                                                                                   \
  }()

void check_cpu_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be on the CPU");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// ---------------------------------------------------------------- RMSNorm ---

template <typename T>
void add_rms_norm_impl(T* out, T* residual, const T* x, const T* weight, int64_t rows,
                       int64_t n, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      add_rms_norm_row(out + r * n, residual + r * n, x ? x + r * n : nullptr, weight, n, eps);
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
  at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      silu_mul_range(out + r * inter, gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter,
                     0, inter);
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

template <typename T, typename C>
void rope_write_kv_impl(T* q_out, const T* qkv, const T* cos, const T* sin, C* key_cache,
                        C* value_cache, const int64_t* slots, int64_t tokens, int64_t hq,
                        int64_t hkv, int64_t dim) {
  const int64_t width = (hq + 2 * hkv) * dim;
  at::parallel_for(0, tokens, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      rope_write_token(q_out + t * hq * dim, qkv + t * width, cos + t * dim, sin + t * dim,
                       key_cache + slots[t] * hkv * dim, value_cache + slots[t] * hkv * dim, hq,
                       hkv, dim);
  });
}

// cos/sin [T, D] in dtype, contiguous.
void check_rope_tables(const at::Tensor& cos, const at::Tensor& sin, int64_t tokens,
                       int64_t dim, at::ScalarType dtype) {
  check_cpu_contiguous(cos, "cos");
  check_cpu_contiguous(sin, "sin");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == tokens && cos.size(1) == dim &&
                  sin.sizes() == cos.sizes(), "cos/sin must be [T, head_dim]");
  TORCH_CHECK(cos.scalar_type() == dtype && sin.scalar_type() == dtype,
              "cos and sin must share the activations' dtype");
}

// slot_mapping [T] int64, every slot within the cache's num_slots: its data.
const int64_t* checked_slots(const at::Tensor& slot_mapping, int64_t tokens, int64_t num_slots) {
  check_cpu_contiguous(slot_mapping, "slot_mapping");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong, "slot_mapping must be int64");
  TORCH_CHECK(slot_mapping.numel() == tokens, "one slot per token");
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(slots[t] >= 0 && slots[t] < num_slots, "slot out of range");
  return slots;
}

// qkv [T, (Hq + 2 Hkv) * D] (the fused projection's output, bias included);
// cos/sin [T, D]; cache [2, slots, Hkv, D]; slot_mapping [T] int64.
// Writes rotated keys and the values at their slots; returns rotated queries [T, Hq, D].
at::Tensor rope_write_kv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                         at::Tensor cache, const at::Tensor& slot_mapping, int64_t num_heads) {
  check_cpu_contiguous(qkv, "qkv");
  check_cpu_contiguous(cache, "cache");
  const int64_t tokens = qkv.size(0), hkv = cache.size(2), dim = cache.size(3);
  TORCH_CHECK(qkv.size(1) == (num_heads + 2 * hkv) * dim, "qkv width does not match the heads");
  auto dtype = qkv.scalar_type();
  check_rope_tables(cos, sin, tokens, dim, dtype);
  const int64_t num_slots = cache.size(1);
  const int64_t* slots = checked_slots(slot_mapping, tokens, num_slots);
  auto q = at::empty({tokens, num_heads, dim}, qkv.options());
  DISPATCH_ACTIVATION_CACHE(dtype, cache.scalar_type(), "rope_write_kv", [&] {
    cache_t* base = cache.data_ptr<cache_t>();
    rope_write_kv_impl<scalar_t, cache_t>(q.data_ptr<scalar_t>(), qkv.data_ptr<scalar_t>(),
                                 cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(), base,
                                 base + num_slots * hkv * dim, slots, tokens, num_heads, hkv,
                                 dim);
  });
  return q;
}

// Split requests 0 .. batch into one contiguous range per thread of about equal
// attention work (queries x context), then run body(begin, end) on each range.
// at::parallel_for's equal-count split leaves a thread idle while the other
// finishes longer contexts.
template <typename Body>
void parallel_over_requests(int64_t batch, const int32_t* query_len,
                            const int32_t* context_len, const Body& body) {
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), batch);
  if (threads <= 1) return body(0, batch);
  std::vector<int64_t> cost(batch + 1, 0);
  for (int64_t b = 0; b < batch; ++b)
    cost[b + 1] = cost[b] + (query_len[b] + 3) / 4 * static_cast<int64_t>(context_len[b]) + 16;
  std::vector<int64_t> split(threads + 1, batch);
  split[0] = 0;
  for (int64_t t = 1, b = 0; t < threads; ++t) {
    while (b < batch && cost[b] * threads < cost[batch] * t) ++b;
    split[t] = b;
  }
  at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      if (split[t] < split[t + 1]) body(split[t], split[t + 1]);
  });
}

// bfloat16 attention takes the AMX kernel where the CPU has it; tests switch it off
// to cover the vector kernel too.
bool use_amx_attention = true;

bool set_amx_attention(bool on) {
  const bool was = use_amx_attention;
  use_amx_attention = on;
  return was;
}

bool has_amx_attention() {
#if defined(SPECDEC_HAS_AMX)
  return amx_usable();
#else
  return false;
#endif
}

// The AMX kernel for bfloat16 (queries and cache) where it applies; false where the
// caller must run the vector kernel.
template <typename T, typename C>
bool try_amx_attention(T*, const T*, const C*, const C*, const int32_t*, int64_t,
                       const int32_t*, const int32_t*, const int32_t*, int64_t, int64_t,
                       int64_t, int64_t, int64_t, float, int64_t) {
  return false;
}

#if defined(SPECDEC_HAS_AMX)
template <>
bool try_amx_attention<BFloat16, BFloat16>(BFloat16* o, const BFloat16* qp,
                                           const BFloat16* key_cache,
                                           const BFloat16* value_cache, const int32_t* tables,
                                           int64_t max_blocks, const int32_t* qs,
                                           const int32_t* ql, const int32_t* cl, int64_t batch,
                                           int64_t hq, int64_t hkv, int64_t dim,
                                           int64_t block_size, float scale,
                                           int64_t sliding_window) {
  if (!use_amx_attention || dim % 32 != 0 || block_size % 16 != 0 || !amx_usable())
    return false;
  auto run = [&](auto attend) {
    parallel_over_requests(batch, ql, cl, [&](int64_t begin, int64_t end) {
      thread_local AmxScratch scratch;
      configure_attention_tiles();
      for (int64_t b = begin; b < end; ++b)
        attend(o, qp, key_cache, value_cache, tables + b * max_blocks, qs[b], ql[b], cl[b], hq,
               hkv, block_size, scale, sliding_window, scratch);
      _tile_release();
    });
  };
  switch (dim) {
    case 32: run(attend_amx<2>); break;
    case 64: run(attend_amx<4>); break;
    case 128: run(attend_amx<8>); break;
    default: run(attend_amx<16>); break;
  }
  return true;
}
#endif

// Whether paged_attention takes the AMX kernel for this dtype and shape (the GGUF
// stack runs the vector kernel only, so such steps keep the per-operation path).
bool amx_attention_applies(at::ScalarType dtype, int64_t dim, int64_t block_size) {
  return dtype == at::kBFloat16 && use_amx_attention && dim % 32 == 0 &&
         block_size % 16 == 0 && has_amx_attention();
}

bool supports_head_dim(int64_t dim) {
  return dim == 16 || dim == 32 || dim == 64 || dim == 128 || dim == 256;
}

// The block tables and lengths of a kernel group, checked against the cache and the
// number of query rows.
StackAttention check_kernel_group(const at::Tensor& cache, const at::Tensor& block_tables,
                                  const at::Tensor& query_start, const at::Tensor& query_len,
                                  const at::Tensor& context_len, int64_t query_rows,
                                  int64_t block_size, double scale, int64_t sliding_window) {
  for (const at::Tensor& t : {cache, block_tables, query_start, query_len, context_len})
    check_cpu_contiguous(t, "paged_attention argument");
  for (const at::Tensor& t : {block_tables, query_start, query_len, context_len})
    TORCH_CHECK(t.scalar_type() == at::kInt, "block tables and lengths must be int32");
  TORCH_CHECK(block_size > 0, "block_size must be positive");
  const int64_t batch = block_tables.size(0), max_blocks = block_tables.size(1);
  TORCH_CHECK(query_start.numel() == batch && query_len.numel() == batch &&
                  context_len.numel() == batch, "one query start, length and context per request");
  const int64_t num_slots = cache.size(1);
  const int32_t* tables = block_tables.data_ptr<int32_t>();
  const int32_t* qs = query_start.data_ptr<int32_t>();
  const int32_t* ql = query_len.data_ptr<int32_t>();
  const int32_t* cl = context_len.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(ql[b] >= 1 && ql[b] <= cl[b] && qs[b] >= 0 && qs[b] + ql[b] <= query_rows,
                "bad query range");
    const int64_t blocks = (cl[b] + block_size - 1) / block_size;
    TORCH_CHECK(blocks <= max_blocks, "context longer than the block table");
    for (int64_t i = 0; i < blocks; ++i)
      TORCH_CHECK(tables[b * max_blocks + i] >= 0 &&
                      (tables[b * max_blocks + i] + 1) * block_size <= num_slots,
                  "block id out of range");
  }
  return {tables, max_blocks, qs, ql, cl, batch, block_size, static_cast<float>(scale),
          sliding_window};
}

// q, out [T, Hq, D]; cache [2, slots, Hkv, D]; block_tables [B, max_blocks] int32;
// query_start / query_len / context_len [B] int32 (a request's queries are rows
// query_start .. +query_len of q, its last context_len positions' last query_len).
void paged_attention(at::Tensor out, const at::Tensor& q, const at::Tensor& cache,
                     const at::Tensor& block_tables, const at::Tensor& query_start,
                     const at::Tensor& query_len, const at::Tensor& context_len,
                     int64_t block_size, double scale, int64_t sliding_window) {
  check_cpu_contiguous(out, "out");
  check_cpu_contiguous(q, "q");
  TORCH_CHECK(out.scalar_type() == q.scalar_type(), "q and out must share a dtype");
  const int64_t hq = q.size(1), hkv = cache.size(2), dim = cache.size(3);
  TORCH_CHECK(q.size(2) == dim && hq % hkv == 0 && out.sizes() == q.sizes(), "bad head shapes");
  TORCH_CHECK(supports_head_dim(dim), "paged_attention: unsupported head_dim ", dim);
  const StackAttention group = check_kernel_group(cache, block_tables, query_start, query_len,
                                                  context_len, q.size(0), block_size, scale,
                                                  sliding_window);
  const int64_t batch = group.batch, max_blocks = group.max_blocks;
  const int64_t num_slots = cache.size(1);
  const int32_t* tables = group.tables;
  const int32_t* qs = group.query_start;
  const int32_t* ql = group.query_len;
  const int32_t* cl = group.context_len;
  DISPATCH_ACTIVATION_CACHE(q.scalar_type(), cache.scalar_type(), "paged_attention", [&] {
    const cache_t* key_cache = cache.data_ptr<cache_t>();
    const cache_t* value_cache = key_cache + num_slots * hkv * dim;
    scalar_t* o = out.data_ptr<scalar_t>();
    const scalar_t* qp = q.data_ptr<scalar_t>();
    if (try_amx_attention(o, qp, key_cache, value_cache, tables, max_blocks, qs, ql, cl, batch,
                          hq, hkv, dim, block_size, static_cast<float>(scale), sliding_window))
      return;
    // (request, KV head, partition) tasks, split by work across the threads; then the
    // rows that read several partitions merged (attention_tasks.h).
    const AttentionPlan plan = plan_attention(batch, qs, ql, cl, hq, hkv, sliding_window);
    at::Tensor scratch;
    const Partials partials = partials_for(plan, q.size(0), hq, dim, scratch);
    auto run = [&](auto attend) {
      const int threads = static_cast<int>(std::min<int64_t>(
          at::get_num_threads(), static_cast<int64_t>(plan.tasks.size())));
      const std::vector<int64_t> bounds = task_bounds(plan, std::max(threads, 1));
      at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          task_runs(plan, bounds[t], bounds[t + 1], [&](const AttentionTask& task) {
            attend(o, qp, key_cache, value_cache, tables + task.b * max_blocks, qs[task.b],
                   ql[task.b], cl[task.b], task.kv, hq, hkv, block_size,
                   static_cast<float>(scale), sliding_window, task.g0, task.g1, task.part,
                   partials);
          });
      });
      const int64_t rows = static_cast<int64_t>(plan.split_rows.size());
      at::parallel_for(0, rows * hq, 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const SplitRow& r = plan.split_rows[i / hq];
          const int64_t head = i % hq;
          merge_partitions(o + (r.row * hq + head) * dim, partials, r.row, head, r.positions);
        }
      });
    };
    switch (dim) {
      case 16: return run(attend_one<scalar_t, 1, cache_t>);
      case 32: return run(attend_one<scalar_t, 2, cache_t>);
      case 64: return run(attend_one<scalar_t, 4, cache_t>);
      case 128: return run(attend_one<scalar_t, 8, cache_t>);
      default: return run(attend_one<scalar_t, 16, cache_t>);
    }
  });
}


// ------------------------------------------------------------------ argmax ---

// Index of the first maximum of each float32 row (what torch.max(dim=-1) returns for
// rows without NaN; -inf entries are fine), in one vectorised pass, rows split
// across threads.
at::Tensor argmax_rows(const at::Tensor& logits) {
  check_cpu_contiguous(logits, "logits");
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat,
              "argmax_rows: float32 [rows, vocab]");
  const int64_t rows = logits.size(0), vocab = logits.size(1), nv = vocab / 16 * 16;
  TORCH_CHECK(vocab > 0, "argmax_rows: empty rows");
  auto out = at::empty({rows}, logits.options().dtype(at::kLong));
  const float* data = logits.data_ptr<float>();
  int64_t* idx = out.data_ptr<int64_t>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float lane_best[16];
    alignas(64) float lane_at[16];
    for (int64_t r = begin; r < end; ++r) {
      const float* row = data + r * vocab;
      float best = -std::numeric_limits<float>::infinity();
      int64_t at = 0;
      if (nv > 0) {
        // Per lane: the best value and the first chunk it occurred in (strict >).
        Vec16 best_v = Vec16::load(row), at_v = Vec16::zero();
        for (int64_t i = 16; i < nv; i += 16) {
          const Vec16 v = Vec16::load(row + i);
          const Vec16 chunk = Vec16::broadcast(static_cast<float>(i));
          at_v = Vec16::select_greater(v, best_v, chunk, at_v);
          best_v = Vec16::max(best_v, v);
        }
        best_v.store(lane_best);
        at_v.store(lane_at);
        at = static_cast<int64_t>(lane_at[0]);
        best = lane_best[0];
        for (int64_t lane = 0; lane < 16; ++lane) {
          const int64_t where = static_cast<int64_t>(lane_at[lane]) + lane;
          if (lane_best[lane] > best || (lane_best[lane] == best && where < at)) {
            best = lane_best[lane];
            at = where;
          }
        }
      }
      for (int64_t i = nv; i < vocab; ++i) {
        if (row[i] > best || (nv == 0 && i == 0)) {
          best = row[i];
          at = i;
        }
      }
      idx[r] = at;
    }
  });
  return out;
}

// The checks both draws share: float32 [rows, vocab] logits, and one value a row of each
// per-row argument, contiguous, in its dtype. Returns the number of rows.
int64_t check_sample_arguments(
    const char* what, const at::Tensor& logits,
    std::initializer_list<std::pair<const at::Tensor*, at::ScalarType>> per_row) {
  check_cpu_contiguous(logits, "logits");
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.size(1) > 0,
              what, ": float32 [rows, vocab] logits");
  const int64_t rows = logits.size(0);
  for (const auto& [t, dtype] : per_row) {
    check_cpu_contiguous(*t, what);
    TORCH_CHECK(t->dim() == 1 && t->size(0) == rows, what, ": one value a row");
    TORCH_CHECK(t->scalar_type() == dtype, what, ": a per-row argument of ",
                t->scalar_type(), " where ", dtype, " is expected");
  }
  return rows;
}

at::Tensor sample_rows(const at::Tensor& logits, const at::Tensor& inv_temp,
                       const at::Tensor& min_p, const at::Tensor& uniforms) {
  const int64_t rows = check_sample_arguments(
      "sample_rows", logits,
      {{&inv_temp, at::kFloat}, {&min_p, at::kFloat}, {&uniforms, at::kDouble}});
  const int64_t vocab = logits.size(1);
  auto out = at::empty({rows}, logits.options().dtype(at::kLong));
  const float* data = logits.data_ptr<float>();
  const float* it = inv_temp.data_ptr<float>();
  const float* mp = min_p.data_ptr<float>();
  const double* u = uniforms.data_ptr<double>();
  int64_t* tok = out.data_ptr<int64_t>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      tok[r] = sample_row(data + r * vocab, vocab, it[r], mp[r], u[r]);
  });
  return out;
}

at::Tensor sample_filtered_rows(const at::Tensor& logits, const at::Tensor& inv_temp,
                                const at::Tensor& top_k, const at::Tensor& top_p,
                                const at::Tensor& min_p, const at::Tensor& uniforms) {
  const int64_t rows = check_sample_arguments(
      "sample_filtered_rows", logits,
      {{&inv_temp, at::kFloat}, {&top_k, at::kLong}, {&top_p, at::kDouble},
       {&min_p, at::kFloat}, {&uniforms, at::kDouble}});
  const int64_t vocab = logits.size(1);
  auto out = at::empty({rows}, logits.options().dtype(at::kLong));
  const float* data = logits.data_ptr<float>();
  const float* it = inv_temp.data_ptr<float>();
  const int64_t* k = top_k.data_ptr<int64_t>();
  const double* p = top_p.data_ptr<double>();
  const float* mp = min_p.data_ptr<float>();
  const double* u = uniforms.data_ptr<double>();
  int64_t* tok = out.data_ptr<int64_t>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<SampleCandidate> kept;
    for (int64_t r = begin; r < end; ++r)
      tok[r] = sample_filtered_row(data + r * vocab, vocab, it[r], k[r], p[r], mp[r], u[r], kept);
  });
  return out;
}

// ------------------------------------------------------- AMX projections ---

// Row counts up to which tile_linear beats oneDNN's matmul (measured at 128 and 512
// rows: 0.28 vs 0.45 ms and 1.05 vs 1.27 ms for 3072 x 576; slower at 2048).
constexpr int64_t kTileLinearMaxRows = 512;

bool has_tile_linear() {
#if defined(SPECDEC_HAS_AMX)
  return amx_usable();
#else
  return false;
#endif
}

// w [N, K] bf16 -> [N/32, K/32, 2, 16, 32], the layout tile_linear streams.
at::Tensor pack_tile_weight(const at::Tensor& w) {
  check_cpu_contiguous(w, "weight");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16, "pack_tile_weight: bf16 [N, K]");
  const int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK(n % 32 == 0 && k % 32 == 0, "pack_tile_weight: N and K must be multiples of 32");
  TORCH_CHECK(has_tile_linear(), "pack_tile_weight: this CPU has no usable AMX tiles");
  auto out = HugePageArena::zeros({n / 32, k / 32, 2, 16, 32}, at::kBFloat16);
#if defined(SPECDEC_HAS_AMX)
  pack_tile_layout(reinterpret_cast<const uint16_t*>(w.data_ptr<BFloat16>()),
                   reinterpret_cast<uint16_t*>(out.data_ptr<BFloat16>()), n, k);
#endif
  return out;
}

// x [M, K] bf16 times a pack_tile_weight weight (+ bias [N]) -> [M, N] bf16, or
// float32 (holding the same bf16-rounded values) with out_float.
at::Tensor tile_linear(const at::Tensor& x_in, const at::Tensor& w,
                       const c10::optional<at::Tensor>& bias, bool out_float) {
  check_cpu_contiguous(w, "weight");
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kBFloat16 && x_in.device().is_cpu(),
              "tile_linear: x must be bf16 [M, K] on the CPU");
  const at::Tensor x = x_in.contiguous();
  TORCH_CHECK(w.dim() == 5 && w.scalar_type() == at::kBFloat16,
              "tile_linear: the weight must come from pack_tile_weight");
  const int64_t m = x.size(0), k = w.size(1) * 32, n = w.size(0) * 32;
  TORCH_CHECK(x.size(1) == k, "tile_linear: x has ", x.size(1), " features, the weight ", k);
  if (bias) {
    check_cpu_contiguous(*bias, "bias");
    TORCH_CHECK(bias->scalar_type() == at::kBFloat16 && bias->numel() == n, "tile_linear: bias");
  }
  auto y = at::empty({m, n}, x.options().dtype(out_float ? at::kFloat : at::kBFloat16));
  if (m == 0) return y;
#if defined(SPECDEC_HAS_AMX)
  TORCH_CHECK(amx_usable(), "tile_linear: this CPU has no usable AMX tiles");
  thread_local std::vector<BFloat16> tail;  // the last m % 16 rows, zero-padded
  if (m % 16) {
    tail.assign(16 * k, BFloat16(0.f));
    std::memcpy(tail.data(), x.data_ptr<BFloat16>() + (m / 16 * 16) * k,
                (m % 16) * k * sizeof(BFloat16));
  }
  const BFloat16* tail_rows = tail.data();
  const BFloat16* b = bias ? bias->data_ptr<BFloat16>() : nullptr;
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<BFloat16>());
  if (out_float)
    tile_linear_rows(x.data_ptr<BFloat16>(), tail_rows, wp, b, y.data_ptr<float>(), m, n, k);
  else
    tile_linear_rows(x.data_ptr<BFloat16>(), tail_rows, wp, b, y.data_ptr<BFloat16>(), m, n, k);
#else
  TORCH_CHECK(false, "tile_linear: built without AMX");
#endif
  return y;
}

// ---------------------------------------------- batch-invariant projections ---

bool has_bf16_invariant() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

// w [N, K] bf16 (K even) -> [N, K] in bf16_invariant_linear's column groups.
at::Tensor pack_bf16_invariant(const at::Tensor& w_in) {
  TORCH_CHECK(has_bf16_invariant(), "pack_bf16_invariant: built without AVX-512");
  TORCH_CHECK(w_in.dim() == 2 && w_in.scalar_type() == at::kBFloat16 && w_in.device().is_cpu(),
              "pack_bf16_invariant: weight must be bf16 [out, in] on the CPU");
  TORCH_CHECK(w_in.size(1) % 2 == 0 && w_in.size(1) > 0 && w_in.size(0) > 0,
              "pack_bf16_invariant: in_features must be even and positive, got ", w_in.size(1));
  const at::Tensor w = w_in.contiguous();
  auto out = HugePageArena::zeros(w.sizes(), at::kBFloat16);
#if defined(__AVX512F__)
  pack_bf16_invariant_layout(reinterpret_cast<const uint16_t*>(w.data_ptr<BFloat16>()),
                             reinterpret_cast<uint16_t*>(out.data_ptr<BFloat16>()), w.size(0),
                             w.size(1));
#endif
  return out;
}

// x [T, K] bf16 times a pack_bf16_invariant weight [N, K] (+ bias [N]) -> [T, N] bf16,
// or float32 (holding the same bf16-rounded values) with out_float; each row's result
// independent of the other rows and the thread count.
at::Tensor bf16_invariant_linear(const at::Tensor& x_in, const at::Tensor& w,
                                 const c10::optional<at::Tensor>& bias, bool out_float) {
  TORCH_CHECK(has_bf16_invariant(), "bf16_invariant_linear: built without AVX-512");
  check_cpu_contiguous(w, "weight");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16,
              "bf16_invariant_linear: the weight must come from pack_bf16_invariant");
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kBFloat16 && x_in.device().is_cpu(),
              "bf16_invariant_linear: x must be bf16 [T, in] on the CPU");
  const int64_t m = x_in.size(0), n = w.size(0), k = w.size(1);
  TORCH_CHECK(x_in.size(1) == k, "bf16_invariant_linear: x has ", x_in.size(1),
              " features, the weight ", k);
  at::Tensor b;
  if (bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->numel() == n && bias->device().is_cpu(),
                "bf16_invariant_linear: bias must be [out]");
    b = bias->to(at::kFloat).contiguous();  // the bf16 values, exactly
  }
  const at::Tensor x = x_in.contiguous();
  auto y = at::empty({m, n}, x.options().dtype(out_float ? at::kFloat : at::kBFloat16));
  if (m == 0) return y;
#if defined(__AVX512F__)
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<BFloat16>());
  const float* bp = bias ? b.data_ptr<float>() : nullptr;
  if (out_float)
    bf16_invariant_rows(x.data_ptr<BFloat16>(), wp, bp, y.data_ptr<float>(), m, n, k);
  else
    bf16_invariant_rows(x.data_ptr<BFloat16>(), wp, bp, y.data_ptr<BFloat16>(), m, n, k);
#endif
  return y;
}

// ------------------------------------------------------------ projections ---

void check_bias(const c10::optional<at::Tensor>& bias, int64_t out, const char* what) {
  TORCH_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == out), what, ": bias must be [out]");
}

Projection plain_projection(const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 2 && !weight.is_mkldnn(), "Projection.plain: weight [out, in]");
  check_bias(bias, weight.size(0), "Projection.plain");
  Projection p;
  p.kind = Projection::Kind::kPlain;
  p.weight = weight;
  p.bias = bias;
  return p;
}

Projection onednn_projection(const at::Tensor& packed, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(packed.is_mkldnn(), "Projection.onednn: a oneDNN pre-packed weight");
  Projection p;
  p.kind = Projection::Kind::kOneDnn;
  p.weight = packed;
  p.bias = bias;
  return p;
}

Projection bf16_invariant_projection(const at::Tensor& packed,
                                     const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(has_bf16_invariant(), "Projection.bf16_invariant: built without AVX-512");
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kBFloat16 && packed.is_contiguous(),
              "Projection.bf16_invariant: a weight from pack_bf16_invariant");
  check_bias(bias, packed.size(0), "Projection.bf16_invariant");
  Projection p = plain_projection(packed, bias);
  p.kind = Projection::Kind::kBf16Invariant;
  return p;
}

// packed: oneDNN's copy for calls of more than kTileLinearMaxRows rows; None: the
// tiles serve every row count (outputs independent of the batch).
Projection amx_tiles_projection(const at::Tensor& tiles, const c10::optional<at::Tensor>& packed,
                                const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(tiles.dim() == 5 && tiles.scalar_type() == at::kBFloat16,
              "Projection.amx_tiles: tiles from pack_tile_weight");
  check_bias(bias, tiles.size(0) * 32, "Projection.amx_tiles");
  Projection p;
  if (packed) p = onednn_projection(*packed, bias);
  p.bias = bias;
  p.kind = Projection::Kind::kAmxTiles;
  p.tiles = tiles;
  return p;
}

Projection int8_projection(const at::Tensor& weight, const at::Tensor& scales,
                           const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar,
              "Projection.int8: weight int8 [out, in]");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == weight.size(0),
              "Projection.int8: scales [out]");
  check_bias(bias, weight.size(0), "Projection.int8");
  Projection p = plain_projection(weight, bias);
  p.kind = Projection::Kind::kInt8;
  p.scales = scales;
  return p;
}

Projection module_projection(const py::object& module) {
  TORCH_CHECK(PyCallable_Check(module.ptr()), "Projection.module: a callable x -> y");
  Projection p;
  p.kind = Projection::Kind::kModule;
  p.module = module;
  return p;
}

const GgufFormatInfo& gguf_format(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const GgufFormatInfo& f : gguf_format_table())
    if (upper == f.name) return f;
  std::string known;
  for (const std::string& f : gguf_formats()) known += " " + f;
  TORCH_CHECK_VALUE(false, "Projection.gguf: unknown format '", name, "' (this build runs", known,
                    ")");
}

// parts: (format, uint8 [rows, row_bytes]) each, stacked along the outputs. Runs of
// consecutive parts in one format become one segment (one copy of their bytes).
Projection gguf_projection(const std::vector<std::tuple<std::string, at::Tensor>>& parts,
                           const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK_VALUE(!parts.empty(), "Projection.gguf: no parts");
  auto qw = std::make_shared<QuantWeight>();
  std::vector<std::pair<GgufFormat, std::vector<at::Tensor>>> runs;
  for (size_t i = 0; i < parts.size(); ++i) {
    const GgufFormatInfo& f = gguf_format(std::get<0>(parts[i]));
    const at::Tensor& blocks = std::get<1>(parts[i]);
    TORCH_CHECK_VALUE(blocks.device().is_cpu() && blocks.dim() == 2 &&
                          blocks.scalar_type() == at::kByte && blocks.size(0) > 0,
                      "Projection.gguf: part ", i, " must be uint8 [rows, row_bytes] on the CPU");
    const int64_t row_bytes = blocks.size(1);
    TORCH_CHECK_VALUE(row_bytes > 0 && row_bytes % f.block_bytes == 0, "Projection.gguf: part ",
                      i, " has rows of ", row_bytes, " bytes, not whole ", f.name, " blocks of ",
                      f.block_bytes);
    const int64_t in = row_bytes / f.block_bytes * f.block_elems;
    TORCH_CHECK_VALUE(i == 0 || in == qw->in_features, "Projection.gguf: part ", i, " has ", in,
                      " in_features, part 0 ", qw->in_features);
    qw->in_features = in;
    if (runs.empty() || runs.back().first != f.format) runs.emplace_back(f.format, std::vector<at::Tensor>{});
    runs.back().second.push_back(blocks);
  }
  for (auto& [format, tensors] : runs) {
    QuantSegment seg;
    seg.format = format;
    seg.row0 = qw->out_features;
    const at::Tensor raw = at::cat(tensors, 0);
    seg.rows = raw.size(0);
    seg.blocks = quant::kernel_layout(format, raw);  // a new tensor: the input may go
    qw->out_features += seg.rows;
    qw->segments.push_back(std::move(seg));
  }
  check_bias(bias, qw->out_features, "Projection.gguf");
  if (bias) qw->bias = bias->to(at::kFloat).contiguous().clone();
  Projection p;
  p.kind = Projection::Kind::kGguf;
  p.bias = bias;
  p.quant = std::move(qw);
  return p;
}

// The gguf kind's sizes; None for the other kinds.
py::object gguf_property(const Projection& p, int64_t (*get)(const QuantWeight&)) {
  if (p.kind != Projection::Kind::kGguf) return py::none();
  return py::int_(get(*p.quant));
}

// -------------------------------------------------- GGUF embedding rows ---

// Rows ids of a GGUF embedding (blocks [rows, blocks per row, block bytes], Q8_0, Q4_0
// or Q4_1) dequantized to dtype: per block d q (Q8_0), d q + m (Q4_1), d (q - 8) (Q4_0)
// in float32, two roundings (built with -ffp-contract=off), then one to dtype: the
// same values as gguf-py's dequantize and quant_linear.py's dequantize_blocks.
at::Tensor gguf_embedding(const at::Tensor& blocks, const at::Tensor& ids_in,
                          const std::string& format, at::ScalarType dtype) {
  check_cpu_contiguous(blocks, "blocks");
  TORCH_CHECK(blocks.dim() == 3 && blocks.scalar_type() == at::kByte,
              "gguf_embedding: blocks must be uint8 [rows, blocks, block bytes]");
  TORCH_CHECK(ids_in.scalar_type() == at::kLong, "gguf_embedding: ids must be int64");
  const GgufFormatInfo& f = gguf_format(format);
  TORCH_CHECK(f.block_elems == 32 && f.format != GgufFormat::kQ4_K,
              "gguf_embedding: Q8_0, Q4_0 or Q4_1 only, not ", format);
  TORCH_CHECK(blocks.size(2) == f.block_bytes, "gguf_embedding: ", format, " blocks are ",
              f.block_bytes, " bytes, not ", blocks.size(2));
  const at::Tensor ids = ids_in.contiguous();
  const int64_t n = ids.numel(), rows = blocks.size(0), nb = blocks.size(1), dim = nb * 32;
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(id[i] >= 0 && id[i] < rows, "gguf_embedding: id ", id[i], " out of range");
  auto sizes = ids.sizes().vec();
  sizes.push_back(dim);
  at::Tensor out = at::empty(sizes, blocks.options().dtype(dtype));
  const uint8_t* base = blocks.data_ptr<uint8_t>();
  DISPATCH_FLOAT_BF16(dtype, "gguf_embedding", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = base + (id[i] * nb + b) * f.block_bytes;
        scalar_t* dst = o + i * dim + b * 32;
        const float d = quant::half_at(blk);
        if (f.format == GgufFormat::kQ8_0) {
          for (int k = 0; k < 32; ++k)
            dst[k] = static_cast<scalar_t>(d * static_cast<float>(static_cast<int8_t>(blk[2 + k])));
          continue;
        }
        const bool q41 = f.format == GgufFormat::kQ4_1;
        const uint8_t* qs = blk + (q41 ? 4 : 2);
        const float m = q41 ? quant::half_at(blk + 2) : 0.f;
        for (int k = 0; k < 32; ++k) {  // elements k < 16: low nibbles; k >= 16: high
          const int q = k < 16 ? qs[k] & 0x0F : qs[k - 16] >> 4;
          dst[k] = static_cast<scalar_t>(q41 ? d * static_cast<float>(q) + m
                                             : d * static_cast<float>(q - 8));
        }
      }
    }
  });
  return out;
}

at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& packed,
                         const c10::optional<at::Tensor>& bias) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  std::vector<c10::IValue> stack{x, packed, bias, c10::IValue(std::string("none")),
                                 c10::IValue(c10::List<c10::optional<at::Scalar>>()),
                                 c10::IValue(c10::optional<std::string>())};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// x [T, in] -> [T, out] in x's dtype, through the matmul of the projection's kind.
at::Tensor project_in_dtype(const at::Tensor& x, const Projection& p) {
  switch (p.kind) {
    case Projection::Kind::kPlain:
      return at::linear(x, p.weight, p.bias);
    case Projection::Kind::kAmxTiles:
      if (x.size(0) <= kTileLinearMaxRows || !p.weight.defined())
        return tile_linear(x, p.tiles, p.bias, false);
      return onednn_linear(x, p.weight, p.bias);
    case Projection::Kind::kOneDnn:
      return onednn_linear(x, p.weight, p.bias);
    case Projection::Kind::kInt8: {
      at::Tensor y = at::_weight_int8pack_mm(x.to(p.scales.scalar_type()), p.weight, p.scales);
      if (p.bias) y = y + *p.bias;
      return y.to(x.scalar_type());
    }
    case Projection::Kind::kGguf:
      return quant_linear(x, *p.quant);
    case Projection::Kind::kBf16Invariant:
      return bf16_invariant_linear(x, p.weight, p.bias, false);
    case Projection::Kind::kModule: {
      py::gil_scoped_acquire gil;
      return p.module(x).cast<at::Tensor>();
    }
  }
  TORCH_CHECK(false, "project: unknown projection kind");
}

// project(), or with out_float its values widened to float32 (the GGUF kernel writes
// them so directly: no second pass over an LM head's logits).
at::Tensor project(const at::Tensor& x, const Projection& p, bool out_float = false) {
  if (!out_float) return project_in_dtype(x, p);
  if (p.kind == Projection::Kind::kGguf) return quant_linear(x, *p.quant, true);
  return project_in_dtype(x, p).to(at::kFloat);
}

// ---------------------------------------------------------- decoder layers ---

std::shared_ptr<LayerWeights> make_layer_weights(
    const at::Tensor& input_norm, const Projection& qkv, const Projection& o_proj,
    const at::Tensor& post_norm, const Projection& gate_up, const Projection& down,
    int64_t num_heads, double eps) {
  TORCH_CHECK(input_norm.dim() == 1 && post_norm.sizes() == input_norm.sizes() &&
                  post_norm.scalar_type() == input_norm.scalar_type(),
              "LayerWeights: input_norm and post_norm must be [hidden] in one dtype");
  TORCH_CHECK(num_heads > 0 && eps > 0, "LayerWeights: num_heads and eps must be positive");
  auto w = std::make_shared<LayerWeights>();
  w->input_norm = input_norm;
  w->qkv = qkv;
  w->o_proj = o_proj;
  w->post_norm = post_norm;
  w->gate_up = gate_up;
  w->down = down;
  w->num_heads = num_heads;
  w->eps = eps;
  return w;
}

// (rotated queries [T, Hq, D], the layer's cache) -> attention output [T, Hq, D]
using Attend = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& cache)>;

// One decoder layer of the fused forward: residual add + RMSNorm, q|k|v, RoPE + KV
// write, attention, o, residual add + RMSNorm, gate|up, SiLU * up, down. h is the
// residual stream [T, hidden], updated in place: delta (the previous layer's output,
// None before the first layer) is added to it first. Returns this layer's output,
// the delta the next layer (or the final norm) adds.
at::Tensor layer(at::Tensor h, const c10::optional<at::Tensor>& delta, const LayerWeights& w,
                 const at::Tensor& cache, const at::Tensor& cos, const at::Tensor& sin,
                 const at::Tensor& slot_mapping, const Attend& attend) {
  at::Tensor x = add_rms_norm(delta, h, w.input_norm, w.eps);
  at::Tensor q = rope_write_kv(project(x, w.qkv), cos, sin, cache, slot_mapping, w.num_heads);
  at::Tensor attn_out = project(attend(q, cache).view({h.size(0), -1}), w.o_proj);
  x = add_rms_norm(attn_out, h, w.post_norm, w.eps);
  return project(silu_mul(project(x, w.gate_up)), w.down);
}

// decoder_stack for layers whose projections are all GGUF blocks: gguf_stack.h's one
// parallel region, after checking every shape it relies on.
// group: the step's attention inputs, already checked against h's rows and the cache.
at::Tensor gguf_decoder_stack(at::Tensor h, const at::Tensor& cos, const at::Tensor& sin,
                              const std::vector<at::Tensor>& caches,
                              const at::Tensor& slot_mapping,
                              const std::vector<std::shared_ptr<LayerWeights>>& layers,
                              const at::Tensor& final_norm, const StackAttention& group,
                              double eps) {
  for (const at::Tensor& t : {h, final_norm}) check_cpu_contiguous(t, "decoder_stack argument");
  const int64_t tokens = h.size(0), hidden = h.size(1);
  const at::Tensor& cache0 = caches.front();
  TORCH_CHECK(cache0.dim() == 4 && cache0.size(0) == 2, "a KV cache is [2, slots, Hkv, D]");
  const int64_t num_slots = cache0.size(1), hkv = cache0.size(2), dim = cache0.size(3);
  TORCH_CHECK(supports_head_dim(dim), "decoder_stack: unsupported head_dim ", dim);
  const auto dtype = h.scalar_type();
  check_rope_tables(cos, sin, tokens, dim, dtype);
  TORCH_CHECK(final_norm.numel() == hidden && final_norm.scalar_type() == dtype,
              "final_norm must be [hidden] in the hidden dtype");
  const int64_t* slots = checked_slots(slot_mapping, tokens, num_slots);
  const LayerWeights& first = *layers.front();
  const int64_t hq = first.num_heads;
  TORCH_CHECK(hq % hkv == 0, "query heads must be a multiple of the KV heads");
  const int64_t inter = first.gate_up.quant->out_features / 2;
  for (size_t i = 0; i < layers.size(); ++i) {  // none is None: all_gguf checked
    const LayerWeights& w = *layers[i];
    const at::Tensor& c = caches[i];
    check_cpu_contiguous(c, "cache");
    TORCH_CHECK(c.sizes() == cache0.sizes() && c.scalar_type() == cache0.scalar_type(),
                "every layer's cache must match the first's shape and dtype");
    TORCH_CHECK(w.num_heads == hq, "every layer must have the first's query heads");
    for (const at::Tensor* n : {&w.input_norm, &w.post_norm}) {
      check_cpu_contiguous(*n, "norm weight");
      TORCH_CHECK(n->numel() == hidden && n->scalar_type() == dtype,
                  "norm weights must be [hidden] in the hidden dtype");
    }
    auto shape = [](const Projection& p, int64_t in, int64_t out, const char* name) {
      TORCH_CHECK(p.quant->in_features == in && p.quant->out_features == out, "decoder_stack: ",
                  name, " is [", p.quant->out_features, ", ", p.quant->in_features,
                  "], expected [", out, ", ", in, "]");
    };
    shape(w.qkv, hidden, (hq + 2 * hkv) * dim, "qkv");
    shape(w.o_proj, hq * dim, hidden, "o_proj");
    shape(w.gate_up, hidden, 2 * inter, "gate_up");
    shape(w.down, inter, hidden, "down");
  }
  at::Tensor out = at::empty_like(h);
  DISPATCH_ACTIVATION_CACHE(dtype, cache0.scalar_type(), "decoder_stack", [&] {
    std::vector<cache_t*> cache_ptrs;
    for (const at::Tensor& c : caches) cache_ptrs.push_back(c.data_ptr<cache_t>());
    gguf_stack<scalar_t, cache_t>(h.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                         cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(), cache_ptrs,
                         num_slots, slots, tokens, hidden, hkv, dim, layers,
                         final_norm.data_ptr<scalar_t>(), static_cast<float>(eps), group);
  });
  return out;
}

// All decoder layers of a step whose attention is one kernel group (block tables and
// lengths as paged_attention takes them), then the final norm, without returning to
// Python between layers. h is the residual stream, updated in place.
at::Tensor decoder_stack(at::Tensor h, const at::Tensor& cos, const at::Tensor& sin,
                         const std::vector<at::Tensor>& caches,
                         const at::Tensor& slot_mapping,
                         const std::vector<std::shared_ptr<LayerWeights>>& layers,
                         const at::Tensor& final_norm, const at::Tensor& block_tables,
                         const at::Tensor& query_start, const at::Tensor& query_len,
                         const at::Tensor& context_len, int64_t block_size, double scale,
                         int64_t sliding_window, double eps) {
  TORCH_CHECK(caches.size() == layers.size(), "one KV cache per layer");
  if (all_gguf(layers) && !amx_attention_applies(h.scalar_type(), caches.front().size(3),
                                                  block_size)) {
    TORCH_CHECK(h.dim() == 2, "decoder_stack: hidden must be [tokens, hidden]");
    const StackAttention group =
        check_kernel_group(caches.front(), block_tables, query_start, query_len, context_len,
                           h.size(0), block_size, scale, sliding_window);
    return gguf_decoder_stack(h, cos, sin, caches, slot_mapping, layers, final_norm, group, eps);
  }
  const Attend attend = [&](const at::Tensor& q, const at::Tensor& cache) {
    at::Tensor out = at::empty_like(q);
    paged_attention(out, q, cache, block_tables, query_start, query_len, context_len,
                    block_size, scale, sliding_window);
    return out;
  };
  c10::optional<at::Tensor> delta;
  for (size_t i = 0; i < layers.size(); ++i) {
    TORCH_CHECK(layers[i] != nullptr, "decoder_stack: a layer is None");
    delta = layer(h, delta, *layers[i], caches[i], cos, sin, slot_mapping, attend);
  }
  return add_rms_norm(delta, h, final_norm, eps);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_rms_norm", &add_rms_norm, "residual += x; return rms_norm(residual) * weight");
  m.def("silu_mul", &silu_mul, "silu(gate) * up over a fused gate|up projection");
  m.def("rope_write_kv", &rope_write_kv, "RoPE on q and k; write k, v to the paged cache");
  m.def("paged_attention", &paged_attention, "causal attention through block tables");
  m.def("set_amx_attention", &set_amx_attention, "use AMX for bf16 attention; returns the old value");
  m.def("has_amx_attention", &has_amx_attention, "whether the AMX attention kernel can run here");
  m.def(
      "set_attention_partition",
      [](int64_t size) {
        TORCH_CHECK_VALUE(size > 0 && size % kChunk == 0,
                          "set_attention_partition: a positive multiple of ", kChunk);
        const int64_t was = partition_size_setting();
        partition_size_setting() = size;
        return was;
      },
      "positions per attention partition (tests shorten it); returns the old value");
  m.def("supports_head_dim", &supports_head_dim, "head sizes paged_attention is built for");
  m.def(
      "core_round_trip_ns",
      [](int64_t cpu_a, int64_t cpu_b, int64_t trips, int64_t rounds) {
        TORCH_CHECK(trips >= 1 && rounds >= 1, "core_round_trip_ns: trips and rounds >= 1");
        py::gil_scoped_release released;
        return core_round_trip_ns(cpu_a, cpu_b, trips, rounds);
      },
      "median ns for a cache line to go from CPU a to CPU b and back",
      py::arg("cpu_a"), py::arg("cpu_b"), py::arg("trips") = 2000, py::arg("rounds") = 5);
  m.def("argmax_rows", &argmax_rows, "first maximum of each float32 row");
  m.def("sample_rows", &sample_rows,
        "one token per float32 row at 1 / inv_temp with min-p, by inverse CDF (uniforms)");
  m.def("sample_filtered_rows", &sample_filtered_rows,
        "sample_rows with each row's top-k (<= 0: none) and top-p (>= 1: none)");
  m.def(
      "huge_page_zeros",
      [](std::vector<int64_t> sizes, at::ScalarType dtype) { return HugePageArena::zeros(sizes, dtype); },
      "a zero-filled CPU tensor on 2 MB pages where the OS gives them (huge_page_arena.h)",
      py::arg("sizes"), py::arg("dtype"));
  m.def(
      "populate_pages",
      [](const at::Tensor& t, int64_t offset, int64_t bytes) {
        const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
        TORCH_CHECK(t.is_contiguous(), "populate_pages: a contiguous tensor");
        TORCH_CHECK(offset >= 0 && bytes >= 0 && offset <= size && bytes <= size - offset,
                    "populate_pages: bytes ", offset, " .. ", offset + bytes,
                    " outside the tensor's ", size);
        const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr()) + offset;
        py::gil_scoped_release released;  // the tensor's memory stays: t is held
        return populate_pages(p, bytes);
      },
      "fault in the pages under t's bytes offset .. offset + bytes, contents unchanged "
      "(populate_pages.h); False where the OS cannot",
      py::arg("t"), py::arg("offset"), py::arg("bytes"));
  m.def("has_tile_linear", &has_tile_linear, "whether AMX projections can run here");
  m.def("pack_tile_weight", &pack_tile_weight, "pre-pack a bf16 [N, K] weight for tile_linear");
  m.def("tile_linear", &tile_linear, "x W^T (+ bias) on AMX tiles, W from pack_tile_weight",
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("out_float") = false);
  m.def("has_bf16_invariant", &has_bf16_invariant,
        "whether this build has the batch-invariant bf16 projection (AVX-512)");
  m.def("pack_bf16_invariant", &pack_bf16_invariant,
        "pre-pack a bf16 [out, in] weight for bf16_invariant_linear");
  m.def("bf16_invariant_linear", &bf16_invariant_linear,
        "x W^T (+ bias), each row independent of the batch, W from pack_bf16_invariant",
        py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(),
        py::arg("out_float") = false);
  m.def("gguf_formats", &gguf_formats, "GGUF weight formats Projection.gguf runs here");
  m.def("gguf_embedding", &gguf_embedding, "rows of a Q8_0 / Q4_0 / Q4_1 embedding, dequantized",
        py::arg("blocks"), py::arg("ids"), py::arg("format"), py::arg("dtype"));
  m.def("set_nontemporal_weights", &set_nontemporal_weights,
        "weights read once per call (GGUF up to 8 rows, bf16-invariant up to its row tile) "
        "loaded with a non-temporal hint; returns the old value");
  m.def("nontemporal_weights", [] { return nontemporal_weights.load(); },
        "whether set_nontemporal_weights is on");
  m.def("tile_linear_max_rows", [] { return kTileLinearMaxRows; }, "rows up to which project() uses tile_linear");

  py::class_<Projection>(m, "Projection", "a projection's weight in the layout of its matmul")
      .def_static("plain", &plain_projection, py::arg("weight"), py::arg("bias") = py::none())
      .def_static("onednn", &onednn_projection, py::arg("packed"), py::arg("bias") = py::none())
      .def_static("amx_tiles", &amx_tiles_projection, py::arg("tiles"),
                  py::arg("packed") = py::none(), py::arg("bias") = py::none())
      .def_static("int8", &int8_projection, py::arg("weight"), py::arg("scales"),
                  py::arg("bias") = py::none())
      .def_static("module", &module_projection, py::arg("module"))
      .def_static("bf16_invariant", &bf16_invariant_projection, py::arg("packed"),
                  py::arg("bias") = py::none())
      .def_static("gguf", &gguf_projection, py::arg("parts"), py::arg("bias") = py::none(),
                  "raw GGUF blocks: parts [(format, uint8 [rows, row_bytes])], outputs stacked")
      .def_property_readonly("kind", &Projection::kind_name)
      .def_property_readonly("out_features", [](const Projection& p) {
        return gguf_property(p, [](const QuantWeight& q) { return q.out_features; });
      })
      .def_property_readonly("in_features", [](const Projection& p) {
        return gguf_property(p, [](const QuantWeight& q) { return q.in_features; });
      })
      .def_property_readonly("nbytes", [](const Projection& p) {
        return gguf_property(p, [](const QuantWeight& q) { return q.nbytes(); });
      })
      .def_property_readonly("weight", [](const Projection& p) { return p.weight; })
      .def_property_readonly("bias", [](const Projection& p) { return p.bias; })
      .def("__repr__", [](const Projection& p) {
        return std::string("Projection(") + p.kind_name() + ")";
      });
  py::class_<LayerWeights, std::shared_ptr<LayerWeights>>(m, "LayerWeights",
                                                          "one decoder layer's weights")
      .def(py::init(&make_layer_weights), py::kw_only(), py::arg("input_norm"), py::arg("qkv"),
           py::arg("o_proj"), py::arg("post_norm"), py::arg("gate_up"), py::arg("down"),
           py::arg("num_heads"), py::arg("eps"))
      .def_readonly("input_norm", &LayerWeights::input_norm)
      .def_readonly("qkv", &LayerWeights::qkv)
      .def_readonly("o_proj", &LayerWeights::o_proj)
      .def_readonly("post_norm", &LayerWeights::post_norm)
      .def_readonly("gate_up", &LayerWeights::gate_up)
      .def_readonly("down", &LayerWeights::down)
      .def_readonly("num_heads", &LayerWeights::num_heads)
      .def_readonly("eps", &LayerWeights::eps);

  m.def("project", &project,
        "x W^T (+ bias) through the projection's matmul; out_float: as float32",
        py::arg("x"), py::arg("projection"), py::arg("out_float") = false);
  m.def(
      "layer",
      [](at::Tensor h, const c10::optional<at::Tensor>& delta, const LayerWeights& weights,
         const at::Tensor& cache, const at::Tensor& cos, const at::Tensor& sin,
         const at::Tensor& slot_mapping, const py::function& attend) {
        return layer(h, delta, weights, cache, cos, sin, slot_mapping,
                     [&](const at::Tensor& q, const at::Tensor& c) {
                       return attend(q, c).cast<at::Tensor>();
                     });
      },
      "one decoder layer; h += delta first; returns the layer's output delta; "
      "attend(q, cache) -> attention output",
      py::arg("hidden"), py::arg("delta"), py::arg("weights"), py::arg("cache"), py::arg("cos"),
      py::arg("sin"), py::arg("slot_mapping"), py::arg("attend"));
  m.def("decoder_stack", &decoder_stack, "all decoder layers of a kernel-group step",
        py::arg("hidden"), py::arg("cos"), py::arg("sin"), py::arg("caches"),
        py::arg("slot_mapping"), py::arg("layers"), py::arg("final_norm"),
        py::arg("block_tables"), py::arg("query_start"), py::arg("query_len"),
        py::arg("context_len"), py::arg("block_size"), py::arg("scale"),
        py::arg("sliding_window"), py::arg("eps"));
}
