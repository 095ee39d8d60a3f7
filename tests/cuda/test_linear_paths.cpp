// Every device path of a Linear (tiled kernels, the reference matvec) against the CPU reference's matmul on
// the same BF16 inputs, for the matrices the loaders really produce: the bundled BF16 model (incl. the
// 12-row router and 4/6-row g_proj), synthetic artifacts of every NVFP4-CB rung path, and the artifacts named
// by GRIDQ_TEST_ARTIFACTS (FP8 W8A8, FP8-CB). The inputs after the contract are the same on both sides, so
// only the summation order differs (FP8 W8A8 also rounds its output to BF16). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "../gridbook/synthetic_artifact.h"
#include "../runtime/parity_util.h"
#include "cuda_test_util.h"
#include "engine_test_util.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cuda/linear.h"

namespace gridq::cuda::test {
namespace {

using runtime::QMatrix;
using testing::repo_path;

void check_matrix(const QMatrix& m, const std::string& what, Rng& r) {
  constexpr int T = 5;
  std::vector<uint16_t> x(static_cast<size_t>(T * m.cols));
  for (auto& v : x) v = r.bf16(2.0f);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_f32(x[i]);
  std::vector<float> ref(static_cast<size_t>(T * m.rows));
  runtime::cpu::matmul(m, xf.data(), T, ref.data());
  auto dx = DeviceBuffer::alloc(x.size() * 2, "x");
  auto xin = DeviceBuffer::alloc(x.size() * 2, "xin");
  auto xq = DeviceBuffer::alloc(x.size(), "xq");
  auto xs = DeviceBuffer::alloc(T * 4, "xs");
  auto ws = WorkspaceBuffers::create();
  ASSERT_TRUE(dx.ok() && xin.ok() && xq.ok() && xs.ok() && ws.ok());
  ASSERT_TRUE(dx->upload(x.data(), x.size() * 2).ok());
  for (bool tiled : {true, false}) {
    auto L = upload_linear({&m}, what, tiled);
    ASSERT_TRUE(L.ok()) << what << ": " << L.message();
    if (tiled && L->path != DevLinear::Path::kTiled) continue;
    const int ld = L->out_rows();
    auto dy = DeviceBuffer::alloc(static_cast<size_t>(T) * ld * 4, "y");
    ASSERT_TRUE(dy.ok());
    ASSERT_TRUE(apply_linear(*L, dx->as<uint16_t>(), T, dy->as<float>(),
                             {xin->as<uint16_t>(), xq->as<uint8_t>(), xs->as<float>()}, ws->ws, nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    std::vector<float> y(static_cast<size_t>(T) * ld);
    ASSERT_TRUE(dy->download(y.data(), y.size() * 4).ok());
    {  // res += L(x) (fused into the epilogue when the rows are unpadded): exactly res + y, element by element
      const int H = static_cast<int>(m.rows);
      std::vector<float> res(static_cast<size_t>(T) * H);
      for (auto& v : res) v = bf16_to_f32(r.bf16(4.0f)) * 1.3f;
      auto dres = DeviceBuffer::alloc(res.size() * 4, "res");
      auto dy2 = DeviceBuffer::alloc(static_cast<size_t>(T) * ld * 4, "y2");
      ASSERT_TRUE(dres.ok() && dy2.ok() && dres->upload(res.data(), res.size() * 4).ok());
      ASSERT_TRUE(apply_linear_residual(*L, dx->as<uint16_t>(), T, dres->as<float>(), H, dy2->as<float>(),
                                        {xin->as<uint16_t>(), xq->as<uint8_t>(), xs->as<float>()}, ws->ws, nullptr)
                      .ok());
      std::vector<float> got(res.size());
      ASSERT_TRUE(dres->download(got.data(), got.size() * 4).ok());
      int64_t differ = 0;
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < H; ++c) {
          const float want = res[static_cast<size_t>(t) * H + c] + y[static_cast<size_t>(t) * ld + c];
          differ += std::memcmp(&want, &got[static_cast<size_t>(t) * H + c], 4) != 0;
        }
      EXPECT_EQ(differ, 0) << what << " via " << L->kernel << ": residual add (fused: " << (ld == H) << ")";
    }
    double worst = 0.0;
    for (int t = 0; t < T; ++t) {
      double scale = 1e-30;
      for (int64_t c = 0; c < m.rows; ++c) scale = std::max(scale, std::abs(double(ref[t * m.rows + c])));
      for (int64_t c = 0; c < m.rows; ++c)
        worst = std::max(worst, std::abs(double(y[t * ld + c]) - ref[t * m.rows + c]) / scale);
    }
    // FP8 W8A8 rounds y to BF16 on both sides: a different FP32 sum may round to the neighbouring value.
    const double tol = m.format == runtime::WeightFormat::kFP8 ? 8e-3 : 2e-5;
    std::printf("[linear] %-44s %-26s [%5lld, %5lld] max err / row max %.2e\n", what.c_str(),
                L->kernel.c_str(), static_cast<long long>(m.rows), static_cast<long long>(m.cols), worst);
    EXPECT_LE(worst, tol) << what << " via " << L->kernel;
  }
}

void check_model(const std::string& dir, Rng& r) {
  auto b = open_both(dir, true, 1);  // loads the host weights the way the engines do
  ASSERT_TRUE(b.ok()) << b.message();
  auto am = std::filesystem::exists(std::filesystem::path(dir) / "quant_config.json")
                ? runtime::load_artifact_model(dir)
                : Expected<std::shared_ptr<runtime::ArtifactModel>>(err("hf"));
  model::ModelSpec spec;
  runtime::ModelWeights w;
  std::shared_ptr<void> keep;
  if (am.ok()) {
    spec = (*am)->spec, w = (*am)->weights, keep = *am;
  } else {
    auto lm = model::load_model(dir);
    ASSERT_TRUE(lm.ok());
    auto ww = runtime::build_model_weights(lm->spec, lm->weights);
    ASSERT_TRUE(ww.ok());
    spec = lm->spec, w = *ww, keep = std::shared_ptr<void>(std::move(lm->checkpoint));
  }
  const std::string name = std::filesystem::path(dir).filename().string();
  for (int l = 0; l < spec.n_layers && !::testing::Test::HasFatalFailure(); ++l) {
    const auto& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = name + " L" + std::to_string(l) + " ";
    if (l <= 1) {
      check_matrix(lw.q, p + "q_proj", r);
      if (lw.g.rows) check_matrix(lw.g, p + "g_proj", r);
      check_matrix(lw.o, p + "o_proj", r);
    }
    if (spec.layers[static_cast<size_t>(l)].mlp == model::MlpKind::kMoe) {
      if (l == 1) check_matrix(lw.router, p + "router", r);
      check_matrix(lw.expert_gate[0], p + "expert 0 gate", r);
      check_matrix(lw.expert_down[0], p + "expert 0 down", r);
      if (lw.shared_gate.rows && l == 1) check_matrix(lw.shared_down, p + "shared down", r);
    } else {
      check_matrix(lw.mlp_down, p + "dense down", r);
    }
  }
  check_matrix(w.lm_head, name + " lm_head", r);
}

TEST(CudaLinear, BundledModelMatricesMatchCpu) {
  REQUIRE_GPU();
  Rng r(3);
  check_model(repo_path("models/laguna-tiny-code"), r);
}

TEST(CudaLinear, SyntheticCbRungsMatchCpu) {
  REQUIRE_GPU();
  Rng r(4);
  const auto dir = std::filesystem::temp_directory_path() / ("gridq-linear-" + std::to_string(::getpid()));
  testing::SyntheticOptions o;
  o.layers = 6;
  o.expert_k = {16, 12, 13, 20, 24};
  auto art = testing::make_synthetic_artifact(o);
  ASSERT_TRUE(art.write(dir.string()).ok());
  check_model(dir.string(), r);
  std::filesystem::remove_all(dir);
}

TEST(CudaLinear, RecipeArtifactMatricesMatchCpu) {
  REQUIRE_GPU();
  const char* env = std::getenv("GRIDQ_TEST_ARTIFACTS");
  if (!env || !*env) GTEST_SKIP() << "GRIDQ_TEST_ARTIFACTS not set";
  Rng r(5);
  std::stringstream ss(env);
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty()) check_model(dir, r);
}

}  // namespace
}  // namespace gridq::cuda::test
