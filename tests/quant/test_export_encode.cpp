// encode_tensor (S5 for one Linear): every format against an independent reference — BF16 is the source bytes
// (F32 stays F32), RTN equals the encoder library called directly, the holdout gate keeps the better of the
// two by a recomputed output-MSE, a cold input degenerates to nearest-neighbour bytes, ½·tr(ΔW H ΔWᵀ) matches
// a plain float64 sum, and malformed inputs are refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "pipeline_test_util.h"
#include "quant/cb_gptq.h"
#include "quant/cb_gptq_device.h"
#include "quant/cb_refine.h"
#include "quant/encode_tensor.h"
#include "quant/lattice_codebook.h"
#include "quant/output_proxy.h"

namespace gridq::quant {
namespace {

using Src = testing::Bf16Src;

gridbook::Codebook book(const char* rung) { return *lattice_codebook(*gridbook::parse_rung_name(rung, 2)); }

TEST(EncodeTensor, Bf16IsACopyOfTheSourceBytes) {
  std::vector<float> bias = {0.5f, -1.25f, 3.0f};
  std::vector<uint8_t> b(bias.size() * 4);
  std::memcpy(b.data(), bias.data(), b.size());
  SourceWeight sw{"model.layers.1.mlp.experts.e_score_correction_bias", io::DType::F32, {3}, b};
  auto e = encode_tensor(sw, nullptr, EncodeParams{"BF16", "cb_gptq", {}, {}}, nullptr);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(e->dtype, io::DType::F32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(e->data, b);
  EXPECT_EQ(e->stats.encoder, "copy");
}

TEST(EncodeTensor, RtnEqualsTheEncoderLibrary) {
  Src s("w", 32, 512, 21);
  const InputStats in = testing::synthetic_stats("x", 512, 256, 32, 4);
  const gridbook::Codebook cb = book("NVFP4_CB_K16");
  auto e = encode_tensor(s.sw, &in, EncodeParams{"NVFP4_CB_K16", "rtn", {}, {}}, &cb);
  ASSERT_TRUE(e.ok()) << e.message();
  auto ref = encode_fp4_rtn(cb, s.W.data(), 32, 512, in.imatrix.data());
  ASSERT_TRUE(ref.ok());
  auto packed = pack_fp4_v2(cb.rung, *ref);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(e->data, *packed);
  EXPECT_EQ(e->w_hat, ref->w_hat);
  EXPECT_EQ(e->stats.gate, "rtn");
  ASSERT_TRUE(e->stats.mse_nn.has_value());
  EXPECT_DOUBLE_EQ(*e->stats.mse_nn,
                   holdout_output_mse(in.holdout.data(), in.n_hold, s.W.data(), ref->w_hat.data(), 32, 512));
  // ½·tr(ΔW H ΔWᵀ) by a plain float64 triple loop.
  double half = 0.0;
  for (int r = 0; r < 32; ++r)
    for (int i = 0; i < 512; ++i)
      for (int j = 0; j < 512; ++j) {
        const double di = double(ref->w_hat[size_t(r) * 512 + i]) - s.W[size_t(r) * 512 + i];
        const double dj = double(ref->w_hat[size_t(r) * 512 + j]) - s.W[size_t(r) * 512 + j];
        half += 0.5 * di * double(in.H[size_t(i) * 512 + j]) * dj;
      }
  EXPECT_NEAR(e->stats.half_trace, half, 1e-9 * std::abs(half) + 1e-12);
}

TEST(EncodeTensor, GateKeepsTheBetterEncodingOnHoldout) {
  Src s("w", 32, 512, 22);
  const InputStats in = testing::synthetic_stats("x", 512, 384, 64, 5);
  const gridbook::Codebook cb = book("NVFP4_CB_K12");
  auto e = encode_tensor(s.sw, &in, EncodeParams{"NVFP4_CB_K12", "cb_gptq", {}, {}}, &cb);
  ASSERT_TRUE(e.ok()) << e.message();
  ASSERT_TRUE(e->stats.mse_gptq && e->stats.mse_nn);
  const double chosen =
      holdout_output_mse(in.holdout.data(), in.n_hold, s.W.data(), e->w_hat.data(), 32, 512);
  EXPECT_DOUBLE_EQ(chosen, std::min(*e->stats.mse_gptq, *e->stats.mse_nn));
  EXPECT_EQ(e->stats.gate, *e->stats.mse_gptq <= *e->stats.mse_nn ? "kept_gptq" : "kept_nn");
  EXPECT_EQ(e->stats.n, 384);
  EXPECT_FALSE(e->stats.cold);
  EXPECT_EQ(e->data.size(), size_t(32) * 2 * cb.rung.type_size());
}

TEST(EncodeTensor, ColdInputGivesNearestNeighbourBytes) {
  Src s("w", 16, 256, 23);
  const InputStats cold = testing::cold_stats("x", 256);
  const gridbook::Codebook cb = book("NVFP4_CB_K16");
  auto g = encode_tensor(s.sw, &cold, EncodeParams{"NVFP4_CB_K16", "cb_gptq", {}, {}}, &cb);
  auto r = encode_tensor(s.sw, &cold, EncodeParams{"NVFP4_CB_K16", "rtn", {}, {}}, &cb);
  ASSERT_TRUE(g.ok() && r.ok());
  EXPECT_TRUE(g->stats.cold);
  EXPECT_EQ(g->stats.gate, "ungated");  // no holdout rows
  EXPECT_EQ(g->data, r->data);
}

TEST(EncodeTensor, Fp8CbAndFp8DynamicCarryRowScales) {
  Src s("w", 16, 256, 24);
  const InputStats in = testing::synthetic_stats("x", 256, 300, 16, 6);
  const gridbook::Codebook cb = book("FP8_CB_K32");
  auto c = encode_tensor(s.sw, &in, EncodeParams{"FP8_CB_K32", "cb_gptq", {}, {}}, &cb);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->scale.size(), 16u);
  EXPECT_EQ(c->data.size(), size_t(16) * 128);
  auto f = encode_tensor(s.sw, &in, EncodeParams{"FP8_DYNAMIC", "cb_gptq", {}, {}}, nullptr);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->dtype, io::DType::F8_E4M3);
  EXPECT_EQ(f->data.size(), size_t(16) * 256);
  EXPECT_TRUE(f->stats.gate == "kept_gptq" || f->stats.gate == "kept_nn");
}

TEST(EncodeTensor, RefusesMalformedInputs) {
  Src s("model.layers.0.self_attn.q_proj.weight", 16, 256, 25);
  const InputStats wrong = testing::synthetic_stats("layers.0.attn_in", 512, 64, 0, 7);
  auto e = encode_tensor(s.sw, &wrong, EncodeParams{"FP8_DYNAMIC", "rtn", {}, {}}, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("wrong capture"), std::string::npos) << e.message();
  auto n = encode_tensor(s.sw, nullptr, EncodeParams{"FP8_DYNAMIC", "rtn", {}, {}}, nullptr);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.message().find("q_proj"), std::string::npos) << n.message();
  const InputStats ok = testing::synthetic_stats("x", 256, 64, 0, 8);
  auto u = encode_tensor(s.sw, &ok, EncodeParams{"INT4", "rtn", {}, {}}, nullptr);
  EXPECT_FALSE(u.ok());
  const gridbook::Codebook v1 = *lattice_codebook(*gridbook::parse_rung_name("NVFP4_CB_K16", 1));
  auto e1 = encode_tensor(s.sw, &ok, EncodeParams{"NVFP4_CB_K16", "rtn", {}, {}}, &v1);
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.message().find("v1"), std::string::npos) << e1.message();
}

}  // namespace
}  // namespace gridq::quant

