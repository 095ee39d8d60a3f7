// CB-GPTQ (quantizer.md §5, tests §10): reductions to nearest-codeword and to textbook GPTQ, gain over RTN on
// correlated inputs, pack -> gridbook decode exactness, determinism across thread counts.
#include "quant/cb_gptq.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "quant/cb_gptq_device.h"
#include "quant/hessian_factor.h"
#include "quant/lattice_codebook.h"
#include "quant_test_util.h"

namespace gridq::quant {
namespace {

gridbook::Codebook book_for(const char* name, int layout) {
  auto r = gridbook::parse_rung_name(name, layout);
  EXPECT_TRUE(r.ok()) << r.message();
  auto cb = lattice_codebook(*r);
  EXPECT_TRUE(cb.ok()) << cb.message();
  return *cb;
}

std::vector<float> identity(int C, float v) {
  std::vector<float> H(size_t(C) * C, 0.0f);
  for (int i = 0; i < C; ++i) H[size_t(i) * C + i] = v;
  return H;
}

// Synthetic layer: correlated inputs, random weights, H from training rows, q = diag(H)/n, held-out rows.
struct Layer {
  int R, C;
  int64_t n_train, n_hold;
  std::vector<float> W, H, q, X_hold;
};

Layer make_layer(int R, int C, int64_t n_train, int64_t n_hold, uint64_t seed) {
  Layer L{R, C, n_train, n_hold, {}, {}, {}, {}};
  testing::Correlated cor(C, seed);
  const std::vector<float> X = cor.rows(n_train, seed + 1);
  L.X_hold = cor.rows(n_hold, seed + 2);
  L.H = testing::gram(X, n_train, C);
  L.q.resize(C);
  for (int j = 0; j < C; ++j) L.q[j] = L.H[size_t(j) * C + j] / static_cast<float>(n_train);
  L.W = testing::gaussian(size_t(R) * C, seed + 3, 0.02);
  return L;
}

const Layer& shared_layer() {
  static const Layer L = make_layer(64, 512, 2048, 512, 1000);
  return L;
}

TEST(CbGptq, IdentityHessianEqualsNearestCodewordBytes) {
  const gridbook::Codebook cb = book_for("NVFP4_CB_K16", 2);
  const int R = 32, C = 512;
  const std::vector<float> W = testing::gaussian(size_t(R) * C, 7, 0.02);
  const std::vector<float> q(C, 1.0f);
  auto rtn = encode_fp4_rtn(cb, W.data(), R, C, q.data());
  ASSERT_TRUE(rtn.ok()) << rtn.message();
  auto rtn_bytes = pack_fp4_v2(cb.rung, *rtn);
  ASSERT_TRUE(rtn_bytes.ok()) << rtn_bytes.message();
  for (float hv : {1.0f, 7.0f}) {
    const std::vector<float> H = identity(C, hv);
    auto g = encode_fp4_cb_gptq(cb, W.data(), R, C, H.data(), 1000, q.data());
    ASSERT_TRUE(g.ok()) << g.message();
    EXPECT_FALSE(g->used_identity);
    auto bytes = pack_fp4_v2(cb.rung, *g);
    ASSERT_TRUE(bytes.ok()) << bytes.message();
    EXPECT_EQ(*bytes, *rtn_bytes) << "H = " << hv << "·I";
  }
  // No tokens: U = I by rule, same bytes.
  const std::vector<float> H0(size_t(C) * C, 0.0f);
  auto g0 = encode_fp4_cb_gptq(cb, W.data(), R, C, H0.data(), 0, q.data());
  ASSERT_TRUE(g0.ok()) << g0.message();
  EXPECT_TRUE(g0->used_identity);
  EXPECT_EQ(*pack_fp4_v2(cb.rung, *g0), *rtn_bytes);
}

// ---- textbook GPTQ in fp64 (IST-DASLab/gptq fasterquant recursion, one column at a time) ----

// Right-looking Cholesky (a different loop order from the library's).
std::vector<double> ref_cholesky(std::vector<double> A, int n) {
  for (int k = 0; k < n; ++k) {
    const double p = std::sqrt(A[size_t(k) * n + k]);
    for (int i = k; i < n; ++i) A[size_t(i) * n + k] /= p;
    for (int j = k + 1; j < n; ++j)
      for (int i = j; i < n; ++i) A[size_t(i) * n + j] -= A[size_t(i) * n + k] * A[size_t(j) * n + k];
  }
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) A[size_t(i) * n + j] = 0.0;
  return A;
}

// Hinv_upper: damped H -> inverse (by solving L·Lᵀ·X = I) -> upper Cholesky factor U with Hinv = UᵀU.
std::vector<double> ref_hinv_upper(const std::vector<float>& H, int n, double damp) {
  std::vector<double> A(H.begin(), H.end());
  double mean = 0;
  for (int i = 0; i < n; ++i) mean += A[size_t(i) * n + i];
  mean /= n;
  for (int i = 0; i < n; ++i) A[size_t(i) * n + i] += damp * mean;
  const std::vector<double> L = ref_cholesky(A, n);
  std::vector<double> inv(size_t(n) * n);
  std::vector<double> y(n);
  for (int c = 0; c < n; ++c) {
    for (int i = 0; i < n; ++i) {  // L·y = e_c
      double s = (i == c) ? 1.0 : 0.0;
      for (int k = 0; k < i; ++k) s -= L[size_t(i) * n + k] * y[k];
      y[i] = s / L[size_t(i) * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {  // Lᵀ·x = y
      double s = y[i];
      for (int k = i + 1; k < n; ++k) s -= L[size_t(k) * n + i] * inv[size_t(k) * n + c];
      inv[size_t(i) * n + c] = s / L[size_t(i) * n + i];
    }
  }
  const std::vector<double> Li = ref_cholesky(inv, n);
  std::vector<double> U(size_t(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) U[size_t(i) * n + j] = Li[size_t(j) * n + i];
  return U;
}

TEST(CbGptq, ScalarGridReducesToTextbookGptq) {
  const int R = 16, C = 512;
  const Layer L = make_layer(R, C, 1024, 1, 2000);
  DenseBook int4;  // INT4 levels as a 1-dimensional table
  int4.n_sub = 1;
  int4.sub_dim = 1;
  int4.entries = {16};
  int4.t = {{}};
  for (int v = -8; v <= 7; ++v) int4.t[0].push_back(v);
  std::vector<double> s(R);  // fixed per-row scales
  for (int r = 0; r < R; ++r) {
    double amax = 0;
    for (int j = 0; j < C; ++j) amax = std::max(amax, std::fabs(double(L.W[size_t(r) * C + j])));
    s[r] = amax / 7.0;
  }
  auto f = inverse_cholesky_upper(L.H.data(), C, L.n_train, 0.1, 3);
  ASSERT_TRUE(f.ok()) << f.message();
  GptqCoreSpec spec;
  spec.rows = R;
  spec.cols = C;
  spec.block = 256;
  const GptqCoreResult got =
      gptq_core(L.W.data(), f->U.data(), int4, spec, [&](int b0, int b1, const double*, double* sc) {
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < b1 - b0; ++j) sc[size_t(r) * 256 + j] = s[r];
      });

  const std::vector<double> U = ref_hinv_upper(L.H, C, 0.1);
  double max_u = 0;
  for (size_t i = 0; i < U.size(); ++i) max_u = std::max(max_u, std::fabs(U[i] - f->U[i]));
  EXPECT_LT(max_u, 1e-9);
  std::vector<double> W(L.W.begin(), L.W.end());
  std::vector<double> Q(size_t(R) * C);
  for (int i = 0; i < C; ++i) {
    const double d = U[size_t(i) * C + i];
    for (int r = 0; r < R; ++r) {
      const double w = W[size_t(r) * C + i];
      const double qv = s[r] * std::clamp(std::round(w / s[r]), -8.0, 7.0);
      Q[size_t(r) * C + i] = qv;
      const double e = (w - qv) / d;
      for (int j = i + 1; j < C; ++j) W[size_t(r) * C + j] -= e * U[size_t(i) * C + j];
    }
  }
  int flips = 0;
  double max_dq = 0;
  for (size_t i = 0; i < Q.size(); ++i) {
    const double level = std::round(Q[i] / s[i / C]);
    if (int(got.sub_idx[i]) != int(level) + 8) ++flips;
    max_dq = std::max(max_dq, std::fabs(Q[i] - got.Q[i]));
  }
  // Tie flips (w/s exactly on a half level) would be documented differences; random data has none.
  EXPECT_EQ(flips, 0);
  EXPECT_LT(max_dq, 1e-9);
}

TEST(CbGptq, BeatsRtnOnHeldOutOutputMse) {
  const Layer& L = shared_layer();
  const gridbook::Codebook cb = book_for("NVFP4_CB_K16", 2);
  auto rtn = encode_fp4_rtn(cb, L.W.data(), L.R, L.C, L.q.data());
  ASSERT_TRUE(rtn.ok()) << rtn.message();
  auto g = encode_fp4_cb_gptq(cb, L.W.data(), L.R, L.C, L.H.data(), L.n_train, L.q.data());
  ASSERT_TRUE(g.ok()) << g.message();
  const double mse_rtn =
      holdout_output_mse(L.X_hold.data(), L.n_hold, L.W.data(), rtn->w_hat.data(), L.R, L.C);
  const double mse_g = holdout_output_mse(L.X_hold.data(), L.n_hold, L.W.data(), g->w_hat.data(), L.R, L.C);
  std::printf("NVFP4_CB_K16 held-out output-MSE: RTN %.6g, CB-GPTQ %.6g, ratio %.4f\n", mse_rtn, mse_g,
              mse_g / mse_rtn);
  EXPECT_LT(mse_g, 0.85 * mse_rtn);
  // Independent check of the MSE helper on one row.
  double direct = 0;
  for (int64_t t = 0; t < L.n_hold; ++t)
    for (int r = 0; r < L.R; ++r) {
      double y = 0;
      for (int j = 0; j < L.C; ++j)
        y += (double(g->w_hat[size_t(r) * L.C + j]) - L.W[size_t(r) * L.C + j]) *
             L.X_hold[size_t(t) * L.C + j];
      direct += y * y;
    }
  EXPECT_NEAR(mse_g, direct / (double(L.n_hold) * L.R), 1e-9 * mse_g);

  // The gate keeps CB-GPTQ here and returns exactly its encoding.
  GateOutcome o;
  auto gated = encode_fp4_gated(cb, L.W.data(), L.R, L.C, L.H.data(), L.n_train, L.q.data(), L.X_hold.data(),
                                L.n_hold, {}, &o);
  ASSERT_TRUE(gated.ok()) << gated.message();
  EXPECT_TRUE(o.kept_gptq);
  EXPECT_DOUBLE_EQ(o.mse_gptq, mse_g);
  EXPECT_DOUBLE_EQ(o.mse_nn, mse_rtn);
  EXPECT_EQ(*pack_fp4_v2(cb.rung, *gated), *pack_fp4_v2(cb.rung, *g));
}

TEST(CbGptq, GateFallsBackToNearestWhenFeedbackHurts) {
  // H from rows whose correlation structure differs from the held-out rows: feedback tuned to the wrong
  // statistics must not be kept if it loses on the held-out set. Whichever wins, the gate must pick it.
  const gridbook::Codebook cb = book_for("NVFP4_CB_K16", 2);
  const Layer A = make_layer(16, 256, 512, 1, 3000);
  testing::Correlated other(256, 4000);
  const std::vector<float> Xh = other.rows(256, 4001);
  GateOutcome o;
  auto gated =
      encode_fp4_gated(cb, A.W.data(), A.R, A.C, A.H.data(), A.n_train, A.q.data(), Xh.data(), 256, {}, &o);
  ASSERT_TRUE(gated.ok()) << gated.message();
  EXPECT_EQ(o.kept_gptq, o.mse_gptq <= o.mse_nn);
  const double kept = holdout_output_mse(Xh.data(), 256, A.W.data(), gated->w_hat.data(), A.R, A.C);
  EXPECT_DOUBLE_EQ(kept, std::min(o.mse_gptq, o.mse_nn));
}

void expect_decodes_exactly(const gridbook::Codebook& cb, const std::vector<uint8_t>& bytes, int R, int C,
                            const std::vector<float>& w_hat, const float* row_scale) {
  const int64_t rb = gridbook::row_bytes(cb.rung, C);
  ASSERT_EQ(bytes.size(), size_t(R) * rb);
  std::vector<uint16_t> out(C);
  int mismatches = 0;
  for (int r = 0; r < R; ++r) {
    gridbook::decode_row(cb.rung, cb, bytes.data() + r * rb, C, row_scale ? row_scale[r] : 0.0f, out.data());
    for (int j = 0; j < C; ++j)
      if (out[j] != f32_to_bf16(w_hat[size_t(r) * C + j])) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(CbGptq, PackDecodeReconstructsExactly) {
  const Layer& L = shared_layer();
  for (const char* name : {"NVFP4_CB_K16", "NVFP4_CB_K13"}) {
    const gridbook::Codebook cb = book_for(name, 2);
    auto g = encode_fp4_cb_gptq(cb, L.W.data(), L.R, L.C, L.H.data(), L.n_train, L.q.data());
    ASSERT_TRUE(g.ok()) << g.message();
    auto bytes = pack_fp4_v2(cb.rung, *g);
    ASSERT_TRUE(bytes.ok()) << bytes.message();
    ASSERT_TRUE(gridbook::check_scale_planes(cb.rung, *bytes, name).ok());
    expect_decodes_exactly(cb, *bytes, L.R, L.C, g->w_hat, nullptr);
    // Unpacked fields equal the encoder's.
    const int64_t rb = gridbook::row_bytes(cb.rung, L.C);
    for (int r = 0; r < L.R; r += 7)
      for (int b = 0; b < L.C / 256; ++b) {
        const uint8_t* sb = bytes->data() + r * rb + b * cb.rung.type_size();
        uint64_t codes[32];
        gridbook::unpack_codes(sb, cb.rung.k, codes);
        for (int c = 0; c < 32; ++c) EXPECT_EQ(codes[c], g->codes[(size_t(r) * (L.C / 256) + b) * 32 + c]);
        const gridbook::V2Plane p = gridbook::read_v2_plane(sb + 4 * cb.rung.k);
        EXPECT_EQ(p.E, g->planes[size_t(r) * (L.C / 256) + b].E);
        EXPECT_EQ(p.c, g->planes[size_t(r) * (L.C / 256) + b].c);
      }
  }
}

TEST(CbGptq, DeterministicAcrossRunsAndThreads) {
  const Layer& L = shared_layer();
  const gridbook::Codebook cb = book_for("NVFP4_CB_K16", 2);
  const int saved = omp_get_max_threads();
  std::vector<uint64_t> hashes;
  for (int threads : {1, 2, 2}) {
    omp_set_num_threads(threads);
    auto g = encode_fp4_cb_gptq(cb, L.W.data(), L.R, L.C, L.H.data(), L.n_train, L.q.data());
    ASSERT_TRUE(g.ok()) << g.message();
    hashes.push_back(testing::fnv1a(*pack_fp4_v2(cb.rung, *g)));
    auto rtn = encode_fp4_rtn(cb, L.W.data(), L.R, L.C, L.q.data());
    hashes.push_back(testing::fnv1a(*pack_fp4_v2(cb.rung, *rtn)));
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(hashes[0], hashes[2]);
  EXPECT_EQ(hashes[0], hashes[4]);
  EXPECT_EQ(hashes[1], hashes[3]);
  EXPECT_EQ(hashes[1], hashes[5]);
}

TEST(CbGptq, Fp8CbIdentityBeatsAndRoundTrips) {
  const Layer& L = shared_layer();
  const gridbook::Codebook cb = book_for("FP8_CB_K32", 1);
  const std::vector<float> ones(L.C, 1.0f);
  auto rtn1 = encode_fp8cb_rtn(cb, L.W.data(), L.R, L.C, ones.data());
  ASSERT_TRUE(rtn1.ok()) << rtn1.message();
  const std::vector<float> H = identity(L.C, 3.0f);
  auto id = encode_fp8cb_cb_gptq(cb, L.W.data(), L.R, L.C, H.data(), 10, ones.data());
  ASSERT_TRUE(id.ok()) << id.message();
  EXPECT_EQ(*pack_fp8cb(cb.rung, *id), *pack_fp8cb(cb.rung, *rtn1));
  EXPECT_EQ(id->row_scale, rtn1->row_scale);

  auto rtn = encode_fp8cb_rtn(cb, L.W.data(), L.R, L.C, L.q.data());
  auto g = encode_fp8cb_cb_gptq(cb, L.W.data(), L.R, L.C, L.H.data(), L.n_train, L.q.data());
  ASSERT_TRUE(rtn.ok() && g.ok());
  const double mse_rtn =
      holdout_output_mse(L.X_hold.data(), L.n_hold, L.W.data(), rtn->w_hat.data(), L.R, L.C);
  const double mse_g = holdout_output_mse(L.X_hold.data(), L.n_hold, L.W.data(), g->w_hat.data(), L.R, L.C);
  std::printf("FP8_CB_K32 held-out output-MSE: RTN %.6g, CB-GPTQ %.6g, ratio %.4f\n", mse_rtn, mse_g,
              mse_g / mse_rtn);
  EXPECT_LT(mse_g, 0.85 * mse_rtn);
  auto bytes = pack_fp8cb(cb.rung, *g);
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  expect_decodes_exactly(cb, *bytes, L.R, L.C, g->w_hat, g->row_scale.data());
}

TEST(CbGptq, RefusesBadInputs) {
  const gridbook::Codebook cb = book_for("NVFP4_CB_K16", 2);
  std::vector<float> W(8 * 200, 0.1f), q(200, 1.0f);
  EXPECT_FALSE(encode_fp4_rtn(cb, W.data(), 8, 200, q.data()).ok());  // in % 256 != 0
  std::vector<float> W2(8 * 256, 0.1f), q2(256, 1.0f);
  W2[5] = std::nanf("");
  EXPECT_FALSE(encode_fp4_rtn(cb, W2.data(), 8, 256, q2.data()).ok());
  W2[5] = 0.0f;
  q2[3] = -1.0f;
  EXPECT_FALSE(encode_fp4_rtn(cb, W2.data(), 8, 256, q2.data()).ok());
  q2[3] = 1.0f;
  std::vector<float> H = identity(256, 1.0f);
  H[0] = std::nanf("");
  EXPECT_FALSE(encode_fp4_cb_gptq(cb, W2.data(), 8, 256, H.data(), 5, q2.data()).ok());
  const gridbook::Codebook fp8 = book_for("FP8_CB_K32", 1);
  EXPECT_FALSE(encode_fp4_rtn(fp8, W2.data(), 8, 256, q2.data()).ok());  // wrong grid
}

// `quantize --device cuda` in a program without the CUDA backend fails with a message saying so, never a
// quiet CPU encode (the device encoder itself is checked byte for byte in tests/cuda/test_cb_gptq.cpp).
TEST(CbGptq, DeviceEncodeWithoutTheBackendIsRefused) {
  const gridbook::Codebook cb = book_for("NVFP4_CB_K16", 2);
  std::vector<float> W(8 * 256, 0.1f), q(256, 1.0f);
  auto r = encode_fp4_on_device(cb, W.data(), 8, 256, nullptr, 0, q.data(), CbGptqOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("without the CUDA backend"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace gridq::quant
