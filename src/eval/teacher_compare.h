// Student-vs-teacher quality metrics over the same windows (quantizer.md §8): ALL-KL, confident-KL, top-1
// agreement and the teacher's perplexity, each from the full-vocabulary distribution at every scored
// position (the positions perplexity() scores: each window's len-1 next-token predictions).
//
// Both sides are represented as fp32 log-probabilities: log-softmax in float64, rounded to fp32. That is the
// form a teacher dump stores and the teacher hash covers, so a live teacher and a dumped one give the same
// bits. Each fp32 row is renormalized in float64 before use (so p sums to 1 and KL >= 0), and a model
// compared with itself gives KL exactly 0. The rounding moves KL by ~1e-7 relative, far below any
// quantization effect.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/perplexity.h"
#include "runtime/engine.h"

namespace gridq::eval {

// A position is "confident" when the teacher's top-1 probability exceeds this (quantizer.md §8).
inline constexpr double kConfidentTopP = 0.5;

// out[v] = fp32(logits[v] - logsumexp(logits)), computed in float64 over [vocab]. Fails (returns false)
// when a logit is NaN or +inf, or every logit is -inf: such a row has no distribution.
bool log_probs_f32(const float* logits, int64_t vocab, float* out);

// Argmax of a row, lowest index on ties.
int32_t argmax_lowest(const float* row, int64_t vocab);

struct PositionCompare {
  double kl = 0.0;             // Σ_v p_v (log p_v − log q_v), p teacher, q student
  double teacher_top_p = 0.0;  // max_v p_v
  double teacher_nll = 0.0;    // −log p(target)
  int32_t teacher_top1 = 0;    // argmax p, lowest index on ties
  int32_t student_top1 = 0;    // argmax q, lowest index on ties
};

// One position from fp32 log-prob rows [vocab] (each renormalized in float64 here).
PositionCompare compare_position(const float* teacher_lp, const float* student_lp, int64_t vocab,
                                 int32_t target);

struct TeacherCompareResult {
  int64_t positions = 0;
  int64_t confident_positions = 0;  // teacher top-1 probability > kConfidentTopP
  double all_kl = 0.0;              // mean KL over all positions
  double confident_kl = 0.0;        // mean KL over confident positions (NaN when there are none)
  int64_t top1_matches = 0;
  int64_t top1_matches_confident = 0;
  double top1_agree = 0.0;            // top1_matches / positions, a rate in [0, 1]
  double top1_agree_confident = 0.0;  // over confident positions (NaN when there are none)
  double teacher_mean_nll = 0.0;      // nats per position, from the teacher's fp32 log-probs
  double teacher_ppl = 0.0;
  std::string
      teacher_sha256;  // SHA-256 of every teacher fp32 log-prob row, little-endian, in the order added
};

// Incremental SHA-256 (OpenSSL EVP); hex() finalizes. Hashing in chunks gives the digest of their
// concatenation.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // lowercase hex; call once

 private:
  void* ctx_;  // EVP_MD_CTX*, kept out of this header
};

// Streams positions in, window by window, and accumulates in a fixed order (the order rows are added), so
// the result does not depend on the thread count. Per-row work runs on OpenMP threads.
class TeacherComparator {
 public:
  explicit TeacherComparator(int64_t vocab);
  ~TeacherComparator();
  TeacherComparator(const TeacherComparator&) = delete;
  TeacherComparator& operator=(const TeacherComparator&) = delete;

  // Adds targets.size() positions of window `window_index` (used in error messages):
  // teacher_lp [rows, vocab] fp32 log-probs (hashed exactly as given), student_logits [rows, vocab] raw
  // logits, targets [rows] the actual next tokens.
  Status add(int64_t window_index, const float* teacher_lp, const float* student_logits,
             std::span<const int32_t> targets);
  // Finalizes the hash; call once, after the last add().
  TeacherCompareResult finish();

 private:
  int64_t vocab_;
  Sha256Stream hash_;
  TeacherCompareResult r_;
  double kl_sum_ = 0.0, kl_sum_confident_ = 0.0, nll_sum_ = 0.0;
  std::vector<float> student_lp_;  // [rows, vocab] scratch
};

// Where the teacher's fp32 log-probs come from: a live engine (EngineTeacher) or a dump (teacher_dump.h).
class TeacherSource {
 public:
  virtual ~TeacherSource() = default;
  virtual int64_t vocab_size() const = 0;
  virtual std::string describe() const = 0;  // names the teacher in messages
  // Log-probs of the window's scored positions [window.size() - 1, vocab], valid until the next call.
  virtual Expected<std::span<const float>> window_log_probs(int64_t window_index,
                                                            std::span<const int32_t> window) = 0;
};

// Runs the teacher engine on each window from empty context (the same way perplexity() runs the student).
class EngineTeacher : public TeacherSource {
 public:
  explicit EngineTeacher(runtime::Engine& engine) : engine_(engine) {}
  int64_t vocab_size() const override { return engine_.vocab_size(); }
  std::string describe() const override { return "teacher " + engine_.model_dir(); }
  Expected<std::span<const float>> window_log_probs(int64_t window_index,
                                                    std::span<const int32_t> window) override;

 private:
  runtime::Engine& engine_;
  std::vector<float> lp_;  // [window.size() - 1, vocab]
};

struct TeacherEvalResult {
  PerplexityResult student;
  TeacherCompareResult compare;
};

// Runs the student over the windows of `tokens` (perplexity(), batch option as there) and, for each window,
// fetches the teacher's log-probs and compares. Refuses different vocabulary sizes.
Expected<TeacherEvalResult> evaluate_against_teacher(runtime::Engine& student, TeacherSource& teacher,
                                                     std::span<const int32_t> tokens,
                                                     const PerplexityOptions& opts);

// Teacher and student must share one tokenizer: refuses (naming both files) when either
// <dir>/tokenizer.json is missing or their bytes differ.
Status check_same_tokenizer(const std::string& model_dir, const std::string& teacher_dir);

}  // namespace gridq::eval
