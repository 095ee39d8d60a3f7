// The residual-stream rotation (quant/rotate.h, issue 15 item 3): Q is orthogonal for every supported order
// (powers of two and Paley × power of two, e.g. 12·2^k), unsupported orders are refused; the rotated BF16
// checkpoint computes the same logits as the original on the CPU engine (synthetic models of hidden 256 and
// 384 = 12·32 with non-trivial norm weights, and the bundled model); the rotation is deterministic and does
// not depend on the thread count; `quantize --rotate hadamard` writes an ordinary artifact the CPU engine
// serves.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "gridbook/artifact.h"
#include "io/checkpoint.h"
#include "io/sha256.h"
#include "pipeline_test_util.h"
#include "quant/pipeline.h"
#include "quant/rotate.h"
#include "runtime/engine.h"

namespace gridq::quant {
namespace {

namespace fs = std::filesystem;
using gridq::testing::kSanitized;
using gridq::testing::repo_path;

std::string tmp_dir(const std::string& tag) {
  return (fs::temp_directory_path() / fmt::format("gridq_rotate_{}_{}", ::getpid(), tag)).string();
}

// max |Q·Qᵀ − I| from the rows of Q (row i = e_i·Q).
double orthogonality_error(const Rotation& r) {
  const int n = r.n;
  std::vector<double> Q(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    double* row = Q.data() + static_cast<size_t>(i) * n;
    row[i] = 1.0;
    r.apply(row);
  }
  double worst = 0.0;
  for (int i = 0; i < n; ++i)
    for (int j = i; j < n; ++j) {
      const double d = std::inner_product(Q.begin() + static_cast<ptrdiff_t>(i) * n,
                                          Q.begin() + static_cast<ptrdiff_t>(i + 1) * n,
                                          Q.begin() + static_cast<ptrdiff_t>(j) * n, 0.0);
      worst = std::max(worst, std::abs(d - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

TEST(Rotation, OrthogonalForSupportedOrders) {
  for (int n : {1, 2, 12, 20, 256, 384, 768}) {
    auto r = make_hadamard_rotation(n, kDefaultRotationSeed);
    ASSERT_TRUE(r.ok()) << n << ": " << r.message();
    EXPECT_EQ(r->m * r->p2, n);
    EXPECT_LT(orthogonality_error(*r), 1e-12) << n;
  }
  auto r12 = make_hadamard_rotation(3072, 1);
  ASSERT_TRUE(r12.ok()) << r12.message();
  EXPECT_EQ(r12->m, 12);  // Laguna-S-2.1's hidden: H_12 ⊗ H_256
  EXPECT_EQ(r12->p2, 256);
}

TEST(Rotation, InverseUndoesAndEntriesAreFlat) {
  auto r = make_hadamard_rotation(384, 5);
  ASSERT_TRUE(r.ok()) << r.message();
  std::vector<double> v(384), w;
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i)) + (i == 7 ? 5.0 : 0.0);
  w = v;
  r->apply(w.data());
  double diff = 0.0;
  for (size_t i = 0; i < v.size(); ++i) diff = std::max(diff, std::abs(w[i] - v[i]));
  EXPECT_GT(diff, 0.1);  // a real rotation, not the identity
  r->apply_inverse(w.data());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(w[i], v[i], 1e-12);
  // Incoherence: a basis vector spreads to entries of magnitude 1/√n everywhere.
  std::vector<double> e(384, 0.0);
  e[100] = 1.0;
  r->apply(e.data());
  for (double x : e) EXPECT_NEAR(std::abs(x), 1.0 / std::sqrt(384.0), 1e-12);
}

TEST(Rotation, UnsupportedOrdersAreRefused) {
  for (int n : {7, 100, 0, 3 * 5 * 7}) {
    auto r = make_hadamard_rotation(n, 1);
    EXPECT_FALSE(r.ok()) << n;
  }
  auto r = make_hadamard_rotation(100, 1);
  EXPECT_NE(r.message().find("100"), std::string::npos) << r.message();
}

TEST(Rotation, SignsFollowTheSeed) {
  auto a = make_hadamard_rotation(256, 1), b = make_hadamard_rotation(256, 1),
       c = make_hadamard_rotation(256, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->sign, b->sign);
  EXPECT_NE(a->sign, c->sign);
}

// Logits [T, V] of `dir` for `ids` on the CPU engine.
std::vector<float> cpu_logits(const std::string& dir, const std::vector<int32_t>& ids) {
  runtime::EngineOptions eo;
  eo.device = "cpu";
  auto eng = runtime::Engine::open(dir, eo);
  EXPECT_TRUE(eng.ok()) << dir << ": " << eng.message();
  if (!eng.ok()) return {};
  const runtime::SeqId s = (*eng)->create_sequence();
  auto out = (*eng)->prefill(s, ids, runtime::LogitsMode::kAll);
  EXPECT_TRUE(out.ok()) << out.message();
  return out.ok() ? *out : std::vector<float>{};
}

struct LogitDiff {
  double max_abs = 0.0, logit_rms = 0.0;
  int top1_same = 0, rows = 0;
};

LogitDiff diff_logits(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  LogitDiff d;
  double ss = 0.0;
  d.rows = static_cast<int>(a.size() / static_cast<size_t>(V));
  for (int r = 0; r < d.rows; ++r) {
    const float* x = a.data() + static_cast<size_t>(r) * V;
    const float* y = b.data() + static_cast<size_t>(r) * V;
    for (int64_t v = 0; v < V; ++v) {
      d.max_abs = std::max(d.max_abs, static_cast<double>(std::abs(x[v] - y[v])));
      ss += static_cast<double>(x[v]) * x[v];
    }
    d.top1_same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
  }
  d.logit_rms = std::sqrt(ss / static_cast<double>(a.size()));
  return d;
}

std::vector<int32_t> some_ids(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 131 + 17) % vocab);
  return ids;
}

class RotateCheckpoint : public ::testing::TestWithParam<int> {};

// The synthetic checkpoint's norms are 1 + N(0, 0.05²), so folding them matters: without the fold the logits
// move by far more than the tolerance below.
TEST_P(RotateCheckpoint, SameLogitsAsTheOriginal) {
  const int hidden = GetParam();
  const std::string src = tmp_dir(fmt::format("src{}", hidden)), dst = tmp_dir(fmt::format("rot{}", hidden));
  testing::TinyLaguna o;
  o.hidden = hidden;
  o.heads = hidden / 128;
  o.vocab = 512;
  o.experts = 4;
  o.top_k = 2;
  testing::write_tiny_laguna(src, o);
  fs::remove_all(dst);
  auto s = rotate_checkpoint(src, dst, {});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->norms, 2 * o.layers + 1);
  EXPECT_GT(s->input_side, 0);
  EXPECT_GT(s->output_side, 0);

