// Weight tensors and KV caches on 2 MB pages.
//
// A decode step streams every weight once from memory. On 4 KB pages each page costs a
// TLB miss and the hardware prefetcher, which does not cross a page, starts over every
// 4 KB. Measured on AMD EPYC Zen 5 with one thread: a 256 MB read runs at ~22 GB/s on
// 4 KB pages and ~31.5 GB/s on 2 MB pages. With transparent huge pages in "madvise"
// mode (a common default) a tensor's memory gets 2 MB pages only when asked for, so the
// kernels' weight layouts are allocated here: 2 MB-aligned regions marked
// MADV_HUGEPAGE, handed out in 64-byte-aligned pieces, each region unmapped once every
// tensor in it is gone. Where huge pages are off or unsupported the regions are plain
// (4 KB) memory: the same tensors, the old speed.

#pragma once

#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace specdec_kernels {

class HugePageArena {
 public:
  static constexpr int64_t kPage = int64_t{2} << 20;
  static constexpr int64_t kRegion = int64_t{32} << 20;  // the usual region: 16 pages
  static constexpr int64_t kAlign = 64;

  // A zero-filled tensor in the current region (a new one when it does not fit; a large
  // tensor gets a region of its own); the region lives as long as any tensor in it.
  static at::Tensor zeros(at::IntArrayRef sizes, at::ScalarType dtype) {
    return instance().allocate(sizes, dtype);
  }

 private:
  struct Region {
    uint8_t* base = nullptr;
    int64_t bytes = 0;
    explicit Region(int64_t n) : bytes(n) {
#if defined(__linux__)
      // A page more than needed, so a 2 MB-aligned start fits; anonymous memory
      // is zero-filled and faulted in on first write.
      void* p = mmap(nullptr, n + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
      if (p != MAP_FAILED) {
        raw_ = p;
        raw_bytes_ = n + kPage;
        base = reinterpret_cast<uint8_t*>(
            (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~static_cast<uintptr_t>(kPage - 1));
        madvise(base, n, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KB
        return;
      }
#endif
      owned_.reset(new uint8_t[n + kAlign]());
      base = reinterpret_cast<uint8_t*>(
          (reinterpret_cast<uintptr_t>(owned_.get()) + kAlign - 1) & ~static_cast<uintptr_t>(kAlign - 1));
    }
    ~Region() {
#if defined(__linux__)
      if (raw_ != nullptr) munmap(raw_, raw_bytes_);  // else owned_ frees itself
#endif
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

   private:
    void* raw_ = nullptr;  // the mmap'd range (nullptr: memory from operator new)
    int64_t raw_bytes_ = 0;
    std::unique_ptr<uint8_t[]> owned_;
  };

  static HugePageArena& instance() {
    static HugePageArena arena;
    return arena;
  }

  at::Tensor allocate(at::IntArrayRef sizes, at::ScalarType dtype) {
    int64_t n = c10::elementSize(dtype);
    for (int64_t d : sizes) {
      TORCH_CHECK(d >= 0, "huge_page_zeros: negative size");
      n *= d;
    }
    const int64_t need = (std::max<int64_t>(n, 1) + kAlign - 1) / kAlign * kAlign;
    std::shared_ptr<Region> region;
    uint8_t* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (need > kRegion / 2) {  // a large tensor: a region of its own, whole pages
        region = std::make_shared<Region>((need + kPage - 1) / kPage * kPage);
        data = region->base;
      } else {
        if (!current_ || used_ + need > current_->bytes) {
          current_ = std::make_shared<Region>(kRegion);
          used_ = 0;
        }
        region = current_;
        data = region->base + used_;
        used_ += need;
      }
    }
    // The deleter holds the region: it is unmapped with its last tensor.
    return at::from_blob(
        data, sizes, [region](void*) mutable { region.reset(); },
        at::TensorOptions().dtype(dtype));
  }

  std::mutex mutex_;
  std::shared_ptr<Region> current_;
  int64_t used_ = 0;
};

}  // namespace specdec_kernels
