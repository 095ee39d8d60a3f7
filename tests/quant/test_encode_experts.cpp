// The routed experts' batch path of `quantize --device cuda` (quant/encode_experts.cpp) on a machine without
// a GPU: a fake runtime::CudaBackendHooks::cb_fp4_batch answers every request with the CPU encoders'
// candidates (what the device must return; tests/cuda/test_encode_experts.cpp holds the real one to that), so
// the grouping by rung and role, the cut into batches of 32 experts, gate and up sharing their expert's
// input, the candidates' MSEs and the output proxies reaching the right tensors are checked here: every
// tensor's bytes, Ŵ and record equal the CPU path's, one tensor at a time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "model/loader.h"
#include "pipeline_test_util.h"
#include "quant/cb_gptq.h"
#include "quant/cb_refine.h"
#include "quant/lattice_codebook.h"
#include "quant/output_proxy.h"
#include "quant/pipeline.h"
#include "quant_test_util.h"
#include "runtime/device.h"

namespace gridq::quant {
namespace {

namespace fs = std::filesystem;
using gridq::testing::repo_path;

using testing::plane_bytes;
using testing::split_codes;

// The device batch, computed by the CPU encoders of `cb` (K16).
class CpuBatch final : public runtime::DeviceCbBatch {
 public:
  CpuBatch(const runtime::CbFp4BatchRequest& r, const gridbook::Codebook& cb) : r_(r) {
    const DenseBook book = DenseBook::from(cb);
    const CbGptqOptions opt = testing::options_of(r.s);
    for (size_t m = 0; m < r.W.size(); ++m) {
      const int h = r.h_of[m];
      const float* W = r.W[m];
      runtime::CbFp4BatchMatrix x;
      auto mse = [&](const Fp4CbEncoding& e) {
        return holdout_output_mse(r.hold[h], r.n_hold[h], W, e.w_hat.data(), r.R, r.C);
      };
      std::array<std::vector<float>, 3> hat;
      if (r.gptq) {
        Fp4CbEncoding g = *encode_fp4_cb_gptq(cb, W, r.R, r.C, r.H[h], r.n_tokens[h], r.q[h], opt);
        x.enc = testing::reply_of(book, g);
        x.mse_gptq = mse(g), hat[0] = g.w_hat;
        if (r.s.refine_passes > 0 && !g.used_identity) {
          RefineOptions ro;
          ro.passes = r.s.refine_passes, ro.scales = r.s.refine_scales, ro.damp = g.damp_used;
          const RefineResult rr = *refine_fp4(cb, W, r.H[h], r.R, r.C, ro, g);
          x.enc.refined = true;
          x.enc.refined_sub_idx = split_codes(book, g), x.enc.refined_planes = plane_bytes(g);
          x.enc.f_before = rr.f_before, x.enc.f_after = rr.f_after, x.enc.rounds = rr.rounds;
          x.enc.codes_changed = rr.codes_changed, x.enc.scales_changed = rr.scales_changed;
          x.mse_refined = mse(g), hat[1] = g.w_hat;
        }
      }
      if (r.rtn || !r.gptq) {
        Fp4CbEncoding n = *encode_fp4_rtn(cb, W, r.R, r.C, r.q[h], opt.two_tier);
        x.rtn_sub_idx = split_codes(book, n), x.rtn_planes = plane_bytes(n);
        x.mse_rtn = mse(n), hat[2] = n.w_hat;
      }
      out_.push_back(std::move(x));
      hat_.push_back(std::move(hat));
    }
  }
  const std::vector<runtime::CbFp4BatchMatrix>& matrices() const override { return out_; }
  Expected<std::vector<double>> half_traces(const std::vector<int>& which) override {
    std::vector<double> t(which.size(), 0.0);
    for (size_t m = 0; m < which.size(); ++m) {
      if (which[m] < 0) continue;
      GRIDQ_ASSIGN_OR_RETURN(t[m], output_half_trace(r_.W[m], hat_[m][size_t(which[m])].data(), r_.R, r_.C,
                                                     r_.H[size_t(r_.h_of[m])]));
    }
    ++calls;
    return t;
  }
  static inline int calls = 0;