  // Stored norms are ones; the embedding changed.
  auto rc = io::Checkpoint::open(dst);
  auto oc = io::Checkpoint::open(src);
  ASSERT_TRUE(rc.ok() && oc.ok());
  const io::TensorInfo* n = (*rc)->find("model.norm.weight");
  ASSERT_NE(n, nullptr);
  for (int64_t i = 0; i < n->numel(); ++i) EXPECT_EQ(n->data[2 * i] | (n->data[2 * i + 1] << 8), 0x3F80);
  const io::TensorInfo* e0 = (*oc)->find("model.embed_tokens.weight");
  const io::TensorInfo* e1 = (*rc)->find("model.embed_tokens.weight");
  ASSERT_TRUE(e0 && e1);
  EXPECT_EQ(e0->shape, e1->shape);
  EXPECT_NE(std::memcmp(e0->data, e1->data, e0->nbytes()), 0);

  const auto ids = some_ids(48, o.vocab);
  const auto a = cpu_logits(src, ids), b = cpu_logits(dst, ids);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  const LogitDiff d = diff_logits(a, b, o.vocab);
  // BF16 re-rounding of every rotated weight (relative 2^-9) and of the folded activations: about 1e-2 of
  // the logit scale; an error in the algebra (a missed norm, Q instead of Qᵀ) is O(logit scale).
  EXPECT_LT(d.max_abs, 0.02 * d.logit_rms + 1e-3) << "max |Δ| " << d.max_abs << ", logit rms " << d.logit_rms;
  EXPECT_GE(d.top1_same, d.rows - 1);
  std::fprintf(stderr, "hidden %d: max |Δlogit| %.3g (logit rms %.3g), top-1 same %d/%d\n", hidden, d.max_abs,
               d.logit_rms, d.top1_same, d.rows);
  fs::remove_all(src);
  fs::remove_all(dst);
}

INSTANTIATE_TEST_SUITE_P(Hidden, RotateCheckpoint, ::testing::Values(256, 384));

TEST(RotateBundled, SameLogitsAndDeterministicAcrossThreads) {
  if (kSanitized) GTEST_SKIP() << "the bundled model is slow under sanitizers";
  const std::string src = repo_path("models/laguna-tiny-code");
  const std::string a = tmp_dir("bundled_a"), b = tmp_dir("bundled_b");
  fs::remove_all(a);
  fs::remove_all(b);
  RotateOptions o1, o2;
  o1.threads = 1;
  o2.threads = 2;
  auto s1 = rotate_checkpoint(src, a, o1);
  ASSERT_TRUE(s1.ok()) << s1.message();
  auto s2 = rotate_checkpoint(src, b, o2);
  ASSERT_TRUE(s2.ok()) << s2.message();
  omp_set_num_threads(omp_get_num_procs());
  for (const auto& f : fs::directory_iterator(a)) {
    auto ha = io::sha256_file(f.path().string());
    auto hb = io::sha256_file((fs::path(b) / f.path().filename()).string());
    ASSERT_TRUE(ha.ok() && hb.ok()) << f.path();
    EXPECT_EQ(*ha, *hb) << f.path().filename();
  }
  const std::vector<int32_t> ids = some_ids(64, 4096);
  const auto x = cpu_logits(src, ids), y = cpu_logits(a, ids);
  ASSERT_EQ(x.size(), y.size());
  const LogitDiff d = diff_logits(x, y, 4096);
  EXPECT_LT(d.max_abs, 0.02 * d.logit_rms + 1e-3) << "max |Δ| " << d.max_abs << ", logit rms " << d.logit_rms;
  EXPECT_GE(d.top1_same, d.rows - 2);
  std::fprintf(stderr, "bundled: max |Δlogit| %.4g (logit rms %.3g), top-1 same %d/%d\n", d.max_abs,
               d.logit_rms, d.top1_same, d.rows);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(RotateRefusals, TiedEmbeddingsAndExistingOutput) {
  const std::string src = tmp_dir("tied"), dst = tmp_dir("tied_out");
  testing::TinyLaguna o;
  nlohmann::json cfg = testing::write_tiny_laguna(src, o);
  cfg["tie_word_embeddings"] = true;
  std::ofstream(fs::path(src) / "config.json") << cfg.dump(2) << "\n";
  fs::remove_all(dst);
  auto s = rotate_checkpoint(src, dst, {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tie"), std::string::npos) << s.message();
  cfg["tie_word_embeddings"] = false;
  std::ofstream(fs::path(src) / "config.json") << cfg.dump(2) << "\n";
  fs::create_directories(dst);
  auto s2 = rotate_checkpoint(src, dst, {});
  EXPECT_FALSE(s2.ok());
  EXPECT_NE(s2.message().find("exists"), std::string::npos) << s2.message();
  fs::remove_all(src);
  fs::remove_all(dst);
}

// quantize --rotate hadamard: an ordinary artifact (the validating reader opens it) that the CPU engine runs,
// close to the BF16 teacher; the rotation is recorded in the provenance and the rotated copy removed.
TEST(RotateQuantize, ArtifactRunsOnTheCpuEngine) {
  const std::string src = tmp_dir("qsrc"), out = tmp_dir("qout");
  testing::TinyLaguna t;
  t.copy_tokenizer = true;
  testing::write_tiny_laguna(src, t);
  QuantizeOptions q;
  q.src = src;
  q.out = out;
  q.recipe = "laguna";
  q.repo_root = repo_path("");
  q.calib = repo_path("data/code-calib.txt");
  q.calib_tokens = kSanitized ? 256 : 1024;
  q.seq_len = 64;
  q.method = "rtn";
  q.progress = Progress::Mode::kQuiet;
  q.overwrite = true;
  q.rotate = "hadamard";
  auto s = quantize(q);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(s->finished);
  EXPECT_FALSE(fs::exists(out + ".rotated-src"));
  auto art = gridbook::Artifact::open(out);
  ASSERT_TRUE(art.ok()) << art.message();
  auto qc = io::read_json_file((fs::path(out) / "quant_config.json").string());
  ASSERT_TRUE(qc.ok());
  EXPECT_EQ((*qc)["provenance"]["rotation"]["kind"], "hadamard");

  const auto ids = some_ids(32, 4096);
  const auto a = cpu_logits(src, ids), b = cpu_logits(out, ids);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (float v : b) ASSERT_TRUE(std::isfinite(v));
  const LogitDiff d = diff_logits(a, b, 4096);
  EXPECT_GE(d.top1_same, d.rows / 2) << "quantized rotated model far from its teacher";
  fs::remove_all(src);
  fs::remove_all(out);
}

}  // namespace
}  // namespace gridq::quant
