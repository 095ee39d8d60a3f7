#include "eval/teacher_compare.h"

#include <openssl/evp.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/file_read.h"
#include "io/sha256.h"

namespace gridq::eval {

// The hash covers the raw fp32 bytes as they sit in memory; the format promises little-endian.
static_assert(std::endian::native == std::endian::little, "teacher hash assumes a little-endian host");

namespace {

// log Σ_v exp(x_v) in float64 over an fp32 row; NaN when the row has a NaN or +inf, -inf when all are -inf.
double logsumexp(const float* x, int64_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < n; ++v) {
    const double a = x[v];
    if (std::isnan(a) || a == std::numeric_limits<double>::infinity()) return std::nan("");
    mx = std::max(mx, a);
  }
  if (mx == -std::numeric_limits<double>::infinity()) return mx;
  double z = 0.0;
  for (int64_t v = 0; v < n; ++v) z += std::exp(static_cast<double>(x[v]) - mx);
  return mx + std::log(z);
}

}  // namespace

bool log_probs_f32(const float* logits, int64_t vocab, float* out) {
  const double lse = logsumexp(logits, vocab);
  if (!std::isfinite(lse)) return false;
  for (int64_t v = 0; v < vocab; ++v) out[v] = static_cast<float>(static_cast<double>(logits[v]) - lse);
  return true;
}

int32_t argmax_lowest(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (row[v] > row[best]) best = v;  // strict: an equal later value never wins
  return static_cast<int32_t>(best);
}

PositionCompare compare_position(const float* teacher_lp, const float* student_lp, int64_t vocab,
                                 int32_t target) {
  PositionCompare c;
  // Renormalize each fp32 row in float64: its exp sums to 1 only up to fp32 rounding.
  const double lse_p = logsumexp(teacher_lp, vocab);
  const double lse_q = logsumexp(student_lp, vocab);
  if (!std::isfinite(lse_p) || !std::isfinite(lse_q)) {
    c.kl = c.teacher_top_p = c.teacher_nll = std::nan("");
    return c;
  }
  double kl = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double lp = static_cast<double>(teacher_lp[v]) - lse_p;
    const double p = std::exp(lp);
    if (p == 0.0) continue;  // 0 · log 0 = 0; also keeps -inf - -inf out of the sum
    kl += p * (lp - (static_cast<double>(student_lp[v]) - lse_q));
  }
  c.kl = kl;
  c.teacher_top1 = argmax_lowest(teacher_lp, vocab);
  c.student_top1 = argmax_lowest(student_lp, vocab);
  c.teacher_top_p = std::exp(static_cast<double>(teacher_lp[c.teacher_top1]) - lse_p);
  c.teacher_nll = lse_p - static_cast<double>(teacher_lp[target]);
  return c;
}

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
  // OpenSSL failing on in-memory SHA-256 means the library is broken; nothing to recover (as io/sha256.cpp).
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256Stream::update(const void* data, size_t n) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) != 1) std::abort();
}

std::string Sha256Stream::hex() {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d, &n) != 1) std::abort();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) s[2 * i] = kHex[d[i] >> 4], s[2 * i + 1] = kHex[d[i] & 15];
  return s;
}

TeacherComparator::TeacherComparator(int64_t vocab) : vocab_(vocab) {}
TeacherComparator::~TeacherComparator() = default;

Status TeacherComparator::add(int64_t window_index, const float* teacher_lp, const float* student_logits,
                              std::span<const int32_t> targets) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  const int64_t V = vocab_;
  for (int64_t i = 0; i < rows; ++i)
    if (targets[i] < 0 || targets[i] >= V)
      return err("teacher compare: window {} position {}: target token {} is outside the vocabulary [0, {})",
                 window_index, i, targets[i], V);
  hash_.update(teacher_lp, static_cast<size_t>(rows * V) * sizeof(float));
  student_lp_.resize(static_cast<size_t>(rows * V));
  std::vector<PositionCompare> pc(static_cast<size_t>(rows));
  std::vector<uint8_t> student_ok(static_cast<size_t>(rows));
  // Rows are independent; each thread writes only its own rows, and the sums below run in row order.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    float* q = student_lp_.data() + i * V;
    student_ok[i] = log_probs_f32(student_logits + i * V, V, q);
    if (student_ok[i]) pc[i] = compare_position(teacher_lp + i * V, q, V, targets[i]);
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (!student_ok[i])
      return err(
          "teacher compare: window {} position {}: student logits are not finite (NaN or +inf), so they "
          "define no distribution",
          window_index, i);
    const PositionCompare& c = pc[i];
    if (std::isnan(c.kl) || std::isnan(c.teacher_top_p))
      return err(
          "teacher compare: window {} position {}: teacher log-probs are not a distribution (NaN or +inf)",
          window_index, i);
    const bool agree = c.teacher_top1 == c.student_top1;
    ++r_.positions;
    kl_sum_ += c.kl;
    nll_sum_ += c.teacher_nll;
    r_.top1_matches += agree;
    if (c.teacher_top_p > kConfidentTopP) {
      ++r_.confident_positions;
      kl_sum_confident_ += c.kl;
      r_.top1_matches_confident += agree;
    }
  }
  return Status::ok_status();
}

