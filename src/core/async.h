// Work started on a second thread that keeps the caller's OpenMP team size: omp_set_num_threads (--threads)
// sets only the calling thread's value, and a new thread would run its parallel regions on every core.
#pragma once

#include <omp.h>

#include <future>
#include <utility>

namespace gridq {

template <class F>
auto async_like_caller(F&& f) {
  return std::async(std::launch::async, [f = std::forward<F>(f), threads = omp_get_max_threads()]() mutable {
    omp_set_num_threads(threads);
    return f();
  });
}

}  // namespace gridq
