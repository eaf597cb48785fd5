// A kernel group's attention as tasks for a team of threads: each (request, KV head,
// position partition), its query heads split one per task where the request reads a
// single partition (a decode's 3 KV heads on 2 threads would split 2:1), all together
// where it reads several (each partition's rows then read by one thread only). The
// paged_attention op and gguf_stack.h both split their work this way, so a query's
// values are the same through either.

#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention_tile.h"

namespace specdec_kernels {

// Request b's query heads g0 .. g1 of KV head kv over partition part.
struct AttentionTask {
  int64_t b, kv, g0, g1, part;
};

// A row that reads several partitions: its results merged after every task has run.
struct SplitRow {
  int64_t row;
  QuerySpan positions;
};

struct AttentionPlan {
  std::vector<AttentionTask> tasks;  // request-major
  std::vector<int64_t> cost;         // prefix sums of the tasks' work, cost[0] = 0
  std::vector<SplitRow> split_rows;  // rows whose partitions merge_partitions combines
  int64_t max_parts = 0;             // partitions of the longest context
};

inline AttentionPlan plan_attention(int64_t batch, const int32_t* query_start,
                                    const int32_t* query_len, const int32_t* context_len,
                                    int64_t hq, int64_t hkv, int64_t window) {
  const int64_t size = partition_size(), group = hq / hkv;
  AttentionPlan plan;
  plan.cost.push_back(0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t ctx = context_len[b], q_len = query_len[b];
    const auto [p0, p1] = request_parts(ctx, q_len, window);
    plan.max_parts = std::max(plan.max_parts, p1 + 1);
    for (int64_t i = 0; i < q_len; ++i) {
      const QuerySpan positions = query_span(ctx, q_len, i, window);
      if (positions.split(size)) plan.split_rows.push_back({query_start[b] + i, positions});
    }
    const int64_t heads_per_task = p0 == p1 ? 1 : group;
    for (int64_t kv = 0; kv < hkv; ++kv)
      for (int64_t p = p0; p <= p1; ++p) {
        const int64_t positions = std::min(ctx, (p + 1) * size) - std::max(p * size, int64_t{0});
        for (int64_t g = 0; g < group; g += heads_per_task) {
          plan.tasks.push_back({b, kv, g, g + heads_per_task, p});
          plan.cost.push_back(plan.cost.back() + heads_per_task * q_len * positions + 16);
        }
      }
  }
  if (plan.split_rows.empty()) plan.max_parts = 0;
  return plan;
}

// Where a plan's split rows (of rows query rows, hq heads of dim) leave their partitions'
// results: a float buffer (the returned tensor owns it), none where no row is split.
inline Partials partials_for(const AttentionPlan& plan, int64_t rows, int64_t hq, int64_t dim,
                             at::Tensor& buffer) {
  if (plan.split_rows.empty()) return {};
  const int64_t slots = rows * hq * plan.max_parts;
  buffer = at::empty({slots * (dim + 2)}, at::TensorOptions().dtype(at::kFloat));
  float* acc = buffer.data_ptr<float>();
  return {acc, acc + slots * dim, hq, plan.max_parts, dim};
}

// The tasks split into nt contiguous ranges of about equal work: bounds[t] .. bounds[t + 1].
inline std::vector<int64_t> task_bounds(const AttentionPlan& plan, int nt) {
  const int64_t n = static_cast<int64_t>(plan.tasks.size());
  std::vector<int64_t> bounds(nt + 1, n);
  bounds[0] = 0;
  for (int64_t t = 1, i = 0; t < nt; ++t) {
    while (i < n && plan.cost[i] * nt < plan.cost[n] * t) ++i;
    bounds[t] = i;
  }
  return bounds;
}

// Tasks i0 .. i1 in runs sharing a request, a KV head and a partition (one call each, so
// a run's K/V rows are read once): body(task) with the run's heads as g0 .. g1.
template <typename Body>
inline void task_runs(const AttentionPlan& plan, int64_t i0, int64_t i1, const Body& body) {
  for (int64_t i = i0; i < i1;) {
    AttentionTask run = plan.tasks[i];
    int64_t j = i + 1;
    for (; j < i1; ++j) {
      const AttentionTask& next = plan.tasks[j];
      if (next.b != run.b || next.kv != run.kv || next.part != run.part || next.g0 != run.g1)
        break;
      run.g1 = next.g1;
    }
    body(run);
    i = j;
  }
}

}  // namespace specdec_kernels
