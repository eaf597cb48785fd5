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
// A layer of a decode step crosses 5 barriers: after q|k|v (split by heads, so the
// thread that projects a head also rotates it and writes it to the cache), after the
// attention (its tasks: attention_tasks.h), after o_proj, after gate|up (whose SiLU and
// quantisation each thread does for its own blocks) and after down; a sixth, after the
// attention's tasks, where a query reads several position partitions (a long context)
// and its partial results are merged. The two norms need none: with few rows every
// thread norms all of them on its own copy of the residual stream. While a thread waits
// at a barrier it asks for its next weights (wait_prefetch.h).
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

#include "attention_tasks.h"
#include "attention_tile.h"
#include "layer_weights.h"
#include "quant_linear.h"
#include "row_ops.h"
#include "team_barrier.h"
#include "wait_prefetch.h"

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

// Rows up to which every thread norms all of a step's rows itself, on its own copy of the
// residual stream, instead of its share of them followed by a barrier: a decode step or
// a speculative verification (a row costs ~0.5 µs; a barrier ~0.3-1 µs plus the wait for
// the slower thread).
constexpr int64_t kPrivateRows = 8;

template <typename T, typename C>
using AttendFn = void (*)(T*, const T*, const C*, const C*, const int32_t*, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, int64_t, float, int64_t, int64_t,
                          int64_t, int64_t, const Partials&);

template <typename T, typename C>
AttendFn<T, C> attend_for(int64_t dim) {
  switch (dim) {
    case 16: return attend_one<T, 1, C>;
    case 32: return attend_one<T, 2, C>;
    case 64: return attend_one<T, 4, C>;
    case 128: return attend_one<T, 8, C>;
    default: return attend_one<T, 16, C>;
  }
}

}  // namespace stack

