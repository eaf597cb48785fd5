// One token per row of float32 logits drawn at a temperature (with min-p, without
// top-k / top-p), by inverse CDF over e_i = exp((x_i - max) / T):
//
//   1. the row's maximum;
//   2. e_i per block of kBlock tokens, zeroed below min_p (min-p keeps e_i >= min_p,
//      the most likely token's e being 1), each block's sum accumulated in float64;
//   3. target = u * total: the first block whose running sum passes it, then the first
//      token in it whose running (float64) sum passes what is left.
//
// Token i is then drawn with probability e_i / sum(e) up to float64 rounding, the e_i
// being Vec16::exp's (the same polynomial on AVX-512 and AVX2, so the same draws at
// both levels for a seed). Pass 3 recomputes its block with the same vector code, so
// the values it scans are those pass 2 summed. A token with e_i = 0 is never drawn.
// One thread a row; ~3 reads of a 49 152-token row from L2, ~30 µs.

#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "vec16.h"

namespace specdec_kernels {

constexpr int64_t kSampleBlock = 1024;  // tokens a pass-2 sum covers

// e_i for tokens [begin, end) of a row into out[0, end - begin): exp((x - max) * inv_t),
// zeroed below min_p; returns their sum in float64.
inline double sample_block(const float* row, int64_t begin, int64_t end, float max,
                           float inv_t, float min_p, float* out) {
  alignas(64) double acc[16] = {};
  const Vec16 m = Vec16::broadcast(max), s = Vec16::broadcast(inv_t),
              floor = Vec16::broadcast(min_p), zero = Vec16::zero();
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    Vec16 e = ((Vec16::load(row + i) - m) * s).exp();
    e = Vec16::select_greater(floor, e, zero, e);  // e < min_p -> 0
    e.store(out + (i - begin));
    for (int j = 0; j < 16; ++j) acc[j] += static_cast<double>(out[i - begin + j]);
  }
  double total = 0.0;
  for (; i < end; ++i) {  // the row's tail, through the same vector code
    alignas(64) float one[16];
    Vec16 e = ((Vec16::broadcast(row[i]) - m) * s).exp();
    e = Vec16::select_greater(floor, e, zero, e);
    e.store(one);
    out[i - begin] = one[0];
    total += static_cast<double>(one[0]);
  }
  for (int j = 0; j < 16; ++j) total += acc[j];
  return total;
}

// The token drawn for one row with uniform u in [0, 1).
inline int64_t sample_row(const float* row, int64_t vocab, float inv_t, float min_p,
                          double u) {
  float max = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  if (vocab >= 16) {
    Vec16 best = Vec16::load(row);
    for (i = 16; i + 16 <= vocab; i += 16) best = Vec16::max(best, Vec16::load(row + i));
    max = best.max();
  }
  for (; i < vocab; ++i) max = std::max(max, row[i]);
  const int64_t blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  std::vector<double> sums(blocks);
  alignas(64) float e[kSampleBlock];
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSampleBlock, end = std::min(vocab, begin + kSampleBlock);
    sums[b] = sample_block(row, begin, end, max, inv_t, min_p, e);
    total += sums[b];
  }
  double left = u * total;
  int64_t last = -1;  // the last block with mass: where rounding past the end lands
  for (int64_t b = 0; b < blocks; ++b) {
    if (sums[b] > 0.0) last = b;
  }
  if (last < 0) return 0;  // no mass (NaN logits): nothing to draw from
  for (int64_t b = 0; b < blocks; ++b) {
    if (sums[b] <= 0.0) continue;
    if (left >= sums[b] && b != last) {
      left -= sums[b];
      continue;
    }
    const int64_t begin = b * kSampleBlock, end = std::min(vocab, begin + kSampleBlock);
    sample_block(row, begin, end, max, inv_t, min_p, e);
    double run = 0.0;
    int64_t chosen = -1;
    for (int64_t t = 0; t < end - begin; ++t) {
      if (e[t] <= 0.0f) continue;
      chosen = t;  // the last token with mass so far: where rounding past the end lands
      run += static_cast<double>(e[t]);
      if (run > left) break;
    }
    return begin + chosen;
  }
  return 0;  // not reached: block `last` returns
}

}  // namespace specdec_kernels
