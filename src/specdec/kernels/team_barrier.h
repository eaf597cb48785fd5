// A barrier for the threads of one parallel region, cheaper than OpenMP's when the
// team's cores are far apart.
//
// The two vCPUs of a cloud machine are sometimes placed on different core complexes:
// a cache line then takes ~350 ns to go from one core to the other and back (~75 ns on
// the same complex). OpenMP's barrier passes its counter and its release flag through
// shared lines, several of those trips in a row. Here each thread writes only its own
// line (how many barriers it has reached) and reads the others': the last to arrive
// lets the others go with one transfer of its line.

#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace specdec_kernels {

class TeamBarrier {
 public:
  explicit TeamBarrier(int max_threads) : slots_(new Slot[max_threads]) {}

  // Thread tid of a team of nt (every thread calls it, the same nt, equally often):
  // returns once all nt have arrived. What a thread wrote before arriving is visible to
  // every thread after it returns.
  void arrive_and_wait(int tid, int nt) {
    arrive_and_wait(tid, nt, [] { return false; });
  }

  // The same, calling idle() while it waits (a short piece of work each call; it
  // returns false once it has none left, and the wait then spins).
  template <typename Idle>
  void arrive_and_wait(int tid, int nt, Idle&& idle) {
    const int64_t mine = slots_[tid].arrived.load(std::memory_order_relaxed) + 1;
    slots_[tid].arrived.store(mine, std::memory_order_release);
    for (int other = 0; other < nt; ++other) {
      int64_t spins = 0;
      while (slots_[other].arrived.load(std::memory_order_acquire) < mine) {
        // A thread that is not running (more threads than free cores) is waited for
        // by yielding, not by spinning through its time slice.
        if (++spins < kSpinsBeforeYield) {
          if (!idle()) pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<int64_t> arrived{0};
  };
  static constexpr int64_t kSpinsBeforeYield = 1 << 14;  // ~0.1-0.5 ms of pause

  static void pause() {
#if defined(__x86_64__) || defined(_M_X64)
    _mm_pause();
#endif
  }

  std::unique_ptr<Slot[]> slots_;
};

}  // namespace specdec_kernels
