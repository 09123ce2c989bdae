// Parallel regions of the CPU backend. Each model's backend has a thread budget (the load option
// photon_load_options_set_threads): every region runs on the calling thread plus at most
// budget - 1 OpenMP workers, and opens only when the work pays for waking them.
#pragma once

#include <omp.h>

#include <algorithm>

namespace photon::cpu {

// Threads worth using for `work` units when one thread should get at least `min_per_thread`.
inline int threads_for(long work, long min_per_thread, int budget) {
  const long useful = work / std::max(1L, min_per_thread);
  return static_cast<int>(std::clamp<long>(useful, 1, std::max(1, budget)));
}

// Calls fn(part, parts) on `threads` threads (the caller is part 0). fn must not throw: an
// exception cannot leave an OpenMP region.
template <typename Fn>
void run_parts(int threads, Fn&& fn) {
  if (threads <= 1) {
    fn(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  fn(omp_get_thread_num(), omp_get_num_threads());
}

// Part `part` of [0, total) cut into `parts` nearly equal pieces whose starts are multiples of
// `align` (the last piece takes the remainder).
struct Range {
  long begin, end;
};
inline Range part_of(long total, int parts, int part, long align) {
  const long units = (total + align - 1) / align;
  const long begin = units * part / parts * align, end = units * (part + 1) / parts * align;
  return {std::min(begin, total), std::min(end, total)};
}

}  // namespace photon::cpu
