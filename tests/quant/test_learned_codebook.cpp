// Learned pooled codebooks (quantizer.md §3) on the bundled model's real routed-expert weights. The check is
// independent of the learner: the encoder (encode_fp4_rtn: two-tier scale search + nearest codeword, run with
// each book) must reconstruct the weights with lower importance-weighted error using the learned book than
// using the lattice book, on the matrices it learned from and on a held-out layer. Rebuilding (and with
// another thread count) must give identical bytes.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "../runtime/parity_util.h"
#include "core/numerics.h"
#include "io/checkpoint.h"
#include "quant/cb_gptq.h"
#include "quant/grid_values.h"
#include "quant/lattice_codebook.h"
#include "quant/learned_codebook.h"

namespace gridq::quant {
namespace {

using gridq::testing::kSanitized;
using gridq::testing::repo_path;

struct Mat {
  std::string name;
  int rows = 0, cols = 0;
  std::vector<float> W;  // [rows, cols]
  std::vector<float> q;  // [cols]
  double n = 1.0;
};

std::vector<float> read_f32(const io::Checkpoint& ck, const std::string& name, std::vector<int64_t>* shape) {
  const io::TensorInfo* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  if (shape) *shape = t->shape;
  std::vector<float> out(static_cast<size_t>(t->numel()));
  if (t->dtype == io::DType::BF16) {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
  } else {
    EXPECT_EQ(t->dtype, io::DType::F32) << name;
    std::memcpy(out.data(), t->data, out.size() * 4);
  }
  return out;
}

// The routed experts of `layer` (experts [0, n_experts)), gate/up/down, with stand-in importances: gate/up
// read the post-attention norm's output, so q_j = w_norm_j²; down reads SiLU(gate·x)⊙(up·x), so q_j =
// ‖gate_j‖²·‖up_j‖². Token counts n vary by expert, so the pooling weights differ.
std::vector<Mat> expert_mats(const io::Checkpoint& ck, int layer, int n_experts) {
  std::vector<Mat> out;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  std::vector<float> norm = read_f32(ck, p + "post_attention_layernorm.weight", nullptr);
  for (float& v : norm) v = v * v;
  for (int e = 0; e < n_experts; ++e) {
    const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
    std::vector<int64_t> sg, su, sd;
    Mat g{q + "gate_proj", 0, 0, read_f32(ck, q + "gate_proj.weight", &sg), norm, 1.0 + e % 5};
    Mat u{q + "up_proj", 0, 0, read_f32(ck, q + "up_proj.weight", &su), norm, 1.0 + e % 5};
    g.rows = u.rows = static_cast<int>(sg[0]);
    g.cols = u.cols = static_cast<int>(sg[1]);
    Mat d{q + "down_proj", 0, 0, read_f32(ck, q + "down_proj.weight", &sd), {}, 1.0 + e % 5};
    d.rows = static_cast<int>(sd[0]);
    d.cols = static_cast<int>(sd[1]);
    d.q.resize(d.cols);
    for (int j = 0; j < d.cols; ++j) {
      double a = 0, b = 0;
      for (int c = 0; c < g.cols; ++c) {
        a += double(g.W[size_t(j) * g.cols + c]) * g.W[size_t(j) * g.cols + c];
        b += double(u.W[size_t(j) * u.cols + c]) * u.W[size_t(j) * u.cols + c];
      }
      d.q[j] = static_cast<float>(a * b);
    }
    out.push_back(std::move(g));
    out.push_back(std::move(u));
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<LearnInput> inputs_of(const std::vector<Mat>& mats) {
  std::vector<LearnInput> in;
  for (const Mat& m : mats) in.push_back({m.W.data(), m.rows, m.cols, m.q.data(), m.n, m.name});
  return in;
}

// Σ_m n_m Σ_{r,j} q_j (W − Ŵ)² over the first `rows` rows of every matrix, with Ŵ from the real encoder
// `encode` (fp4: pilot, two-tier scales, nearest codeword; FP8-CB: row scale, nearest codeword) run with the
// book under test. A row slice keeps the test fast; the encoder treats the slice as the matrix, identically
// for both books.
template <class Encode>
double weighted_error(Encode encode, const gridbook::Codebook& cb, const std::vector<Mat>& mats, int rows) {
  double total = 0;
  for (const Mat& m : mats) {
    const int R = std::min(rows, m.rows);
    auto enc = encode(cb, m.W.data(), R, m.cols, m.q.data());
    EXPECT_TRUE(enc.ok()) << enc.message();
    if (!enc.ok()) return 0;
    double e = 0;
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < m.cols; ++j) {
        const double d = double(enc->w_hat[size_t(r) * m.cols + j]) - m.W[size_t(r) * m.cols + j];
        e += m.q[j] * d * d;
      }
    total += m.n * e;
  }
  return total;
}

double fp4_error(const gridbook::Codebook& cb, const std::vector<Mat>& mats, int rows) {
  return weighted_error(
      [](auto&&... a) { return encode_fp4_rtn(std::forward<decltype(a)>(a)...); }, cb, mats, rows);
}

double fp8cb_error(const gridbook::Codebook& cb, const std::vector<Mat>& mats, int rows) {
  return weighted_error(
      [](auto&&... a) { return encode_fp8cb_rtn(std::forward<decltype(a)>(a)...); }, cb, mats, rows);
}

// Shapes, grid membership (from_tables checked it), distinct entries, lexicographic order.
void expect_well_formed(const gridbook::Codebook& learned, const gridbook::Codebook& lattice) {
  ASSERT_EQ(learned.sub.size(), lattice.sub.size());
  const int d = learned.rung.sub_dim();
  for (size_t s = 0; s < learned.sub.size(); ++s) {
    ASSERT_EQ(learned.sub[s].size(), lattice.sub[s].size());
    const size_t K = learned.sub[s].size() / d;
    for (size_t k = 1; k < K; ++k) {
      const float* a = &learned.sub[s][(k - 1) * d];
      const float* b = &learned.sub[s][k * d];
      EXPECT_TRUE(std::lexicographical_compare(a, a + d, b, b + d)) << "sub " << s << " entry " << k;
    }
  }
}

const io::Checkpoint& tiny() {
  static std::unique_ptr<io::Checkpoint> ck = [] {
    auto c = io::Checkpoint::open(repo_path("models/laguna-tiny-code"));
    EXPECT_TRUE(c.ok()) << c.message();
    return c.ok() ? std::move(*c) : nullptr;
  }();
  return *ck;
}

TEST(LearnedCodebook, BeatsTheLatticeOnRealExpertsAtK16) {
  const gridbook::Rung rung = *gridbook::parse_rung_name("NVFP4_CB_K16", 2);
  const gridbook::Codebook lattice = *lattice_codebook(rung);
  // Train on layers 1-2 (every expert), hold out layer 3 (ASan build: a slice of layer 1 and of layer 3).
  std::vector<Mat> train = expert_mats(tiny(), 1, kSanitized ? 2 : 12);
  const std::vector<Mat> layer1(train.begin(), train.begin() + (kSanitized ? 6 : 18));  // experts 0-5
  if (!kSanitized) {
    std::vector<Mat> l2 = expert_mats(tiny(), 2, 12);
    for (Mat& m : l2) train.push_back(std::move(m));
  }
  const std::vector<Mat> held = expert_mats(tiny(), 3, kSanitized ? 1 : 12);
  LearnOptions opt;
  opt.max_samples = kSanitized ? 4000 : 40000;  // row-sampled: 3.4% of layers 1-2's 1.18 M codewords
  LearnReport rep;
  const std::vector<LearnInput> in = inputs_of(train);
  auto learned = learn_codebook(rung, in, opt, &rep);
  ASSERT_TRUE(learned.ok()) << learned.message();
  expect_well_formed(*learned, lattice);
  ASSERT_EQ(rep.sub.size(), 2u);
  for (const auto& s : rep.sub) {
    EXPECT_GT(s.samples, 0);
    EXPECT_LE(s.samples, opt.max_samples);
    EXPECT_LT(s.error_learned, s.error_lattice);
    std::printf("sub: %lld samples, weighted error lattice %.6g -> learned %.6g (iterate %d)\n",
                static_cast<long long>(s.samples), s.error_lattice, s.error_learned, s.best_iteration);
  }
  EXPECT_NE(learned->sub[0], lattice.sub[0]);

  const int rows = kSanitized ? 8 : 16;
  const double lat_train = fp4_error(lattice, layer1, rows), lrn_train = fp4_error(*learned, layer1, rows);
  const double lat_held = fp4_error(lattice, held, rows), lrn_held = fp4_error(*learned, held, rows);
  std::printf(
      "K16 importance-weighted error (encode_fp4_rtn, first %d rows of each matrix): layer 1 (trained "
      "on) lattice %.6g learned %.6g (%+.2f%%); held-out layer 3 lattice %.6g learned %.6g (%+.2f%%)\n",
      rows, lat_train, lrn_train, 100 * (lrn_train / lat_train - 1), lat_held, lrn_held,
      100 * (lrn_held / lat_held - 1));
  // The ASan build checks memory and UB on a slice too small to learn from; the numbers are checked here.
  if (!kSanitized) {
    EXPECT_LT(lrn_train, lat_train);
    EXPECT_LT(lrn_held, lat_held);
  }
}

TEST(LearnedCodebook, RebuildsByteIdenticallyWhateverTheThreadCount) {
  const gridbook::Rung rung = *gridbook::parse_rung_name("NVFP4_CB_K16", 2);
  const std::vector<Mat> mats = expert_mats(tiny(), 2, kSanitized ? 1 : 4);
  const std::vector<LearnInput> in = inputs_of(mats);
  LearnOptions opt;
  opt.max_samples = kSanitized ? 2000 : 20000;  // below the pool: exercises row sampling
  const int saved = omp_get_max_threads();
  std::vector<std::vector<std::vector<float>>> books;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    auto b = learn_codebook(rung, in, opt);
    ASSERT_TRUE(b.ok()) << b.message();
    books.push_back(b->sub);
  }
  omp_set_num_threads(saved);
  for (size_t i = 1; i < books.size(); ++i)
    for (size_t s = 0; s < books[0].size(); ++s) {
      ASSERT_EQ(books[i][s].size(), books[0][s].size());
      EXPECT_EQ(std::memcmp(books[i][s].data(), books[0][s].data(), books[0][s].size() * 4), 0);
    }
  // The streaming form with the same inputs in the same order is the same book.
  int64_t total = 0;
  for (const Mat& m : mats) total += int64_t(m.rows) * m.cols / 8;
  auto l = CodebookLearner::create(rung, total, opt);
  ASSERT_TRUE(l.ok());
  for (const LearnInput& x : in) ASSERT_TRUE((*l)->add(x).ok());
  auto b = (*l)->finish();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->sub, books[0]);
}

TEST(LearnedCodebook, Fp8CbBookLowersTheEncoderError) {
  const gridbook::Rung rung = *gridbook::parse_rung_name("FP8_CB_K32", 1);
  const gridbook::Codebook lattice = *lattice_codebook(rung);
  const std::vector<Mat> mats = expert_mats(tiny(), 1, kSanitized ? 1 : 4);
  LearnOptions opt;
  opt.max_samples = kSanitized ? 3000 : 60000;
  LearnReport rep;
  auto learned = learn_codebook(rung, inputs_of(mats), opt, &rep);
  ASSERT_TRUE(learned.ok()) << learned.message();
  expect_well_formed(*learned, lattice);
  ASSERT_EQ(rep.sub.size(), 4u);
  for (const auto& s : rep.sub) EXPECT_LE(s.error_learned, s.error_lattice);
  const int rows = kSanitized ? 8 : 32;
  const double lat = fp8cb_error(lattice, mats, rows), lrn = fp8cb_error(*learned, mats, rows);
  std::printf("FP8_CB_K32 weighted error (first %d rows): lattice %.6g learned %.6g (%+.2f%%)\n", rows, lat,
              lrn, 100 * (lrn / lat - 1));
  if (!kSanitized) {
    EXPECT_LT(lrn, lat);
  }
}

TEST(LearnedCodebook, RefusesBadInputs) {
  const gridbook::Rung k16 = *gridbook::parse_rung_name("NVFP4_CB_K16", 2);
  std::vector<float> W(16 * 256, 0.5f), q(256, 1.0f);
  LearnInput ok{W.data(), 16, 256, q.data(), 1.0, "m"};
  EXPECT_TRUE(learn_codebook(k16, std::span<const LearnInput>(&ok, 1)).ok());
  EXPECT_FALSE(
      learn_codebook(*gridbook::parse_rung_name("NVFP4_CB_K16", 1), std::span<const LearnInput>(&ok, 1))
          .ok());
  LearnInput bad_shape = ok;
  bad_shape.cols = 128;
  EXPECT_FALSE(learn_codebook(k16, std::span<const LearnInput>(&bad_shape, 1)).ok());
  std::vector<float> Wn = W;
  Wn[7] = std::nanf("");
  LearnInput nan_w = ok;
  nan_w.W = Wn.data();
  auto e = learn_codebook(k16, std::span<const LearnInput>(&nan_w, 1));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("'m'"), std::string::npos) << e.message();
  std::vector<float> qn = q;
  qn[3] = -1.0f;
  LearnInput neg_q = ok;
  neg_q.imatrix = qn.data();
  EXPECT_FALSE(learn_codebook(k16, std::span<const LearnInput>(&neg_q, 1)).ok());
  LearnInput cold = ok;
  cold.weight = 0.0;
  auto c = learn_codebook(k16, std::span<const LearnInput>(&cold, 1));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("no samples"), std::string::npos) << c.message();
  auto l = CodebookLearner::create(k16, 16 * 256 / 8, {});
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE((*l)->add(ok).ok());
  EXPECT_FALSE((*l)->add(ok).ok());  // beyond the declared total
}

}  // namespace
}  // namespace gridq::quant
