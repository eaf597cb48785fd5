// All decoder layers of a step in one OpenMP parallel region, for layers whose four
// projections are GGUF blocks (quant_linear.h).
//
// The per-operation path (cpu_kernels.cpp: layer()) opens a parallel region for each
// projection, norm, RoPE and attention call and allocates each output: at one decode
// token, ~10 regions and ~10 allocations a layer, while the projections themselves
// take ~50 µs a layer. Here the team is started once per step; each thread takes a
// fixed share of every phase (its rows, its groups of outputs, its attention heads)
// and the phases are separated by barriers. Buffers are allocated once per step.
//
// The values are those of the per-operation path bit for bit: each row, output and
// head is computed by the same functions (row_ops.h, quant_linear.h's groups,
// attention_tile.h's attend_one), whatever the thread or the share it falls in.

#pragma once

#include <omp.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention_tile.h"
#include "layer_weights.h"
#include "quant_linear.h"
#include "row_ops.h"

namespace specdec_kernels {

// The attention inputs of a kernel-group step (as paged_attention takes them).
struct StackAttention {
  const int32_t* tables;   // [batch, max_blocks]
  int64_t max_blocks;
  const int32_t* query_start;
  const int32_t* query_len;
  const int32_t* context_len;
  int64_t batch;
  int64_t block_size;
  float scale;
  int64_t sliding_window;
};

// Whether every layer's projections are GGUF blocks (what gguf_stack runs).
inline bool all_gguf(const std::vector<std::shared_ptr<LayerWeights>>& layers) {
  for (const auto& w : layers)
    for (const Projection* p : {&w->qkv, &w->o_proj, &w->gate_up, &w->down})
      if (p->kind != Projection::Kind::kGguf) return false;
  return !layers.empty();
}

namespace stack {

// Thread tid's share [begin, end) of n items split evenly across nt threads.
inline std::pair<int64_t, int64_t> share(int64_t n, int tid, int nt) {
  return {n * tid / nt, n * (tid + 1) / nt};
}

// K/V bytes of its attention tasks' context a thread asks for ahead of the layer's
// attention (while the norm and q|k|v phases run): the cache rows come from memory
// (the weights streamed since evicted them), and the kernel's own one-chunk-ahead
// prefetch leaves its first chunks waiting on memory latency.
constexpr int64_t kKvPrefetchBytes = 256 << 10;

// Split the (request, KV head) attention tasks, request-major, into nt contiguous
// ranges of about equal work (queries x context): bounds[t] .. bounds[t + 1].
inline std::vector<int64_t> attention_bounds(const StackAttention& a, int64_t hkv, int nt) {
  const int64_t tasks = a.batch * hkv;
  std::vector<int64_t> cost(tasks + 1, 0);
  for (int64_t i = 0; i < tasks; ++i) {
    const int64_t b = i / hkv;
    cost[i + 1] = cost[i] + (a.query_len[b] + 3) / 4 * static_cast<int64_t>(a.context_len[b]) + 16;
  }
  std::vector<int64_t> bounds(nt + 1, tasks);
  bounds[0] = 0;
  for (int64_t t = 1, i = 0; t < nt; ++t) {
    while (i < tasks && cost[i] * nt < cost[tasks] * t) ++i;
    bounds[t] = i;
  }
  return bounds;
}

template <typename T>
using AttendFn = void (*)(T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, int64_t, float, int64_t);

template <typename T>
AttendFn<T> attend_for(int64_t dim) {
  switch (dim) {
    case 16: return attend_one<T, 1>;
    case 32: return attend_one<T, 2>;
    case 64: return attend_one<T, 4>;
    case 128: return attend_one<T, 8>;
    default: return attend_one<T, 16>;
  }
}

}  // namespace stack

// h [tokens, hidden]: the residual stream, updated in place; out [tokens, hidden]: the
// final norm of the stream after the last layer. caches[i]: layer i's [2, slots, Hkv, D].
template <typename T>
void gguf_stack(T* h, T* out, const T* cos, const T* sin, const std::vector<T*>& caches,
                int64_t num_slots, const int64_t* slots, int64_t tokens, int64_t hidden,
                int64_t hkv, int64_t dim,
                const std::vector<std::shared_ptr<LayerWeights>>& layers,
                const T* final_norm, float final_eps, const StackAttention& attn) {
  const LayerWeights& first = *layers.front();
  const int64_t hq = first.num_heads, q_width = hq * dim;
  const int64_t qkv_width = (hq + 2 * hkv) * dim;
  const int64_t inter = first.gate_up.quant->out_features / 2;
  const auto opts = at::TensorOptions().dtype(std::is_same_v<T, float> ? at::kFloat : at::kBFloat16);
  // One buffer per intermediate, allocated once for the step.
  at::Tensor buffers = at::empty({tokens * (hidden + qkv_width + 2 * q_width + 2 * hidden +
                                            2 * inter + inter)}, opts);
  T* x = buffers.data_ptr<T>();        // normed stream [T, hidden]
  T* qkv = x + tokens * hidden;        // [T, qkv_width]
  T* q = qkv + tokens * qkv_width;     // rotated queries [T, hq, D]
  T* att = q + tokens * q_width;       // attention output [T, hq * D]
  T* o = att + tokens * q_width;       // o_proj output [T, hidden]
  T* down = o + tokens * hidden;       // the MLP's output [T, hidden]
  T* gate_up = down + tokens * hidden; // [T, 2I]
  T* act = gate_up + tokens * 2 * inter;  // silu(gate) * up [T, I]
  quant::QuantizedRows xq_hidden, xq_att, xq_act;
  quant::reset_rows(xq_hidden, tokens, hidden);
  quant::reset_rows(xq_att, tokens, q_width);
  quant::reset_rows(xq_act, tokens, inter);
  const stack::AttendFn<T> attend = stack::attend_for<T>(dim);
  const int team_size = std::max(1, at::get_num_threads());
  const std::vector<int64_t> att_bounds = stack::attention_bounds(attn, hkv, team_size);

#pragma omp parallel num_threads(team_size)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    // A team smaller than asked for splits attention evenly instead.
    const std::vector<int64_t> bounds =
        nt == team_size ? att_bounds : stack::attention_bounds(attn, hkv, nt);
    const auto [r0, r1] = stack::share(tokens, tid, nt);
    // Norm rows r0 .. r1 (adding add first, when given) and quantise them for xq.
    auto norm_rows = [&](const T* add, const T* weight, float eps, T* dst,
                         quant::QuantizedRows* xq) {
      for (int64_t t = r0; t < r1; ++t) {
        add_rms_norm_row(dst + t * hidden, h + t * hidden, add ? add + t * hidden : nullptr,
                         weight, hidden, eps);
        if (xq) quant::quantize_row_blocks(dst + t * hidden, hidden, t, 0, xq->blocks, *xq);
      }
    };
    // Ask for this thread's attention tasks' cached K/V rows (up to kKvPrefetchBytes).
    auto prefetch_kv = [&](const T* key_cache, const T* value_cache) {
      const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(T));
      int64_t budget = stack::kKvPrefetchBytes / (2 * row_bytes);  // positions
      for (int64_t task = bounds[tid]; task < bounds[tid + 1] && budget > 0; ++task) {
        const int64_t b = task / hkv, known = attn.context_len[b] - attn.query_len[b];
        const int64_t lo = attn.sliding_window > 0 ? std::max<int64_t>(0, known - attn.sliding_window) : 0;
        const int64_t hi = std::min(known, lo + budget);
        prefetch_positions(attn.tables + b * attn.max_blocks, lo, hi, attn.block_size, key_cache,
                           value_cache, hkv * dim, task % hkv * dim, row_bytes);
        budget -= hi - lo;
      }
    };
    // This thread's groups of a projection's outputs, all rows.
    auto project = [&](const Projection& p, const quant::QuantizedRows& xq, T* y) {
      const auto [g0, g1] = stack::share(p.quant->groups(), tid, nt);
      quant::quant_groups<T>(*p.quant, xq, tokens, g0, g1, y);
    };
    // This thread's (row, 32-block) items of a [T, n] input: body(t, b), in order.
    auto blocks = [&](int64_t n, auto body) {
      const int64_t per_row = (n + 31) / 32;
      const auto [i0, i1] = stack::share(tokens * per_row, tid, nt);
      for (int64_t i = i0; i < i1; ++i) body(i / per_row, i % per_row);
    };