 private:
  runtime::CbFp4BatchRequest r_;
  std::vector<runtime::CbFp4BatchMatrix> out_;
  std::vector<std::array<std::vector<float>, 3>> hat_;
};

TEST(EncodeExperts, BatchPathMatchesTheCpuPath) {
  const std::string src =
      (fs::temp_directory_path() / ("gridq_enc_experts_" + std::to_string(::getpid()))).string();
  testing::TinyLaguna o;
  o.experts = 6;  // batches of 4 experts (below): 4, then 2
  o.top_k = 2;
  testing::write_tiny_laguna(src, o);
  const auto wide = testing::synthetic_stats("wide", o.hidden, 400, 24, 11);
  const auto narrow = testing::synthetic_stats("narrow", o.moe_inter, 400, 24, 12);
  LayerCapture cap = testing::synthetic_capture(o, 1, wide, narrow, /*cold_expert=*/3);
  cap.expert_in[5] = testing::synthetic_stats("layers.1.experts.5.in", o.hidden, 300, 0, 21);  // no holdout
  cap.expert_down_in[4] = testing::synthetic_stats("layers.1.experts.4.down_in", o.moe_inter, 12, 20, 22);
  auto recipe = load_recipe("laguna", repo_path(""));
  auto model = model::load_model(src);
  ASSERT_TRUE(recipe.ok() && model.ok());
  recipe->cb_gptq.refine_passes = 1;  // the refinement still runs (and is chosen or not); 8 passes cost time
  const char* method = gridq::testing::kSanitized ? "rtn" : "";  // CB-GPTQ on the CPU is slow under ASan
  std::vector<SourceTensor> st;
  for (const std::string& n : model->checkpoint->names()) {
    const io::TensorInfo* t = model->checkpoint->find(n);
    st.push_back({n, std::string(io::dtype_name(t->dtype)), t->shape});
  }
  auto plan = make_plan(*recipe, st, true);
  ASSERT_TRUE(plan.ok()) << plan.message();
  const gridbook::Codebook k16 = *lattice_codebook(*gridbook::parse_rung_name("NVFP4_CB_K16", 2));
  const std::map<std::string, gridbook::Codebook> books = {{"NVFP4_CB_K16", k16}};
  std::vector<std::string> reported;  // on_tensor: batch labels, and tensors encoded after the batches
  auto encode = [&](const std::string& device) {
    QuantizeOptions qo;
    qo.device = device;
    qo.method = method;
    auto tasks = resolve_tasks(*recipe, *plan, *model, qo);
    EXPECT_TRUE(tasks.ok()) << tasks.message();
    for (TensorTask& t : *tasks) t.params.device_batch_experts = 4;
    reported.clear();
    auto e = encode_layer_tensors(*tasks, 1, &cap, *model->checkpoint, books,
                                  [&](const std::string& what) { reported.push_back(what); });
    EXPECT_TRUE(e.ok()) << e.message();
    return e.ok() ? std::move(*e) : std::vector<EncodedTensor>{};
  };
  const auto cpu = encode("cpu");
  int batches = 0;
  std::vector<EncodedTensor> dev;
  {
    testing::FakeCudaHooks fake;
    fake.h.cb_fp4_batch =
        [&](const runtime::CbFp4BatchRequest& r) -> Expected<std::unique_ptr<runtime::DeviceCbBatch>> {
      ++batches;
      EXPECT_LE(r.q.size(), 4u);  // at most 4 experts' inputs a batch
      return std::unique_ptr<runtime::DeviceCbBatch>(new CpuBatch(r, k16));
    };
    fake.h.half_trace = [](const float* W, const float* Wh, int R, int C, const float* H) {
      return output_half_trace(W, Wh, R, C, H);
    };
    fake.install();
    dev = encode("cuda");
  }
  // The layer's other tensors (attention, shared expert, norms) were encoded beside the batches, not after
  // them: only the batches were reported.
  EXPECT_EQ(reported.size(), 4u);
  for (const std::string& what : reported) EXPECT_NE(what.find("experts"), std::string::npos) << what;
  EXPECT_EQ(batches, 4);          // gate/up and down, each in a batch of 4 experts and one of 2
  EXPECT_EQ(CpuBatch::calls, 4);  // one call for the kept candidates' output proxies per batch
  ASSERT_EQ(cpu.size(), dev.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].stats.tensor, dev[i].stats.tensor);
    EXPECT_TRUE(cpu[i].data == dev[i].data) << cpu[i].stats.tensor;
    EXPECT_TRUE(cpu[i].w_hat == dev[i].w_hat) << cpu[i].stats.tensor;
    EXPECT_EQ(cpu[i].stats.to_json().dump(), dev[i].stats.to_json().dump()) << cpu[i].stats.tensor;
  }
  fs::remove_all(src);
}

}  // namespace
}  // namespace gridq::quant
