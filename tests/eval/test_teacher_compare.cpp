// Student-vs-teacher metrics (eval/teacher_compare.h) and the teacher dump (eval/teacher_dump.h): the bundled
// model as its own teacher (KL exactly 0), a perturbed student against an independent float64 KL
// (tests/runtime/parity_util.h compare_logits), the tokenizer/vocabulary refusals, and a dump round trip with
// its refusals (the float64 hand computation on synthetic logits: test_teacher_compare_math.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../runtime/parity_util.h"
#include "eval/teacher_compare.h"
#include "eval/teacher_dump.h"
#include "io/sha256.h"
#include "text/tokenizer.h"

namespace gridq::eval {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> eval_tokens(size_t n) {
  std::ifstream f(testing::repo_path("data/code-eval.txt"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = text::Tokenizer::from_file(testing::repo_path("models/laguna-tiny-code/tokenizer.json"));
  EXPECT_TRUE(tok.ok()) << tok.message();
  if (!tok.ok()) return {};
  // Skip the licence header (the file's first lines) so the windows hold ordinary code.
  auto ids = tok->encode(ss.str().substr(20000, 16 * n), false);
  EXPECT_GE(ids.size(), n);
  ids.resize(std::min(ids.size(), n));
  return ids;
}

std::unique_ptr<runtime::Engine> open_model(int threads = 0) {
  runtime::EngineOptions o;
  o.threads = threads;
  auto e = runtime::Engine::open(testing::repo_path("models/laguna-tiny-code"), o);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

// Small workloads: the ASan build runs ~20x slower.
const int kWindow = testing::kSanitized ? 24 : 64;
const int kWindows = testing::kSanitized ? 2 : 3;

TEST(TeacherCompare, TinyModelAsItsOwnTeacherGivesZeroKl) {
  const auto ids = eval_tokens(static_cast<size_t>(kWindow * kWindows));
  auto student = open_model(), teacher = open_model();
  ASSERT_TRUE(student && teacher);
  EngineTeacher src(*teacher);
  PerplexityOptions o;
  o.window = kWindow;
  auto r = evaluate_against_teacher(*student, src, ids, o);
  ASSERT_TRUE(r.ok()) << r.message();
  const TeacherCompareResult& c = r->compare;
  std::printf("[teacher] self: positions %lld confident %lld ppl %.6f teacher_ppl %.6f all_kl %g sha256 %s\n",
              static_cast<long long>(c.positions), static_cast<long long>(c.confident_positions),
              r->student.ppl, c.teacher_ppl, c.all_kl, c.teacher_sha256.c_str());
  EXPECT_EQ(c.positions, kWindows * (kWindow - 1));
  EXPECT_EQ(c.positions, r->student.positions);
  EXPECT_EQ(c.all_kl, 0.0);
  EXPECT_EQ(c.top1_agree, 1.0);
  EXPECT_GT(c.confident_positions, 0);
  EXPECT_EQ(c.confident_kl, 0.0);
  EXPECT_EQ(c.top1_agree_confident, 1.0);
  // The teacher's PPL (from fp32 log-probs) and the student's (float64 from logits) are the same model's.
  EXPECT_NEAR(c.teacher_ppl, r->student.ppl, 1e-5 * r->student.ppl);
  EXPECT_EQ(c.teacher_sha256.size(), 64u);

  // Same inputs, different thread counts: the same bytes (hash) and the same KL bits.
  auto s1 = open_model(1), t1 = open_model(1);
  ASSERT_TRUE(s1 && t1);
  EngineTeacher src1(*t1);
  auto r1 = evaluate_against_teacher(*s1, src1, ids, o);
  ASSERT_TRUE(r1.ok()) << r1.message();
  EXPECT_EQ(r1->compare.teacher_sha256, c.teacher_sha256);
  EXPECT_EQ(r1->compare.teacher_ppl, c.teacher_ppl);
}

// A student whose logits are the wrapped backend's plus a fixed, position-dependent perturbation.
class PerturbedBackend : public runtime::Backend {
 public:
  PerturbedBackend(runtime::Backend& inner, float scale) : inner_(inner), scale_(scale) {}
  const model::ModelSpec& spec() const override { return inner_.spec(); }
  Status add_sequence(runtime::SeqId id) override { return inner_.add_sequence(id); }
  void remove_sequence(runtime::SeqId id) override { inner_.remove_sequence(id); }
  int64_t sequence_length(runtime::SeqId id) const override { return inner_.sequence_length(id); }
  Status forward(std::span<const runtime::BatchItem> items, std::vector<float>& logits) override {
    const size_t before = logits.size();
    GRIDQ_RETURN_IF_ERROR(inner_.forward(items, logits));
    const size_t V = static_cast<size_t>(spec().vocab_size);
    for (size_t i = before; i < logits.size(); ++i) {
      const size_t row = (i - before) / V, v = (i - before) % V;
      logits[i] += scale_ * static_cast<float>(
                                std::sin(0.37 * static_cast<double>(v) + 1.3 * static_cast<double>(row)));
    }
    return Status::ok_status();
  }

 private:
  runtime::Backend& inner_;
  float scale_;
};

TEST(TeacherCompare, PerturbedStudentMatchesIndependentFloat64Kl) {
  const auto ids = eval_tokens(static_cast<size_t>(kWindow * kWindows));
  auto teacher = open_model(), inner = open_model();
  ASSERT_TRUE(teacher && inner);
  auto student =
      runtime::Engine::from_backend(std::make_unique<PerturbedBackend>(inner->backend(), 0.5f), {});
  EngineTeacher src(*teacher);
  PerplexityOptions o;
  o.window = kWindow;
  auto r = evaluate_against_teacher(*student, src, ids, o);
  ASSERT_TRUE(r.ok()) << r.message();
  const TeacherCompareResult& c = r->compare;

  // Independent: run both models on each window and compare raw logits in float64 (parity_util.h), plus
  // confident positions from the teacher's float64 softmax.
  double kl_sum = 0.0;
  int64_t rows_total = 0, mismatches = 0, conf = 0;
  const int64_t V = teacher->vocab_size();
  for (int w = 0; w < kWindows; ++w) {
    const std::span<const int32_t> win(ids.data() + w * kWindow, static_cast<size_t>(kWindow));
    std::vector<float> lt, ls;
    for (auto* eng : {teacher.get(), student.get()}) {
      const runtime::SeqId id = eng->create_sequence();
      const runtime::BatchItem it{id, win, runtime::LogitsMode::kAll};
      auto lg = eng->forward(std::span<const runtime::BatchItem>(&it, 1));
      eng->free_sequence(id);
      ASSERT_TRUE(lg.ok()) << lg.message();
      (eng == teacher.get() ? lt : ls) = std::move(*lg);
    }
    const int64_t rows = kWindow - 1;
    const testing::Compare cm = testing::compare_logits(lt.data(), ls.data(), rows, V);
    kl_sum += cm.mean_kl * static_cast<double>(rows);
    mismatches += cm.argmax_mismatch;
    rows_total += rows;
    for (int64_t i = 0; i < rows; ++i) {
      const float* z = lt.data() + i * V;
      double mx = z[0], sum = 0.0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
      conf += 1.0 / sum > 0.5;
    }
  }
  const double kl_ref = kl_sum / static_cast<double>(rows_total);
  std::printf(
      "[teacher] perturbed: all_kl %.9g (float64 reference %.9g) confident_kl %.6g top1 %.4f (%lld/%lld)\n",
      c.all_kl, kl_ref, c.confident_kl, c.top1_agree, static_cast<long long>(c.top1_matches),
      static_cast<long long>(c.positions));
  EXPECT_EQ(c.positions, rows_total);
  EXPECT_GT(c.all_kl, 1e-3);
  EXPECT_NEAR(c.all_kl, kl_ref, 1e-5 * kl_ref);
  EXPECT_EQ(c.positions - c.top1_matches, mismatches);
  EXPECT_GT(mismatches, 0);  // the perturbation is big enough to flip some top-1s
  EXPECT_EQ(c.confident_positions, conf);
  EXPECT_LT(c.top1_agree, 1.0);
}

// ---- refusals ----

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("gridq_teacher_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(TeacherCompare, RefusesDifferentTokenizers) {
  const std::string model = testing::repo_path("models/laguna-tiny-code");
  EXPECT_TRUE(check_same_tokenizer(model, model).ok());
  TempDir tmp;
  const fs::path other = tmp.path / "other";
  fs::create_directories(other);
  {
    std::ifstream in(model + "/tokenizer.json", std::ios::binary);
    std::ofstream out(other / "tokenizer.json", std::ios::binary);
    out << in.rdbuf() << " ";  // one extra byte: a different file
  }
  Status st = check_same_tokenizer(model, other.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(model + "/tokenizer.json"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(other.string() + "/tokenizer.json"), std::string::npos) << st.message();
  st = check_same_tokenizer(model, (tmp.path / "missing").string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing/tokenizer.json"), std::string::npos) << st.message();
}

class FixedVocabTeacher : public TeacherSource {
 public:
  int64_t vocab_size() const override { return 7; }
  std::string describe() const override { return "teacher fake"; }
  Expected<std::span<const float>> window_log_probs(int64_t, std::span<const int32_t>) override {
    return err("not reached");
  }
};

TEST(TeacherCompare, RefusesDifferentVocabularies) {
  auto student = open_model();
  ASSERT_TRUE(student);
  FixedVocabTeacher t;
  const std::vector<int32_t> ids = {1, 2, 3};
  auto r = evaluate_against_teacher(*student, t, ids, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("vocab_size 4096"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("teacher fake has 7"), std::string::npos) << r.message();
}

// ---- teacher dump ----

TEST(TeacherDump, RoundTripGivesTheSameBitsAndRefusesMismatches) {
  const int window = testing::kSanitized ? 16 : 32;
  const auto ids = eval_tokens(static_cast<size_t>(2 * window + 5));  // a 5-token tail window too
  auto teacher = open_model(), inner = open_model();
  ASSERT_TRUE(teacher && inner);
  auto student =
      runtime::Engine::from_backend(std::make_unique<PerturbedBackend>(inner->backend(), 0.3f), {});
  const std::string model = testing::repo_path("models/laguna-tiny-code");
  auto digest = tokenizer_digest(model);
  ASSERT_TRUE(digest.ok()) << digest.message();
  TempDir tmp;
  const std::string path = (tmp.path / "teacher.safetensors").string();
  PerplexityOptions o;
  o.window = window;

  {  // abandoned before finish(): nothing left behind
    EngineTeacher live(*teacher);
    auto w = TeacherDumpWriter::create(path, live, model, ids, window, *digest);
    ASSERT_TRUE(w.ok()) << w.message();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  EngineTeacher live(*teacher);
  auto w = TeacherDumpWriter::create(path, live, model, ids, window, *digest);
  ASSERT_TRUE(w.ok()) << w.message();
  auto a = evaluate_against_teacher(*student, **w, ids, o);
  ASSERT_TRUE(a.ok()) << a.message();
  auto h = (*w)->finish();
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(*h, a->compare.teacher_sha256);
  EXPECT_EQ(a->compare.positions, 2 * (window - 1) + 4);

  auto rd = TeacherDumpReader::open(path, ids, window, *digest);
  ASSERT_TRUE(rd.ok()) << rd.message();
  EXPECT_EQ((*rd)->sha256(), *h);
  EXPECT_EQ((*rd)->teacher(), model);
  auto b = evaluate_against_teacher(*student, **rd, ids, o);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->compare.teacher_sha256, a->compare.teacher_sha256);
  EXPECT_EQ(b->compare.all_kl, a->compare.all_kl);
  EXPECT_EQ(b->compare.confident_kl, a->compare.confident_kl);
  EXPECT_EQ(b->compare.top1_matches, a->compare.top1_matches);
  EXPECT_EQ(b->compare.teacher_ppl, a->compare.teacher_ppl);
  EXPECT_GT(b->compare.all_kl, 0.0);

  auto expect_refused = [&](Expected<std::unique_ptr<TeacherDumpReader>> r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << "expected a refusal mentioning '" << needle << "'";
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };
  expect_refused(TeacherDumpReader::open(path, ids, window + 1, *digest), "--window");
  auto other = ids;
  other[window + 3] ^= 1;
  expect_refused(TeacherDumpReader::open(path, other, window, *digest),
                 "first difference at token " + std::to_string(window + 3));
  expect_refused(
      TeacherDumpReader::open(path, std::span<const int32_t>(ids).first(ids.size() - 1), window, *digest),
      "token stream");
  expect_refused(TeacherDumpReader::open(path, ids, window, std::string(64, '0')), "tokenizer");

  // One flipped bit in the log-probs: the stored hash no longer matches.
  const std::string bad = (tmp.path / "bad.safetensors").string();
  fs::copy_file(path, bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);  // inside log_probs (the hash is the last 64 bytes)
    char c = 0;
    f.read(&c, 1);
    c ^= 1;
    f.seekp(-100, std::ios::end);
    f.write(&c, 1);
  }
  expect_refused(TeacherDumpReader::open(bad, ids, window, *digest), "corrupt");
}

}  // namespace
}  // namespace gridq::eval