    for (size_t li = 0; li < layers.size(); ++li) {
      const LayerWeights& w = *layers[li];
      const float eps = static_cast<float>(w.eps);
      T* key_cache = caches[li];
      T* value_cache = key_cache + num_slots * hkv * dim;
      norm_rows(li == 0 ? nullptr : down, w.input_norm.data_ptr<T>(), eps, x, &xq_hidden);
      prefetch_kv(key_cache, value_cache);
#pragma omp barrier
      project(w.qkv, xq_hidden, qkv);
#pragma omp barrier
      for (int64_t t = r0; t < r1; ++t)
        rope_write_token(q + t * q_width, qkv + t * qkv_width, cos + t * dim, sin + t * dim,
                         key_cache + slots[t] * hkv * dim, value_cache + slots[t] * hkv * dim,
                         hq, hkv, dim);
#pragma omp barrier
      for (int64_t task = bounds[tid]; task < bounds[tid + 1]; ++task) {
        const int64_t b = task / hkv;
        attend(att, q, key_cache, value_cache, attn.tables + b * attn.max_blocks,
               attn.query_start[b], attn.query_len[b], attn.context_len[b], task % hkv, hq, hkv,
               attn.block_size, attn.scale, attn.sliding_window);
      }
#pragma omp barrier
      blocks(q_width, [&](int64_t t, int64_t b) {
        quant::quantize_row_blocks(att + t * q_width, q_width, t, b, b + 1, xq_att);
      });
#pragma omp barrier
      project(w.o_proj, xq_att, o);
#pragma omp barrier
      norm_rows(o, w.post_norm.data_ptr<T>(), eps, x, &xq_hidden);
#pragma omp barrier
      project(w.gate_up, xq_hidden, gate_up);
#pragma omp barrier
      blocks(inter, [&](int64_t t, int64_t b) {
        const T* g = gate_up + t * 2 * inter;
        silu_mul_range(act + t * inter, g, g + inter, 32 * b, std::min(inter, 32 * b + 32));
        quant::quantize_row_blocks(act + t * inter, inter, t, b, b + 1, xq_act);
      });
#pragma omp barrier
      project(w.down, xq_act, down);
#pragma omp barrier
    }
    norm_rows(down, final_norm, final_eps, out, nullptr);
  }
}

}  // namespace specdec_kernels
