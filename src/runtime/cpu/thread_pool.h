// The CPU forward's workers: one persistent pool for every op of every forward, instead of an OpenMP
// parallel region per op. A decoded token runs ~25 parallel ops of a few microseconds each; waking parked
// threads for each one (~60 µs with OpenMP's passive wait) cost more than the ops. Workers here spin for a
// short while after each op (the next one usually follows within microseconds), then park on a futex.
//
// Results never depend on the thread count: parallel_for hands out contiguous ranges of independent tasks,
// and every task computes its outputs with the same code whichever thread runs it.
#pragma once

#include <cstdint>
#include <type_traits>

namespace gridq::runtime::cpu {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)` (no allocation per op).
class RangeFn {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, RangeFn>)
      RangeFn(F&& f)  // NOLINT: implicit by design, like std::function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// Threads the forward uses: omp_get_max_threads() of the calling thread, so the existing knobs
// (CpuOptions::threads, the quantizer's --threads, OMP_NUM_THREADS) keep choosing it.
int pool_threads();

// Runs fn over [0, n) split into pool_threads() contiguous ranges (thread i gets the i-th; the caller runs
// range 0) and returns when all are done. `cost`, when given, holds n + 1 non-decreasing prefix sums of the
// tasks' costs and the ranges are cut at equal cost instead of equal count. Called from inside a task, or
// while another thread holds the pool, it runs fn(0, n) on the calling thread.
void parallel_for(int64_t n, RangeFn fn, const int64_t* cost = nullptr);

}  // namespace gridq::runtime::cpu
