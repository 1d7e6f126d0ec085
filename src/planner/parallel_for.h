#pragma once
/// job(0..n-1) on a few threads (the caller's among them), each taking the next index: the
/// planner's independent solves (meshes of a search, recipes, pipeline stages).  Results go
/// where the job writes them, by index, so they do not depend on the threads' timing.  A job
/// must not throw (catch and store, as StageBuilder::run_parallel does).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace autoshard {

/// `threads` <= 0: the cores available; never more threads than jobs.
inline void parallel_for(size_t n, int threads, const std::function<void(size_t)>& job) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t used = std::min(n, static_cast<size_t>(threads));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < n;) job(k);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < used; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace autoshard
