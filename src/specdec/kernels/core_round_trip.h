// How far apart two CPUs are: the round trip of one cache line between them.
//
// A cloud machine's vCPUs may share a core complex (a line goes there and back in
// ~50-100 ns) or sit on two (~300-700 ns, each with its own path to memory: more
// bandwidth, slower hand-offs). The decode step hands data between its threads at
// every barrier, so the same build measures differently in the two placements; the
// latency bench prints this figure next to its bandwidth sample.

#pragma once

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace specdec_kernels {

namespace round_trip {

// Runs the calling thread on cpu alone (where the process may; otherwise unpinned).
inline void pin_to(int64_t cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(cpu), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
#else
  (void)cpu;
#endif
}

// Spins until line holds value; yields now and then, so that two threads left on one
// CPU (pinning refused) still take turns.
inline void wait_for(const std::atomic<int64_t>& line, int64_t value) {
  for (int64_t spins = 0; line.load(std::memory_order_acquire) != value;)
    if (++spins % (1 << 14) == 0) std::this_thread::yield();
}

struct alignas(64) Line {
  std::atomic<int64_t> value{0};
};

}  // namespace round_trip

// Median over `rounds` of the mean time, in ns, for one cache line to go from cpu_a to
// cpu_b and back (`trips` round trips a round; both at least 1).
inline double core_round_trip_ns(int64_t cpu_a, int64_t cpu_b, int64_t trips, int64_t rounds) {
  round_trip::Line shared;  // a cache line of its own
  std::atomic<int64_t>& line = shared.value;
  std::vector<double> times;
  for (int64_t r = 0; r < rounds; ++r) {
    line.store(0);
    std::thread pong([&] {
      round_trip::pin_to(cpu_b);
      for (int64_t i = 0; i < trips; ++i) {
        round_trip::wait_for(line, 2 * i + 1);
        line.store(2 * i + 2, std::memory_order_release);
      }
    });
    double ns = 0;
    std::thread ping([&] {
      round_trip::pin_to(cpu_a);
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < trips; ++i) {
        line.store(2 * i + 1, std::memory_order_release);
        round_trip::wait_for(line, 2 * i + 2);
      }
      const std::chrono::duration<double, std::nano> took =
          std::chrono::steady_clock::now() - start;
      ns = took.count() / static_cast<double>(trips);
    });
    ping.join();
    pong.join();
    times.push_back(ns);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace specdec_kernels
