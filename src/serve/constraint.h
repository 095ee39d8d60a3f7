// Structured outputs in the server (docs/serving.md): a request's GrammarSpec is compiled once, on the HTTP
// thread before the request is queued (compile errors are 400s), through a bounded LRU keyed by (kind,
// whitespace, text) since agents repeat their schemas. Each constrained choice then owns a ChoiceConstraint
// (a matcher over the output bytes so far) which the scheduler thread asks, before every sampled step, for
// the step's allowed-token mask (runtime::SamplePlan::allowed: the sampler bans every other id, so the
// sampled token is always allowed), and feeds every sampled token.
//
// Masks run on a small pool of worker threads: the scheduler calls prepare() for every constrained row before
// the step and constrain() after the model's forward (when the engine samples on the host; before it
// otherwise), so a mask is computed while the model runs and costs the step no time. A mask depends only on
// the matcher's state, so where it is computed changes nothing in the output.
//
// Stop and end-of-sequence ids are allowed exactly when the grammar accepts; once the grammar can take no
// further byte the choice ends (finish_reason "stop") without waiting for an end-of-sequence token. With
// reasoning on, the constraint starts after the reasoning block's end marker; until then the output is
// free except that it may not stop.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "runtime/sampler.h"
#include "serve/openai_protocol.h"

namespace gridq::serve {

// One compiled grammar and its mask cache, shared by every choice (of every request) that uses it.
struct CompiledGrammar {
  CompiledGrammar(std::shared_ptr<const grammar::Grammar> g, std::shared_ptr<const grammar::TokenVocab> v,
                  size_t mask_cache_entries)
      : grammar(std::move(g)), masker(std::move(v), mask_cache_entries) {}
  std::shared_ptr<const grammar::Grammar> grammar;
  std::mutex mu;  // guards masker (TokenMasker is not thread-safe)
  grammar::TokenMasker masker;
};

class GrammarCache {
 public:
  // Memory bound per entry: mask_cache_entries x vocab/8 bytes (128 x 19 KB = 2.4 MB at 151k ids) plus the
  // masker's memoized transitions (at most 20000 states x 1 KiB, reset beyond; a few hundred in practice).
  explicit GrammarCache(std::shared_ptr<const grammar::TokenVocab> vocab, size_t capacity = 32,
                        size_t mask_cache_entries = 128);
  // The compiled grammar of `spec`, from the cache or compiled now (an error names the unsupported thing).
  Expected<std::shared_ptr<CompiledGrammar>> get(const GrammarSpec& spec);
  // The same for any grammar: `key` names it exactly, `compile` builds it on a miss (outside the lock).
  using CompileFn = std::function<Expected<std::shared_ptr<const grammar::Grammar>>()>;
  Expected<std::shared_ptr<CompiledGrammar>> get(std::string key, const CompileFn& compile);
  const grammar::TokenVocab& vocab() const { return *vocab_; }
  size_t hits() const { return hits_; }
  size_t misses() const { return misses_; }

 private:
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  size_t capacity_, mask_entries_;
  std::mutex mu_;
  using Entry = std::pair<std::string, std::shared_ptr<CompiledGrammar>>;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0, misses_ = 0;
};

class ChoiceConstraint {
 public:
  // stop_ids: the request's stop and end-of-sequence ids. wait_for: an id (the reasoning end marker) that
  // must be sampled before the constraint starts; -1: constrained from the first token.
  ChoiceConstraint(std::shared_ptr<CompiledGrammar> g, std::vector<int32_t> stop_ids, int32_t wait_for = -1);
  ~ChoiceConstraint();  // waits for a mask still being computed (it walks this choice's matcher)
  ChoiceConstraint(const ChoiceConstraint&) = delete;
  ChoiceConstraint& operator=(const ChoiceConstraint&) = delete;

  // Starts computing the next step's mask on a worker thread (nothing while waiting for the reasoning end,
  // or when one is already under way). The matcher is the worker's until constrain() collects the mask.
  void prepare();
  // Before a sampled step's sampling: sets plan.allowed from the prepared mask (waiting for it), or computes
  // it now; while waiting for the reasoning end, bans the stop ids instead. A mask that failed to compute
  // allows nothing, and the next accept() is kRejected with the reason (fail closed).
  void constrain(runtime::SamplePlan& plan);

  enum class Verdict { kContinue, kComplete, kRejected };
  // A sampled token that is not a stop id. kComplete: the grammar takes nothing more, the choice ends.
  // kRejected: the token was outside the mask (error() says why); the request must fail.
  Verdict accept(int32_t token);
  const std::string& error() const { return error_; }
  bool active() const { return active_; }
  const grammar::Matcher& matcher() const { return m_; }

 private:
  std::shared_ptr<CompiledGrammar> g_;
  grammar::Matcher m_;
  std::vector<int32_t> stop_ids_;
  int32_t wait_for_;
  bool active_;
  void compute_mask();          // on a worker (prepare) or inline; fills mask_ or mask_error_
  std::vector<uint64_t> mask_;  // the last step's mask, to check the sampled token against
  bool have_mask_ = false;
  std::future<void> job_;   // prepare()'s mask, until constrain() collects it
  std::string mask_error_;  // why the last mask could not be computed (empty: it was)
  std::string error_;
};

// Bans `ids` in a plan's edits (kept sorted by id, as score_edits makes them).
void ban_ids(runtime::SamplePlan& plan, const std::vector<int32_t>& ids);

}  // namespace gridq::serve
