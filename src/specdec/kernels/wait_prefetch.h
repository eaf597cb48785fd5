// A thread's next weights asked for while it waits at a barrier.
//
// In a decode step each thread streams its share of a projection from memory, then
// waits at a barrier for the others (for the slowest share, and for the cache line that
// releases it: ~1 µs when the cores are on different complexes). The memory is idle
// then. WaitPrefetch asks for the start of the thread's share of the next projection
// into its L2, a few lines per call, from the barrier's wait loop.

#pragma once

#include <cstdint>

#include "quant_linear.h"

namespace specdec_kernels {

class WaitPrefetch {
 public:
  // Bytes asked for ahead of one projection: about as many as a thread streams in the
  // longest wait, and well inside every x86 L2 (512 KB on Zen 3).
  static constexpr int64_t kBudgetBytes = 256 << 10;

  // From now on, each step() asks for the next lines of groups g0 .. g1 of q (none for
  // a null q), up to kBudgetBytes.
  void aim(const QuantWeight* q, int64_t g0, int64_t g1) {
    q_ = q, g_ = g0, g1_ = g1, off_ = 0, budget_ = kBudgetBytes, seg_index_ = 0, seg_g0_ = 0;
    seek();
  }

  // Asks for the next few lines; false once there are none left to ask for.
  bool step() {
    if (group_ == nullptr) return false;
    for (int i = 0; i < kLinesPerStep && off_ < group_bytes_; ++i, off_ += 64)
      prefetch_l2(group_ + off_);
    budget_ -= 64 * kLinesPerStep;
    if (off_ >= group_bytes_) {
      off_ = 0, ++g_;
      seek();
    }
    if (budget_ <= 0) group_ = nullptr;
    return true;
  }

 private:
  static constexpr int kLinesPerStep = 4;  // then the wait checks its flag again

  static void prefetch_l2(const uint8_t* p) {
#if defined(__AVX2__) || defined(__AVX512F__)
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
#else
    (void)p;
#endif
  }

  // group_: group g_'s bytes, or nullptr past g1_.
  void seek() {
    group_ = nullptr;
    if (q_ == nullptr || g_ >= g1_) return;
    const auto& segments = q_->segments;
    while (seg_index_ < segments.size() && g_ - seg_g0_ >= segments[seg_index_].blocks.size(0))
      seg_g0_ += segments[seg_index_++].blocks.size(0);
    if (seg_index_ == segments.size()) return;
    const at::Tensor& blocks = segments[seg_index_].blocks;
    group_bytes_ = blocks.size(1);
    group_ = blocks.data_ptr<uint8_t>() + (g_ - seg_g0_) * group_bytes_;
  }

  const QuantWeight* q_ = nullptr;
  const uint8_t* group_ = nullptr;
  int64_t group_bytes_ = 0;
  size_t seg_index_ = 0;
  int64_t seg_g0_ = 0;  // the first group of segment seg_index_
  int64_t g_ = 0, g1_ = 0, off_ = 0, budget_ = 0;
};

}  // namespace specdec_kernels