TeacherCompareResult TeacherComparator::finish() {
  TeacherCompareResult r = r_;
  const double n = static_cast<double>(r.positions), nc = static_cast<double>(r.confident_positions);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.all_kl = r.positions ? kl_sum_ / n : nan;
  r.top1_agree = r.positions ? static_cast<double>(r.top1_matches) / n : nan;
  r.confident_kl = r.confident_positions ? kl_sum_confident_ / nc : nan;
  r.top1_agree_confident = r.confident_positions ? static_cast<double>(r.top1_matches_confident) / nc : nan;
  r.teacher_mean_nll = r.positions ? nll_sum_ / n : nan;
  r.teacher_ppl = std::exp(r.teacher_mean_nll);
  r.teacher_sha256 = hash_.hex();
  return r;
}

Expected<std::span<const float>> EngineTeacher::window_log_probs(int64_t window_index,
                                                                 std::span<const int32_t> window) {
  if (window.size() < 2)
    return err("{}: window {} has {} tokens (need >= 2)", describe(), window_index, window.size());
  const runtime::SeqId id = engine_.create_sequence();
  const runtime::BatchItem item{id, window, runtime::LogitsMode::kAll};
  auto lg = engine_.forward(std::span<const runtime::BatchItem>(&item, 1));
  engine_.free_sequence(id);
  if (!lg.ok()) return err("{}: window {}: {}", describe(), window_index, lg.message());
  const int64_t V = engine_.vocab_size();
  const int64_t rows = static_cast<int64_t>(window.size()) - 1;  // the last token predicts past the window
  if (static_cast<int64_t>(lg->size()) != static_cast<int64_t>(window.size()) * V)
    return err("{}: window {}: forward returned {} logits, expected {} x {}", describe(), window_index,
               lg->size(), window.size(), V);
  lp_.resize(static_cast<size_t>(rows * V));
  std::vector<uint8_t> ok(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) ok[i] = log_probs_f32(lg->data() + i * V, V, lp_.data() + i * V);
  for (int64_t i = 0; i < rows; ++i)
    if (!ok[i])
      return err(
          "{}: window {} position {}: logits are not finite (NaN or +inf), so they define no distribution",
          describe(), window_index, i);
  return std::span<const float>(lp_);
}

Expected<TeacherEvalResult> evaluate_against_teacher(runtime::Engine& student, TeacherSource& teacher,
                                                     std::span<const int32_t> tokens,
                                                     const PerplexityOptions& opts) {
  const int64_t V = student.vocab_size();
  if (teacher.vocab_size() != V)
    return err("student {} has vocab_size {} but {} has {}: KL needs one shared vocabulary",
               student.model_dir(), V, teacher.describe(), teacher.vocab_size());
  TeacherComparator cmp(V);
  auto sink = [&](int64_t w, std::span<const int32_t> window, const float* logits, int64_t vocab) -> Status {
    GRIDQ_ASSIGN_OR_RETURN(std::span<const float> lp, teacher.window_log_probs(w, window));
    const int64_t rows = static_cast<int64_t>(window.size()) - 1;
    if (static_cast<int64_t>(lp.size()) != rows * vocab)
      return err("{}: window {} gave {} log-probs, expected {} x {}", teacher.describe(), w, lp.size(), rows,
                 vocab);
    return cmp.add(w, lp.data(), logits, window.subspan(1));
  };
  TeacherEvalResult r;
  GRIDQ_ASSIGN_OR_RETURN(r.student, perplexity(student, tokens, opts, sink));
  r.compare = cmp.finish();
  return r;
}

namespace {

Expected<std::string> read_bytes(const std::string& path) {
  auto b = read_file_bytes(path);
  if (!b.ok()) return err("{} (teacher and student must share one tokenizer)", b.message());
  return b;
}

}  // namespace

Status check_same_tokenizer(const std::string& model_dir, const std::string& teacher_dir) {
  const std::string a = model_dir + "/tokenizer.json", b = teacher_dir + "/tokenizer.json";
  GRIDQ_ASSIGN_OR_RETURN(std::string ta, read_bytes(a));
  GRIDQ_ASSIGN_OR_RETURN(std::string tb, read_bytes(b));
  if (ta != tb) {
    auto digest = [](const std::string& s) {
      return io::sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
    };
    return err("{} and {} differ (sha256 {} vs {}): teacher and student must share one tokenizer", a, b,
               digest(ta), digest(tb));
  }
  return Status::ok_status();
}

}  // namespace gridq::eval
