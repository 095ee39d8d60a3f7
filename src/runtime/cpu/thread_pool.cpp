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
constexpr int kCallerSpins = 1 << 10;

thread_local bool t_in_task = false;

// Jobs are cut into a few chunks per thread that the caller and the workers claim one at a time (an atomic
// word holding the job's generation, its chunk count and the next chunk: see pack), so a worker that is
// asleep or preempted on a busy machine delays nothing but the chunk it holds: the others take the rest. Who
// runs a chunk never matters for the results.
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
    const auto chunks =
        static_cast<uint32_t>(std::min<int64_t>({n, int64_t{kChunksPerThread} * m, kMaxChunks}));
    active_.store(m, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint32_t g = ++gen_local_;
    word_.store(pack(g, chunks, 0), std::memory_order_release);
    gen_.store(g, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) gen_.notify_all();
    t_in_task = true;
    work(g);
    t_in_task = false;
    for (int spins = 0; done_.load(std::memory_order_acquire) < static_cast<int>(chunks);)
      if (++spins < kCallerSpins)
        _mm_pause();
      else
        std::this_thread::yield();
    busy_.clear(std::memory_order_release);
  }

 private:
  // Eight: at decode the ranges are DRAM-bound and finish unevenly; with four the caller spent ~6 % of a
  // 2-thread decode waiting for the last one (ten interleaved runs: decode and prefill medians 4-7 % higher
  // with eight than four; sixteen no better than eight).
  static constexpr int kChunksPerThread = 8;
  static constexpr int64_t kMaxChunks = 0xFFFF;

  // The published job's word: generation (32 bits) | chunk count (16) | next unclaimed chunk (16). The
  // count travels in the word that is claimed from, so a claim is checked against its own job's count: a
  // worker that arrives late for a finished job (it read the job's word just before the next job was
  // published) can never take a chunk of it, nor of the next job with the old one's bounds.
  static uint64_t pack(uint32_t g, uint32_t chunks, uint32_t next) {
    return static_cast<uint64_t>(g) << 32 | static_cast<uint64_t>(chunks) << 16 | next;
  }
  // Chunk i of `chunks` over [0, n_): equal counts, or equal cost when cost_ is set.
  int64_t cut(uint32_t i, uint32_t chunks) const {
    if (i == 0) return 0;
    if (i >= chunks) return n_;
    if (!cost_) return n_ * i / chunks;
    const int64_t target = cost_[0] + (cost_[n_] - cost_[0]) * i / chunks;
    return std::lower_bound(cost_, cost_ + n_ + 1, target) - cost_;
  }
  // Claims and runs chunks of job g until none is left (or the job is no longer g).
  void work(uint32_t g) {
    for (;;) {
      uint64_t w = word_.load(std::memory_order_acquire);
      if (static_cast<uint32_t>(w >> 32) != g) return;
      const auto chunks = static_cast<uint32_t>(w >> 16) & 0xFFFFu, i = static_cast<uint32_t>(w) & 0xFFFFu;
      if (i >= chunks) return;
      if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
      // The claim succeeded on job g's own word with a chunk left, so job g is still running (its caller
      // waits for this chunk) and fn_, n_ and cost_ are its fields.
      const int64_t b = cut(i, chunks), e = cut(i + 1, chunks);
      if (b < e) (*fn_)(b, e);
      done_.fetch_add(1, std::memory_order_release);
    }
  }
  // Starts workers up to `want` (never stops any: a smaller thread count leaves the rest idle).
  void grow(int want) {
    while (static_cast<int>(workers_.size()) < want) {
      const uint32_t g = gen_.load(std::memory_order_relaxed);
      const int id = static_cast<int>(workers_.size()) + 1;  // the caller is 0
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
        if (++spins % 256 != 0) continue;
        // Every 256 pauses: give the core to anything else runnable (on a shared machine, often the very
        // thread that will publish the next op; on an idle one the yield returns at once).
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() - t0 < kSpin) continue;
        // Park. The seq_cst pair (sleepers_ up, then gen_ read; the caller's gen_ store, then sleepers_
        // read) guarantees that either we see the new generation or the caller sees us and notifies.
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        if (gen_.load(std::memory_order_seq_cst) == seen) gen_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        t0 = std::chrono::steady_clock::now();
      }
      seen = g;
      if (id < active_.load(std::memory_order_relaxed)) work(g);  // a lowered thread count leaves us idle
    }
  }

  std::vector<std::thread> workers_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  uint32_t gen_local_ = 0;  // the caller's count of published jobs
  // The job, written by the caller before the release store of word_ that publishes it.
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  const int64_t* cost_ = nullptr;
  std::atomic<int> active_{0};  // threads the job may use: the caller and workers 1 .. active_ - 1
  alignas(64) std::atomic<uint64_t> word_{0};  // pack(generation, chunks, next unclaimed chunk)
  alignas(64) std::atomic<uint32_t> gen_{0};   // the generation workers wait on
  alignas(64) std::atomic<int> done_{0};       // chunks finished
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
