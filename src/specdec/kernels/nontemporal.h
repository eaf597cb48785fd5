// Weights a call reads once (a decode step's or a speculative verification's few rows)
// loaded with a non-temporal hint: a prefetchnta of each line before its loads (the
// GGUF kernels 6 KB ahead, the bf16 one right at them).
//
// AMD's optimization guides describe such lines as not written back to L2 when they
// leave L1, so they would never reach the L3 (filled by L2's evictions): a decode
// token's ~100 MB of weights stops churning the caches on its way through. What was
// measured fits that: one thread streaming a 96 MB pass ran at 33 instead of 26 GB/s,
// and a decode token got 9-11 % faster with the two cores on different core complexes
// (Zen 5). Intel handles the hint differently; the Python loader
// (specdec.kernels.nontemporal_weights) decides where it is on.
//
// A stream of such lines is asked for ahead of its loads: the hint keeps the lines out
// of L2, where the hardware prefetcher would have seen the stream, so asking for each
// line just before its loads left every record waiting on memory. Measured on Zen 3
// (AVX2), a 300-token decode of the bundled model (Q4_1 + Q8_0), alternating runs:
// 125-154 tok/s asking at the loads, 167-191 asking 3 KB ahead (docs/benchmarks.md).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace specdec_kernels {

// Process-wide, set before steps run (tests switch it to compare values).
inline std::atomic<bool> nontemporal_weights{false};

inline bool set_nontemporal_weights(bool on) { return nontemporal_weights.exchange(on); }

inline bool stream_weights_once() {
  return nontemporal_weights.load(std::memory_order_relaxed);
}

// How far ahead of its loads a sequential stream asks for its lines: about what one
// thread reads in a memory latency, and far below L1. Zen 3 (~100-150 ns at 15-25 GB/s
// a thread) measured 2-12 KB alike; on Zen 5, a guest whose host maps it in 4 KB pages
// (a page walk every 4 KB, ~150-190 ns a miss), 6 KB decoded 7 % faster than 3 KB with
// the two cores on two complexes, where each thread's own stream is the limit, and one
// thread alone 3-5 %; two threads sharing a complex alike (docs/benchmarks.md).
constexpr int64_t kStreamAheadBytes = 6144;

// Ask for bytes at p + ahead (whole 64-byte lines) as non-temporal data: ahead 0 right
// before loading them, kStreamAheadBytes for a stream read in order. A prefetch never
// faults, so the lines past a buffer's end cost nothing but their requests.
inline void stream_once(const void* p, int64_t bytes, int64_t ahead = 0) {
#if defined(__AVX2__) || defined(__AVX512F__)
  // as an address, not a pointer: p + ahead may lie past the buffer
  const char* c = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + ahead);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_NTA);
#else
  (void)p, (void)bytes, (void)ahead;
#endif
}

}  // namespace specdec_kernels
