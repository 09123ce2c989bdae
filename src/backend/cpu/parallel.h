// Parallel loops of the CPU backend. Each model's backend has a thread budget (the load option
// photon_load_options_set_threads): every loop runs on the calling thread plus at most budget - 1
// helpers of the process's pool (thread_pool.h), and only when the work pays for waking them.
#pragma once

#include <algorithm>
#include <type_traits>

#include "backend/cpu/thread_pool.h"

namespace photon::cpu {

// Threads worth using for `work` units when one thread should get at least `min_per_thread`.
inline int threads_for(long work, long min_per_thread, int budget) {
  const long useful = work / std::max(1L, min_per_thread);
  return static_cast<int>(std::clamp<long>(useful, 1, std::max(1, budget)));
}

// Calls fn(i, slot) for i in [0, count) on at most `threads` threads, items handed out one at a
// time; slot in [0, threads) tells apart the threads of this loop (for per-thread scratch). fn must
// not throw.
template <typename Fn>
void parallel_for(int threads, long count, Fn&& fn) {
  if (threads <= 1 || count <= 1) {
    for (long i = 0; i < count; ++i) fn(i, 0);
    return;
  }
  using F = std::remove_reference_t<Fn>;
  ThreadPool::instance().run(
      threads, count, [](void* f, long i, int slot) { (*static_cast<F*>(f))(i, slot); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// The same over rows [0, n) in blocks of at least `min_elements` elements of `row_elements` each:
// fn(first, end) per block.
template <typename Fn>
void parallel_rows(int threads, long n, long row_elements, long min_elements, Fn&& fn) {
  const long rows = std::max(1L, min_elements / std::max(1L, row_elements));
  const long blocks = (n + rows - 1) / rows;
  parallel_for(std::min<long>(threads, blocks), blocks,
               [&](long b, int) { fn(b * rows, std::min(n, (b + 1) * rows)); });
}

}  // namespace photon::cpu
