#include "serve/constraint.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <thread>

namespace gridq::serve {
namespace {

// The mask workers: a few threads for the whole process (masks of choices sharing a grammar serialize on its
// masker's mutex anyway), started on first use.
class MaskPool {
 public:
  static MaskPool& get() {
    static MaskPool pool(std::clamp<unsigned>(std::thread::hardware_concurrency(), 2, 8));
    return pool;
  }
  std::future<void> submit(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::future<void> f = task.get_future();
    {
      std::lock_guard lk(mu_);
      jobs_.push_back(std::move(task));
    }
    cv_.notify_one();
    return f;
  }
  ~MaskPool() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  explicit MaskPool(unsigned n) {
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  void run() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

GrammarCache::GrammarCache(std::shared_ptr<const grammar::TokenVocab> vocab, size_t capacity,
                           size_t mask_cache_entries)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(capacity, 1)), mask_entries_(mask_cache_entries) {}

Expected<std::shared_ptr<CompiledGrammar>> GrammarCache::get(const GrammarSpec& spec) {
  std::string key = fmt::format("{}:{}:", static_cast<int>(spec.kind), spec.flexible_whitespace ? 1 : 0);
  key += spec.text;
  return get(std::move(key), [&] {
    grammar::CompileOptions opt;
    opt.flexible_whitespace = spec.flexible_whitespace;
    return grammar::compile(spec.kind, spec.text, opt);
  });
}

Expected<std::shared_ptr<CompiledGrammar>> GrammarCache::get(std::string key, const CompileFn& compile) {
  {
    std::lock_guard lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  // Compiled outside the lock: a slow schema (bounded by the compile limits) does not hold up other requests.
  GRIDQ_ASSIGN_OR_RETURN(auto g, compile());
  auto cg = std::make_shared<CompiledGrammar>(std::move(g), vocab_, mask_entries_);
  std::lock_guard lk(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;  // compiled twice: keep one
  lru_.emplace_front(key, cg);
  index_[std::move(key)] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();  // choices still using it hold their own reference
  }
  return cg;
}

void ban_ids(runtime::SamplePlan& plan, const std::vector<int32_t>& ids) {
  auto& e = plan.edits;
  for (int32_t id : ids) {
    auto it = std::lower_bound(e.begin(), e.end(), id,
                               [](const runtime::ScoreEdit& x, int32_t v) { return x.id < v; });
    if (it != e.end() && it->id == id) {
      it->banned = true;
    } else {
      runtime::ScoreEdit x;
      x.id = id;
      x.banned = true;
      e.insert(it, x);
    }
  }
}

ChoiceConstraint::ChoiceConstraint(std::shared_ptr<CompiledGrammar> g, std::vector<int32_t> stop_ids,
                                   int32_t wait_for)
    : g_(std::move(g)),
      m_(g_->grammar),
      stop_ids_(std::move(stop_ids)),
      wait_for_(wait_for),
      active_(wait_for < 0) {}

ChoiceConstraint::~ChoiceConstraint() {
  if (job_.valid()) job_.wait();
}

void ChoiceConstraint::compute_mask() {
  try {
    std::lock_guard lk(g_->mu);
    g_->masker.compute(m_, mask_);
    mask_error_.clear();
  } catch (const std::exception& e) {  // out of memory, say: this choice fails, the server keeps serving
    mask_.assign(g_->masker.vocab().words(), 0);
    mask_error_ = e.what();
  }
}

void ChoiceConstraint::prepare() {
  if (!active_ || job_.valid()) return;
  job_ = MaskPool::get().submit([this] { compute_mask(); });
}

void ChoiceConstraint::constrain(runtime::SamplePlan& plan) {
  if (!active_) {  // reasoning: free text, but the answer after it must still come
    ban_ids(plan, stop_ids_);
    have_mask_ = false;
    return;
  }
  if (job_.valid()) {
    job_.get();
  } else {
    compute_mask();
  }
  if (!mask_error_.empty()) {
    plan.allowed = mask_;  // nothing
    have_mask_ = true;
    return;
  }
  const grammar::TokenVocab& v = g_->masker.vocab();
  const size_t V = v.size();
  auto set = [&](int32_t id, bool on) {
    if (id < 0 || static_cast<size_t>(id) >= V) return;
    const uint64_t bit = uint64_t{1} << (id & 63);
    mask_[static_cast<size_t>(id) >> 6] =
        on ? (mask_[static_cast<size_t>(id) >> 6] | bit) : (mask_[static_cast<size_t>(id) >> 6] & ~bit);
  };
  // The masker allows the model's end-of-sequence ids when the grammar accepts; what may end the output
  // here is the request's stop ids (EOS unless ignore_eos, </assistant>, stop_token_ids), exactly then.
  const bool accepting = m_.accepting();
  for (int32_t id : v.eos_ids()) set(id, false);
  for (int32_t id : stop_ids_) set(id, accepting);
  plan.allowed = mask_;
  have_mask_ = true;
}

ChoiceConstraint::Verdict ChoiceConstraint::accept(int32_t token) {
  if (job_.valid()) job_.get();  // a mask never collected by constrain(): the token was not sampled under it
  if (!active_) {
    if (token == wait_for_) active_ = true;
    return Verdict::kContinue;
  }
  const grammar::TokenVocab& v = g_->masker.vocab();
  if (have_mask_ && !mask_error_.empty()) {
    error_ = "structured output: the token mask could not be computed: " + mask_error_;
    return Verdict::kRejected;
  }
  if (!have_mask_ || token < 0 || static_cast<size_t>(token) >= v.size() ||
      !grammar::mask_test(mask_, token)) {
    const bool none = std::none_of(mask_.begin(), mask_.end(), [](uint64_t w) { return w != 0; });
    error_ = have_mask_ && none
                 ? fmt::format("structured output: the grammar allows no token after {} bytes of output",
                               m_.position())
                 : fmt::format("structured output: token {} was sampled outside the grammar's mask", token);
    return Verdict::kRejected;
  }
  have_mask_ = false;
  const std::string& bytes = v.bytes(token);
  if (m_.advance_bytes(bytes) != bytes.size()) {
    error_ = fmt::format("structured output: the grammar refused token {} that its mask allowed", token);
    return Verdict::kRejected;
  }
  return m_.accepting() && m_.allowed().none() ? Verdict::kComplete : Verdict::kContinue;
}

}  // namespace gridq::serve
