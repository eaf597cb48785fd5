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
//
// With top-k / top-p (sample_filtered_row) the kept tokens are found without sorting the
// row: the tokens with e_i >= floor are collected (floor = 2^-10 first, 16 times
// lower while they hold fewer than k tokens, or less than p of the vocabulary's mass:
// every kept token is among them, as each ranks above all the others), cut to the top-k
// and then the top-p nucleus (a token kept while the mass ranked above it is below p of
// the top-k's or vocabulary's mass, in float64) by selection, not sorting, then to
// min-p; the draw is an inverse CDF over what is left, in the order selection left it.
// The same rules as specdec.sample.filters.

#pragma once

#include <algorithm>
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

inline float row_max(const float* row, int64_t vocab) {
  float max = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  if (vocab >= 16) {
    Vec16 best = Vec16::load(row);
    for (i = 16; i + 16 <= vocab; i += 16) best = Vec16::max(best, Vec16::load(row + i));
    max = best.max();
  }
  for (; i < vocab; ++i) max = std::max(max, row[i]);
  return max;
}

// Each block's mass into sums (pass 2); returns the row's.
inline double block_sums(const float* row, int64_t vocab, float max, float inv_t,
                         float min_p, std::vector<double>& sums) {
  alignas(64) float e[kSampleBlock];
  sums.assign((vocab + kSampleBlock - 1) / kSampleBlock, 0.0);
  double total = 0.0;
  for (size_t b = 0; b < sums.size(); ++b) {
    const int64_t begin = static_cast<int64_t>(b) * kSampleBlock;
    sums[b] = sample_block(row, begin, std::min(vocab, begin + kSampleBlock), max, inv_t,
                           min_p, e);
    total += sums[b];
  }
  return total;
}

// The token drawn for one row with uniform u in [0, 1).
inline int64_t sample_row(const float* row, int64_t vocab, float inv_t, float min_p,
                          double u) {
  const float max = row_max(row, vocab);
  std::vector<double> sums;
  double left = u * block_sums(row, vocab, max, inv_t, min_p, sums);
  const int64_t blocks = static_cast<int64_t>(sums.size());
  alignas(64) float e[kSampleBlock];
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

struct SampleCandidate {
  float e;
  int32_t index;
};

// Appends the tokens with e_i >= floor (and e_i > 0) to kept; returns their mass.
inline double collect_candidates(const float* row, int64_t vocab, float max, float inv_t,
                                 float floor, std::vector<SampleCandidate>& kept) {
  alignas(64) float e[kSampleBlock];
  const Vec16 bar = Vec16::broadcast(floor);
  double mass = 0.0;
  for (int64_t begin = 0; begin < vocab; begin += kSampleBlock) {
    const int64_t n = std::min(vocab, begin + kSampleBlock) - begin;
    sample_block(row, begin, begin + n, max, inv_t, 0.0f, e);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      for (uint32_t m = Vec16::load(e + j).mask_ge(bar); m != 0; m &= m - 1) {
        const int lane = __builtin_ctz(m);
        if (e[j + lane] <= 0.0f) continue;
        kept.push_back({e[j + lane], static_cast<int32_t>(begin + j + lane)});
        mass += e[j + lane];
      }
    }
    for (; j < n; ++j) {
      if (e[j] >= floor && e[j] > 0.0f) {
        kept.push_back({e[j], static_cast<int32_t>(begin + j)});
        mass += e[j];
      }
    }
  }
  return mass;
}

// The rank order: more likely first, the lower index first among equals.
inline bool ranks_above(const SampleCandidate& a, const SampleCandidate& b) {
  return a.e > b.e || (a.e == b.e && a.index < b.index);
}

// Moves the top-p nucleus of `kept` (the tokens whose mass ranked above them is below
// `target`) to its front, in no particular order, and returns its size: a weighted
// selection (nth_element on halves), O(n), where sorting a flat row's tens of thousands
// of candidates took milliseconds.
inline size_t nucleus_size(std::vector<SampleCandidate>& kept, double target) {
  size_t lo = 0, hi = kept.size();  // [0, lo): in the nucleus, with mass `above`
  double above = 0.0;
  while (hi - lo > 32) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(kept.begin() + lo, kept.begin() + mid, kept.begin() + hi, ranks_above);
    double mass = 0.0;  // of [lo, mid): all rank above kept[mid]
    for (size_t i = lo; i < mid; ++i) mass += kept[i].e;
    if (above + mass < target) {  // kept[mid] is in, and so is all above it
      above += mass + kept[mid].e;
      lo = mid + 1;
    } else {  // kept[mid] is out, and so is all below it
      hi = mid;
    }
  }
  std::sort(kept.begin() + lo, kept.begin() + hi, ranks_above);
  while (lo < hi && above < target) above += kept[lo++].e;
  return lo;
}

// The token drawn for one row with top_k (<= 0: none) and top_p (>= 1: none).
inline int64_t sample_filtered_row(const float* row, int64_t vocab, float inv_t,
                                   int64_t top_k, double top_p, float min_p, double u,
                                   std::vector<SampleCandidate>& kept) {
  const float max = row_max(row, vocab);
  const bool has_k = top_k > 0 && top_k < vocab;
  double total = 0.0;  // the vocabulary's mass: what top-p measures without a top-k
  if (!has_k) {
    std::vector<double> sums;
    total = block_sums(row, vocab, max, inv_t, 0.0f, sums);
  }
  float floor = 1.0f / 1024;
  for (;;) {
    kept.clear();
    const double mass = collect_candidates(row, vocab, max, inv_t, floor, kept);
    const bool enough = has_k ? static_cast<int64_t>(kept.size()) >= top_k
                              : mass >= top_p * total;
    if (enough || floor == 0.0f) break;
    floor = floor < 1e-30f ? 0.0f : floor / 16;  // few more candidates a pass
  }
  if (kept.empty()) return 0;  // no mass (NaN logits): nothing to draw from
  double norm = total;
  if (has_k) {
    if (static_cast<int64_t>(kept.size()) > top_k) {
      std::nth_element(kept.begin(), kept.begin() + top_k, kept.end(), ranks_above);
      kept.resize(top_k);
    }
    norm = 0.0;
    for (const auto& c : kept) norm += c.e;
  }
  if (top_p < 1.0) kept.resize(nucleus_size(kept, top_p * norm));
  // min-p: the most likely token has e = 1 and stays
  kept.erase(std::remove_if(kept.begin(), kept.end(),
                            [min_p](const SampleCandidate& c) { return c.e < min_p; }),
             kept.end());
  if (kept.empty()) return 0;  // not reached for valid settings (top_p > 0, min_p <= 1)
  double sum = 0.0;
  for (const auto& c : kept) sum += c.e;
  const double target = u * sum;
  double run = 0.0;
  for (const auto& c : kept) {
    run += c.e;
    if (run > target) return c.index;
  }
  return kept.back().index;  // rounding past the end
}

}  // namespace specdec_kernels
