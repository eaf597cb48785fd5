// All decoder layers of a step in one OpenMP parallel region, for layers whose four
// projections are GGUF blocks (quant_linear.h).
//
// The per-operation path (cpu_kernels.cpp: layer()) opens a parallel region for each
// projection, norm, RoPE and attention call and allocates each output: at one decode
// token, ~10 regions and ~10 allocations a layer, while the projections themselves
// take ~50 µs a layer. Here the team is started once per step and the phases are
// separated by barriers (team_barrier.h): each thread takes a fixed share of the row
// phases, the attention (its rows, its query heads) and each projection's groups of
// outputs. Shares are fixed, not claimed from a shared counter: when the two cores are
// on different complexes each claim costs a cache line's trip between them (~0.4 µs,
// ~700 a step), more than a balanced split loses. Buffers are allocated once per step.
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
#include "team_barrier.h"

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

// Whether every layer's projections are GGUF blocks (what gguf_stack runs); false
// where a layer is missing (decoder_stack's own check names that).
inline bool all_gguf(const std::vector<std::shared_ptr<LayerWeights>>& layers) {
  for (const auto& w : layers) {
    if (w == nullptr) return false;
    for (const Projection* p : {&w->qkv, &w->o_proj, &w->gate_up, &w->down})
      if (p->kind != Projection::Kind::kGguf) return false;
  }
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

// Split the attention's (request, query head) items, request-major, into nt contiguous
// ranges of about equal work (queries x context): bounds[t] .. bounds[t + 1]. Query
// heads, not KV heads: a decode's 3 KV heads on 2 threads would split 2:1.
inline std::vector<int64_t> attention_bounds(const StackAttention& a, int64_t hq, int nt) {
  const int64_t items = a.batch * hq;
  std::vector<int64_t> cost(items + 1, 0);
  for (int64_t i = 0; i < items; ++i) {
    const int64_t b = i / hq;
    cost[i + 1] = cost[i] + static_cast<int64_t>(a.query_len[b]) * a.context_len[b] + 16;
  }
  std::vector<int64_t> bounds(nt + 1, items);
  bounds[0] = 0;
  for (int64_t t = 1, i = 0; t < nt; ++t) {
    while (i < items && cost[i] * nt < cost[items] * t) ++i;
    bounds[t] = i;
  }
  return bounds;
}

// The items i0 .. i1 in runs sharing a request and a KV head: body(b, kv_head, g0, g1),
// g0 .. g1 the run's query heads within the KV head's group.
template <typename Body>
inline void kv_runs(int64_t i0, int64_t i1, int64_t hq, int64_t group, const Body& body) {
  for (int64_t i = i0; i < i1;) {
    const int64_t b = i / hq, head = i % hq, kv = head / group;
    const int64_t end = std::min(i1, b * hq + (kv + 1) * group);
    body(b, kv, head % group, head % group + (end - i));
    i = end;
  }
}

template <typename T>
using AttendFn = void (*)(T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, int64_t, float, int64_t, int64_t,
                          int64_t);

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
  const int64_t hq = first.num_heads, q_width = hq * dim, group = hq / hkv;
  const int64_t qkv_width = (hq + 2 * hkv) * dim;
  const int64_t inter = first.gate_up.quant->out_features / 2;
  const auto opts =
      at::TensorOptions().dtype(std::is_same_v<T, float> ? at::kFloat : at::kBFloat16);
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
  // Whole 32-blocks per head: the thread that attends a head quantises its output
  // (o_proj's input) itself, with no phase and barrier of its own. Every token of the
  // step is a query of one request (the kernel group's rows), so every block is written.
  const bool heads_own_blocks = dim % 32 == 0;
  // gate|up runs by 32-blocks of the intermediate, whole groups of gate's and of up's
  // outputs: the intermediate is down's input, whole GGUF blocks (32 or 256 wide).
  static_assert(32 % quant::kLanes == 0, "a 32-block of outputs is whole groups");
  TORCH_CHECK(inter % 32 == 0, "gguf_stack: intermediate size ", inter, " not whole 32-blocks");
  const int team_size = std::max(1, at::get_num_threads());
  TeamBarrier barrier(team_size);
  const std::vector<int64_t> att_bounds = stack::attention_bounds(attn, hq, team_size);

#pragma omp parallel num_threads(team_size)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    // A team smaller than asked for splits attention evenly instead.
    const std::vector<int64_t> bounds =
        nt == team_size ? att_bounds : stack::attention_bounds(attn, hq, nt);
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
    // Ask for this thread's attention items' cached K/V rows (up to kKvPrefetchBytes).
    auto prefetch_kv = [&](const T* key_cache, const T* value_cache) {
      const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(T));
      int64_t budget = stack::kKvPrefetchBytes / (2 * row_bytes);  // positions
      auto each = [&](int64_t b, int64_t kv, int64_t, int64_t) {
        const int64_t known = attn.context_len[b] - attn.query_len[b];
        const int64_t window = attn.sliding_window;
        const int64_t lo = window > 0 ? std::max<int64_t>(0, known - window) : 0;
        const int64_t hi = std::min(known, lo + std::max<int64_t>(budget, 0));
        prefetch_positions(attn.tables + b * attn.max_blocks, lo, hi, attn.block_size, key_cache,
                           value_cache, hkv * dim, kv * dim, row_bytes);
        budget -= hi - lo;
      };
      stack::kv_runs(bounds[tid], bounds[tid + 1], hq, group, each);
    };
    auto wait_for_team = [&] { barrier.arrive_and_wait(tid, nt); };
    // This thread's first weights of a projection (nullptr for none, or past its last
    // group), asked for while its last group of the projection before runs.
    auto first_weights = [&](const Projection* p) -> const uint8_t* {
      return p ? quant::group_bytes(*p->quant, stack::share(p->quant->groups(), tid, nt).first)
               : nullptr;
    };
    // This thread's groups of a projection's outputs, all rows.
    auto project = [&](const Projection& p, const quant::QuantizedRows& xq, T* y,
                       const Projection* following) {
      const auto [g0, g1] = stack::share(p.quant->groups(), tid, nt);
      quant::quant_groups<T>(*p.quant, xq, tokens, g0, g1, y, first_weights(following));
    };
    // gate|up for this thread's 32-blocks b0 .. b1 of the intermediate (gate's groups,
    // then up's), then silu(gate) * up and its quantisation for down, with no barrier
    // between: no thread reads another's gate or up.
    auto gate_up_act = [&](const Projection& p, const Projection& following) {
      const auto [b0, b1] = stack::share(inter / 32, tid, nt);
      const int64_t g0 = 32 * b0 / quant::kLanes, g1 = 32 * b1 / quant::kLanes;
      const int64_t up0 = inter / quant::kLanes;
      quant::quant_groups<T>(*p.quant, xq_hidden, tokens, g0, g1, gate_up,
                             quant::group_bytes(*p.quant, up0 + g0));
      quant::quant_groups<T>(*p.quant, xq_hidden, tokens, up0 + g0, up0 + g1, gate_up,
                             first_weights(&following));
      for (int64_t t = 0; t < tokens; ++t) {
        const T* g = gate_up + t * 2 * inter;
        silu_mul_range(act + t * inter, g, g + inter, 32 * b0, 32 * b1);
        quant::quantize_row_blocks(act + t * inter, inter, t, b0, b1, xq_act);
      }
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
      wait_for_team();
      project(w.qkv, xq_hidden, qkv, &w.o_proj);
      wait_for_team();
      for (int64_t t = r0; t < r1; ++t)
        rope_write_token(q + t * q_width, qkv + t * qkv_width, cos + t * dim, sin + t * dim,
                         key_cache + slots[t] * hkv * dim, value_cache + slots[t] * hkv * dim,
                         hq, hkv, dim);
      wait_for_team();
      auto attend_run = [&](int64_t b, int64_t kv, int64_t g0, int64_t g1) {
        attend(att, q, key_cache, value_cache, attn.tables + b * attn.max_blocks,
               attn.query_start[b], attn.query_len[b], attn.context_len[b], kv, hq, hkv,
               attn.block_size, attn.scale, attn.sliding_window, g0, g1);
        if (!heads_own_blocks) return;
        // The heads' outputs, written by this thread alone, quantised here for o_proj.
        const int64_t head0 = kv * group + g0, per_head = dim / 32;
        for (int64_t t = attn.query_start[b]; t < attn.query_start[b] + attn.query_len[b]; ++t)
          quant::quantize_row_blocks(att + t * q_width, q_width, t, head0 * per_head,
                                     (head0 + g1 - g0) * per_head, xq_att);
      };
      stack::kv_runs(bounds[tid], bounds[tid + 1], hq, group, attend_run);
      if (!heads_own_blocks) {
        wait_for_team();
        blocks(q_width, [&](int64_t t, int64_t b) {
          quant::quantize_row_blocks(att + t * q_width, q_width, t, b, b + 1, xq_att);
        });
      }
      wait_for_team();
      project(w.o_proj, xq_att, o, &w.gate_up);
      wait_for_team();
      norm_rows(o, w.post_norm.data_ptr<T>(), eps, x, &xq_hidden);
      wait_for_team();
      gate_up_act(w.gate_up, w.down);
      wait_for_team();
      project(w.down, xq_act, down, li + 1 < layers.size() ? &layers[li + 1]->qkv : nullptr);
      wait_for_team();
    }
    norm_rows(down, final_norm, final_eps, out, nullptr);
  }
}

}  // namespace specdec_kernels
