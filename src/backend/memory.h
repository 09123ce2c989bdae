// The bytes a backend holds in its own allocations (photon_model_memory): buffers it allocated
// (weights it copied or converted, session caches, workspaces) and its scratch, counted when they
// are allocated and freed. Memory it only reads in place, such as the model file's mapping, is
// not counted.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace photon {

struct MemoryUse {
  uint64_t in_use = 0;
  uint64_t peak = 0;  // the most in use since the backend was created or the peak was last reset
};

// Safe to update and read from several threads at once.
class MemoryCounter {
 public:
  void add(size_t bytes) {
    const uint64_t now = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void remove(size_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }

  // reset_peak: the peak restarts from what is in use now (after reading it).
  MemoryUse read(bool reset_peak) {
    MemoryUse use;
    use.in_use = in_use_.load(std::memory_order_relaxed);
    use.peak = reset_peak ? peak_.exchange(use.in_use, std::memory_order_relaxed)
                          : peak_.load(std::memory_order_relaxed);
    if (use.peak < use.in_use) use.peak = use.in_use;
    return use;
  }

 private:
  std::atomic<uint64_t> in_use_{0};
  std::atomic<uint64_t> peak_{0};
};

}  // namespace photon
