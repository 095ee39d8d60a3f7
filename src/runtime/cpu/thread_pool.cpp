#include "runtime/cpu/thread_pool.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace gridq::runtime::cpu {

namespace {

// How long an idle worker spins before it parks. Long enough to bridge the serial work between two ops of
// a forward (norms, routing, sampling between tokens: tens of µs), short enough that a worker does not hold
// a core for long once the forward is over (the quantizer runs OpenMP work between teacher layers).
constexpr auto kSpin = std::chrono::microseconds(200);
// The caller, waiting for the last range, yields after this many pauses (a worker may have been preempted
// on a busy machine; spinning on would only delay it).
constexpr int kCallerSpins = 1 << 14;

thread_local bool t_in_task = false;

class Pool {
 public:
  void run(int64_t n, RangeFn fn, const int64_t* cost, int m) {
    if (t_in_task || busy_.test_and_set(std::memory_order_acquire)) {
      fn(0, n);  // nested or concurrent: the calling thread alone (same results)
      return;
    }
    grow(m - 1);
    fn_ = &fn;
    n_ = n;
    cost_ = cost;
    active_ = m;
    done_.store(0, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) gen_.notify_all();
    t_in_task = true;
    run_range(0);
    t_in_task = false;
    // Every worker acknowledges every job (idle ones too), so none can still be reading this one's fields
    // when the next is published.
    const int all = static_cast<int>(workers_.size());
    for (int spins = 0; done_.load(std::memory_order_acquire) < all;)
      if (++spins < kCallerSpins)
        _mm_pause();
      else
        std::this_thread::yield();
    busy_.clear(std::memory_order_release);
  }

 private:
  // Range i of active_ over [0, n_): equal counts, or equal cost when cost_ is set.
  int64_t cut(int i) const {
    if (i <= 0) return 0;
    if (i >= active_) return n_;
    if (!cost_) return n_ * i / active_;
    const int64_t target = cost_[0] + (cost_[n_] - cost_[0]) * i / active_;
    return std::lower_bound(cost_, cost_ + n_ + 1, target) - cost_;
  }
  void run_range(int i) {
    const int64_t b = cut(i), e = cut(i + 1);
    if (b < e) (*fn_)(b, e);
  }
  // Starts workers 1..want (never stops any: a smaller thread count leaves the rest idle).
  void grow(int want) {
    while (static_cast<int>(workers_.size()) < want) {
      const int id = static_cast<int>(workers_.size()) + 1;
      const uint32_t g = gen_.load(std::memory_order_relaxed);
      workers_.emplace_back([this, id, g] { loop(id, g); });
      workers_.back().detach();  // the pool lives as long as the process
    }
  }
  void loop(int id, uint32_t seen) {
    t_in_task = true;  // a task that calls parallel_for runs it inline
    for (;;) {
      uint32_t g;
      auto t0 = std::chrono::steady_clock::now();
      for (int spins = 0; (g = gen_.load(std::memory_order_acquire)) == seen;) {
        _mm_pause();
        if (++spins % 256 != 0 || std::chrono::steady_clock::now() - t0 < kSpin) continue;
        // Park. The seq_cst pair (sleepers_ up, then gen_ read; the caller's gen_ bump, then sleepers_
        // read) guarantees that either we see the new generation or the caller sees us and notifies.
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (gen_.load(std::memory_order_seq_cst) == seen) gen_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        t0 = std::chrono::steady_clock::now();
      }
      seen = g;
      if (id < active_) run_range(id);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  // The job, written by the caller before the generation bump that publishes it.
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  const int64_t* cost_ = nullptr;
  int active_ = 0;
  alignas(64) std::atomic<uint32_t> gen_{0};
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<int> sleepers_{0};
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: detached workers may still be parked at exit
  return *p;
}

}  // namespace

int pool_threads() { return std::max(1, omp_get_max_threads()); }

void parallel_for(int64_t n, RangeFn fn, const int64_t* cost) {
  if (n <= 0) return;
  const int m = pool_threads();
  if (m == 1 || n == 1 || t_in_task) {
    fn(0, n);
    return;
  }
  pool().run(n, fn, cost, m);
}

}  // namespace gridq::runtime::cpu