// h [tokens, hidden]: the residual stream, updated in place; out [tokens, hidden]: the
// final norm of the stream after the last layer. caches[i]: layer i's [2, slots, Hkv, D]
// in C (T, or float16 under float32 activations).
template <typename T, typename C>
void gguf_stack(T* h, T* out, const T* cos, const T* sin, const std::vector<C*>& caches,
                int64_t num_slots, const int64_t* slots, int64_t tokens, int64_t hidden,
                int64_t hkv, int64_t dim,
                const std::vector<std::shared_ptr<LayerWeights>>& layers,
                const T* final_norm, float final_eps, const StackAttention& attn) {
  const LayerWeights& first = *layers.front();
  const int64_t hq = first.num_heads, q_width = hq * dim, group = hq / hkv;
  const int64_t qkv_width = (hq + 2 * hkv) * dim;
  const int64_t inter = first.gate_up.quant->out_features / 2;
  const int team_size = std::max(1, at::get_num_threads());
  // Few rows: every thread keeps its own copy of the residual stream and norms all its
  // rows itself (a few µs), so no barrier follows a norm; see stack::kPrivateRows.
  const bool private_rows = tokens <= stack::kPrivateRows;
  const auto opts =
      at::TensorOptions().dtype(std::is_same_v<T, float> ? at::kFloat : at::kBFloat16);
  // One buffer per intermediate, allocated once for the step.
  const int64_t own_size = private_rows ? 2 * tokens * hidden : 0;  // per thread
  at::Tensor buffers = at::empty({tokens * (hidden + qkv_width + 2 * q_width + 2 * hidden +
                                            2 * inter + inter) + team_size * own_size}, opts);
  T* x = buffers.data_ptr<T>();        // normed stream [T, hidden]
  T* qkv = x + tokens * hidden;        // [T, qkv_width]
  T* q = qkv + tokens * qkv_width;     // rotated queries [T, hq, D]
  T* att = q + tokens * q_width;       // attention output [T, hq * D]
  T* o = att + tokens * q_width;       // o_proj output [T, hidden]
  T* down = o + tokens * hidden;       // the MLP's output [T, hidden]
  T* gate_up = down + tokens * hidden; // [T, 2I]
  T* act = gate_up + tokens * 2 * inter;  // silu(gate) * up [T, I]
  T* own_rows = act + tokens * inter;  // per thread: residual and normed rows [2, T, hidden]
  quant::QuantizedRows xq_hidden, xq_att, xq_act;
  quant::reset_rows(xq_hidden, tokens, hidden);
  quant::reset_rows(xq_att, tokens, q_width);
  quant::reset_rows(xq_act, tokens, inter);
  std::vector<quant::QuantizedRows> xq_own(private_rows ? team_size : 0);
  for (quant::QuantizedRows& xq : xq_own) quant::reset_rows(xq, tokens, hidden);
  const stack::AttendFn<T, C> attend = stack::attend_for<T, C>(dim);
  // Whole 32-blocks per head: the thread that attends a head quantises its output
  // (o_proj's input) itself, with no phase and barrier of its own (where a query reads
  // several partitions, the merge phase quantises every head instead). Every token of the
  // step is a query of one request (the kernel group's rows), so every block is written.
  const bool heads_own_blocks = dim % 32 == 0;
  // gate|up runs by 32-blocks of the intermediate, whole groups of gate's and of up's
  // outputs: the intermediate is down's input, whole GGUF blocks (32 or 256 wide).
  static_assert(32 % quant::kLanes == 0, "a 32-block of outputs is whole groups");
  TORCH_CHECK(inter % 32 == 0, "gguf_stack: intermediate size ", inter, " not whole 32-blocks");
  // q|k|v is split by heads, whole groups each (supports_head_dim: 16 .. 256), so the
  // thread that projects a head rotates it and writes it to the cache itself.
  TORCH_CHECK(dim % quant::kLanes == 0, "gguf_stack: head size ", dim, " not whole groups");
  const int64_t head_groups = dim / quant::kLanes;
  TeamBarrier barrier(team_size);
  // The attention's tasks (attention_tasks.h); rows reading several partitions are
  // merged, and every head's output quantised for o_proj, in a phase of its own.
  const AttentionPlan plan = plan_attention(attn.batch, attn.query_start, attn.query_len,
                                            attn.context_len, hq, hkv, attn.sliding_window);
  const std::vector<int64_t> att_bounds = task_bounds(plan, team_size);
  const bool partitioned = !plan.split_rows.empty();
  at::Tensor scratch;
  const Partials partials = partials_for(plan, tokens, hq, dim, scratch);
  std::vector<int64_t> split_index(partitioned ? tokens : 0, -1);  // row -> split_rows
  for (size_t i = 0; i < plan.split_rows.size(); ++i)
    split_index[plan.split_rows[i].row] = static_cast<int64_t>(i);

#pragma omp parallel num_threads(team_size)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    // A team smaller than asked for splits attention evenly instead.
    const std::vector<int64_t> bounds = nt == team_size ? att_bounds : task_bounds(plan, nt);
    const auto [r0, r1] = stack::share(tokens, tid, nt);
    using Range = std::pair<int64_t, int64_t>;
    // This thread's groups of q|k|v's outputs: whole heads (q's, then k's, then v's).
    const auto [u0, u1] = stack::share(hq + 2 * hkv, tid, nt);
    const Range qkv_groups{u0 * head_groups, u1 * head_groups};
    auto groups_of = [&](const Projection& p) { return stack::share(p.quant->groups(), tid, nt); };

    // Norm rows t0 .. t1 of res (adding add first, when given) into dst, and quantise
    // them for xq.
    auto norm_rows = [&](int64_t t0, int64_t t1, T* res, const T* add, const T* weight,
                         float eps, T* dst, quant::QuantizedRows* xq) {
      for (int64_t t = t0; t < t1; ++t) {
        add_rms_norm_row(dst + t * hidden, res + t * hidden, add ? add + t * hidden : nullptr,
                         weight, hidden, eps);
        if (xq) quant::quantize_row_blocks(dst + t * hidden, hidden, t, 0, xq->blocks, *xq);
      }
    };
    // The residual stream and the normed rows this thread's projections read: its own
    // copies, all rows (private_rows), or the shared ones, each thread norming its rows.
    T* const res = private_rows ? own_rows + tid * own_size : h;
    T* const normed = private_rows ? res + tokens * hidden : x;
    quant::QuantizedRows& xq_normed = private_rows ? xq_own[tid] : xq_hidden;
    if (private_rows) std::copy(h, h + tokens * hidden, res);
    // Norm the stream after adding add; a barrier follows unless the rows are private.
    auto norm_stream = [&](const T* add, const T* weight, float eps) {
      if (private_rows) return norm_rows(0, tokens, res, add, weight, eps, normed, &xq_normed);
      norm_rows(r0, r1, res, add, weight, eps, normed, &xq_normed);
    };
    // Ask for this thread's attention items' cached K/V rows (up to kKvPrefetchBytes).
    auto prefetch_kv = [&](const C* key_cache, const C* value_cache) {
      const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(C));
      int64_t budget = stack::kKvPrefetchBytes / (2 * row_bytes);  // positions
      const int64_t size = partition_size();
      auto each = [&](const AttentionTask& task) {
        const int64_t known = attn.context_len[task.b] - attn.query_len[task.b];
        const int64_t window = attn.sliding_window;
        const int64_t lo = std::max(task.part * size,
                                    window > 0 ? std::max<int64_t>(0, known - window) : 0);
        const int64_t end = std::min(known, (task.part + 1) * size);
        const int64_t hi = std::min(end, lo + std::max<int64_t>(budget, 0));
        if (hi <= lo) return;
        prefetch_positions(attn.tables + task.b * attn.max_blocks, lo, hi, attn.block_size,
                           key_cache, value_cache, hkv * dim, task.kv * dim, row_bytes);
        budget -= hi - lo;
      };
      task_runs(plan, bounds[tid], bounds[tid + 1], each);
    };
    // While it waits at a barrier, a thread asks for the weights it projects next.
    WaitPrefetch ahead;
    auto prefetch_next = [&](const Projection* p, Range groups) {
      ahead.aim(p ? p->quant.get() : nullptr, groups.first, groups.second);
    };
    auto wait_for_team = [&] { barrier.arrive_and_wait(tid, nt, [&] { return ahead.step(); }); };
    // This thread's groups g of a projection's outputs, all rows; then: the first weights
    // of the projection after it (a multi-tile chunk asks for them as it ends).
    auto project = [&](const Projection& p, Range g, const quant::QuantizedRows& xq, T* y,
                       const uint8_t* then) {
      quant::quant_groups<T>(*p.quant, xq, tokens, g.first, g.second, y, then);
    };
    auto first_weights = [&](const Projection& p, Range g) {
      return quant::group_bytes(*p.quant, g.first);
    };
    // q|k|v for this thread's heads, each rotated (q, k) and written to the cache (k, v)
    // as soon as it is projected: no barrier between the projection and RoPE.
    auto qkv_rope = [&](const LayerWeights& w, C* key_cache, C* value_cache) {
      project(w.qkv, qkv_groups, xq_normed, qkv, first_weights(w.o_proj, groups_of(w.o_proj)));
      for (int64_t t = 0; t < tokens; ++t) {
        const T* src = qkv + t * qkv_width;
        const T *c = cos + t * dim, *s = sin + t * dim;
        C* k_slot = key_cache + slots[t] * hkv * dim;
        C* v_slot = value_cache + slots[t] * hkv * dim;
        for (int64_t u = u0; u < u1; ++u) {
          const T* head = src + u * dim;
          if (u < hq) rope(q + t * q_width + u * dim, head, c, s, dim);
          else if (u < hq + hkv) rope(k_slot + (u - hq) * dim, head, c, s, dim);
          else convert_row(v_slot + (u - hq - hkv) * dim, head, dim);
        }
      }
    };
    // gate|up for this thread's 32-blocks b0 .. b1 of the intermediate (gate's groups,
    // then up's), then silu(gate) * up and its quantisation for down, with no barrier
    // between: no thread reads another's gate or up.
    const auto [b0, b1] = stack::share(inter / 32, tid, nt);
    const Range gate_groups{32 * b0 / quant::kLanes, 32 * b1 / quant::kLanes};
    const int64_t up0 = inter / quant::kLanes;
    const Range up_groups{up0 + gate_groups.first, up0 + gate_groups.second};
    auto gate_up_act = [&](const Projection& p, const Projection& following) {
      project(p, gate_groups, xq_normed, gate_up, first_weights(p, up_groups));
      project(p, up_groups, xq_normed, gate_up, first_weights(following, groups_of(following)));
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
      const LayerWeights* next = li + 1 < layers.size() ? layers[li + 1].get() : nullptr;
      const float eps = static_cast<float>(w.eps);
      C* key_cache = caches[li];
      C* value_cache = key_cache + num_slots * hkv * dim;
      if (li == 0) prefetch_next(&w.qkv, qkv_groups);
      norm_stream(li == 0 ? nullptr : down, w.input_norm.data_ptr<T>(), eps);
      prefetch_kv(key_cache, value_cache);
      if (!private_rows) wait_for_team();
      prefetch_next(&w.o_proj, groups_of(w.o_proj));
      qkv_rope(w, key_cache, value_cache);
      wait_for_team();
      const int64_t per_head = dim / 32;
      auto attend_run = [&](const AttentionTask& task) {
        const int64_t b = task.b;
        attend(att, q, key_cache, value_cache, attn.tables + b * attn.max_blocks,
               attn.query_start[b], attn.query_len[b], attn.context_len[b], task.kv, hq, hkv,
               attn.block_size, attn.scale, attn.sliding_window, task.g0, task.g1, task.part,
               partials);
        if (!heads_own_blocks || partitioned) return;
        // The heads' outputs, written by this thread alone, quantised here for o_proj.
        const int64_t head0 = task.kv * group + task.g0;
        for (int64_t t = attn.query_start[b]; t < attn.query_start[b] + attn.query_len[b]; ++t)
          quant::quantize_row_blocks(att + t * q_width, q_width, t, head0 * per_head,
                                     (head0 + task.g1 - task.g0) * per_head, xq_att);
      };
      task_runs(plan, bounds[tid], bounds[tid + 1], attend_run);
      if (partitioned) {  // every task done: merge the split rows, quantise every head
        wait_for_team();
        const auto [i0, i1] = stack::share(tokens * hq, tid, nt);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t t = i / hq, head = i % hq;
          if (split_index[t] >= 0)
            merge_partitions(att + t * q_width + head * dim, partials, t, head,
                             plan.split_rows[split_index[t]].positions);
          if (heads_own_blocks)
            quant::quantize_row_blocks(att + t * q_width, q_width, t, head * per_head,
                                       (head + 1) * per_head, xq_att);
        }
      }
      if (!heads_own_blocks) {
        wait_for_team();
        blocks(q_width, [&](int64_t t, int64_t b) {
          quant::quantize_row_blocks(att + t * q_width, q_width, t, b, b + 1, xq_att);
        });
      }
      wait_for_team();
      prefetch_next(&w.gate_up, gate_groups);
      project(w.o_proj, groups_of(w.o_proj), xq_att, o, first_weights(w.gate_up, gate_groups));
      wait_for_team();
      norm_stream(o, w.post_norm.data_ptr<T>(), eps);
      if (!private_rows) wait_for_team();
      prefetch_next(&w.down, groups_of(w.down));
      gate_up_act(w.gate_up, w.down);
      wait_for_team();
      prefetch_next(next ? &next->qkv : nullptr, qkv_groups);
      project(w.down, groups_of(w.down), xq_act, down,
              next ? first_weights(next->qkv, qkv_groups) : nullptr);
      wait_for_team();
    }
    // The final norm, each thread its rows; its copy of the stream back into h.
    norm_rows(r0, r1, res, down, final_norm, final_eps, out, nullptr);
    if (private_rows) std::copy(res + r0 * hidden, res + r1 * hidden, h + r0 * hidden);
  }
}

}  // namespace specdec_kernels