namespace gridq::quant {
namespace {

// The device batch's candidates (cb_gptq_device.h), made here by the CPU encoders with the numbers the
// device computes for them (holdout MSEs, refinement): encode_tensor with `pre` must choose and record
// exactly what it does without it, leaving only the output proxy to the caller. Covers the choice logic of
// `quantize --device cuda`'s expert batches on machines without a GPU (tests/cuda/test_encode_experts.cpp
// holds the device's numbers to the CPU's).
TEST(EncodeTensor, DeviceCandidatesGiveTheSameChoicesAndRecords) {
  const int R = 16, C = 512;
  const gridbook::Codebook cb = book("NVFP4_CB_K16");
  std::set<std::string> gates;
  for (const char* encoder : {"cb_gptq", "rtn"})
    for (int64_t n_hold : {int64_t{0}, int64_t{40}})
      for (uint64_t seed : {31u, 32u}) {
        Src s("w", R, C, seed);
        // 1500 rows, and 12 (a rank-deficient H: CB-GPTQ fits the calibration rows and can lose on held-out
        // ones).
        const InputStats in = testing::synthetic_stats("x", C, seed == 31u ? 1500 : 12, n_hold, seed + 7);
        EncodeParams p{"NVFP4_CB_K16", encoder, {}, {}};
        p.cb_gptq.refine_passes = 2;
        p.cb_gptq.refine_scales = true;
        auto want = encode_tensor(s.sw, &in, p, &cb);
        ASSERT_TRUE(want.ok()) << want.message();
        const float* W = s.W.data();
        auto tag = [&](Fp4CbEncoding e, int which) {
          e.candidate = which;
          if (n_hold > 0)
            e.holdout_mse = holdout_output_mse(in.holdout.data(), n_hold, W, e.w_hat.data(), R, C);
          return e;
        };
        DeviceFp4Candidates pre;
        CbGptqOptions opt;
        auto rtn = encode_fp4_rtn(cb, W, R, C, in.imatrix.data(), opt.two_tier);
        ASSERT_TRUE(rtn.ok());
        pre.rtn = tag(*rtn, 2);
        if (std::string(encoder) == "cb_gptq") {
          auto g = encode_fp4_cb_gptq(cb, W, R, C, in.H.data(), in.n, in.imatrix.data(), opt);
          ASSERT_TRUE(g.ok());
          Fp4CbEncoding r = *g;
          RefineOptions ro;
          ro.passes = 2;
          ro.scales = true;
          ro.damp = g->damp_used;
          auto rr = refine_fp4(cb, W, in.H.data(), R, C, ro, r);
          ASSERT_TRUE(rr.ok());
          pre.gptq = tag(*g, 0);
          pre.refined.ran = true;
          pre.refined.enc = tag(r, 1);
          pre.refined.result = *rr;
        }
        auto got = encode_tensor(s.sw, &in, p, &cb, nullptr, &pre);
        ASSERT_TRUE(got.ok()) << got.message();
        EXPECT_GE(got->device_candidate, 0);
        auto half = output_half_trace(W, got->w_hat.data(), R, C, in.H.data());
        ASSERT_TRUE(half.ok());
        got->stats.half_trace = *half;
        EXPECT_EQ(got->data, want->data) << encoder << " " << n_hold << " " << seed;
        EXPECT_EQ(got->w_hat, want->w_hat);
        EXPECT_EQ(got->stats.to_json().dump(), want->stats.to_json().dump()) << encoder << " " << n_hold;
        gates.insert(want->stats.gate);
      }
  // Both sides of the holdout gate were taken, and both of the refinement's (kept or not) where it ran.
  EXPECT_TRUE(gates.count("kept_gptq") && gates.count("kept_nn") && gates.count("ungated") &&
              gates.count("rtn"))
      << fmt::format("{}", fmt::join(gates, ", "));
}

}  // namespace
}  // namespace gridq::quant
