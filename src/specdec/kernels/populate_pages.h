// Memory faulted in ahead of its first write.
//
// Anonymous memory (huge_page_arena.h) gets its pages on first write. A KV cache is
// written a few rows at a time, each step's rows in blocks never written before, so the
// first write to each page of it lands inside a decode step: the thread writing the
// step's K/V rows clears a 2 MB page (and in a virtual machine waits for the host to
// back it) while the rest of the team waits at the next barrier. Measured on AMD EPYC
// (Zen 5, a KVM guest), 64 requests decoding together: that thread's RoPE-and-write
// loop took ~140 µs a layer against ~10 once the pages were there, and the step 13 %
// longer. MADV_POPULATE_WRITE (Linux 5.14) faults pages in as a write would without
// changing their contents, so it may run beside the threads that write them.

#pragma once

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace specdec_kernels {

#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23
#endif

// Faults in the pages under [p, p + bytes) (whole pages), contents unchanged. False
// where the OS cannot (not Linux, a kernel before 5.14, memory not all mapped).
inline bool populate_pages(const void* p, int64_t bytes) {
#if defined(__linux__)
  if (bytes <= 0) return true;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  return madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE) == 0;
#else
  (void)p, (void)bytes;
  return false;
#endif
}

}  // namespace specdec_kernels
