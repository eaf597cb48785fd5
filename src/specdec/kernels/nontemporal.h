// Weights a call reads once (a decode step's or a speculative verification's few rows)
// loaded with a non-temporal hint: a prefetchnta of each line just before its loads.
//
// AMD's optimization guides describe such lines as not written back to L2 when they
// leave L1, so they would never reach the L3 (filled by L2's evictions): a decode
// token's ~100 MB of weights stops churning the caches on its way through. What was
// measured fits that: one thread streaming a 96 MB pass ran at 33 instead of 26 GB/s,
// and a decode token got 9-11 % faster with the two cores on different core complexes
// (Zen 5). Intel handles the hint differently; the Python loader
// (specdec.kernels.nontemporal_weights) decides where it is on.
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

// Ask for bytes at p (whole 64-byte lines) as non-temporal data, right before loading them.
inline void stream_once(const void* p, int64_t bytes) {
#if defined(__AVX2__) || defined(__AVX512F__)
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_NTA);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace specdec_kernels
