// A layer's routed experts encoded in device batches (quant/encode_experts.cpp through
// runtime::CudaBackendHooks::cb_fp4_batch) against the CPU encoders one matrix at a time: every tensor's
// bytes, decoded weights and record (gate outcome, holdout MSEs, refinement, damping, output proxy) must be
// the same, for CB-GPTQ with the holdout gate and the refinement (the laguna recipe) and for RTN, over more
// experts than one batch holds, with a cold expert, an expert without holdout rows and experts whose
// inputs differ. Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../quant/pipeline_test_util.h"
#include "cuda_test_util.h"
#include "model/loader.h"
#include "quant/lattice_codebook.h"
#include "quant/pipeline.h"
#include "runtime/cuda/register.h"

namespace gridq::cuda::test {
namespace {

namespace fs = std::filesystem;
using gridq::testing::repo_path;
using quant::testing::TinyLaguna;

// Layer 1's encodings of the recipe's tasks with the encoders on `device` ("cpu" or "cuda").
std::vector<quant::EncodedTensor> encode_layer(const std::string& src, const quant::LayerCapture& cap,
                                               const std::string& method, const std::string& device) {
  auto recipe = quant::load_recipe("laguna", repo_path(""));
  auto model = model::load_model(src);
  EXPECT_TRUE(recipe.ok() && model.ok());
  std::vector<quant::SourceTensor> st;
  for (const std::string& n : model->checkpoint->names()) {
    const io::TensorInfo* t = model->checkpoint->find(n);
    st.push_back({n, std::string(io::dtype_name(t->dtype)), t->shape});
  }
  auto plan = quant::make_plan(*recipe, st, true);
  EXPECT_TRUE(plan.ok()) << plan.message();
  quant::QuantizeOptions qo;
  qo.method = method;
  qo.device = device;
  auto tasks = quant::resolve_tasks(*recipe, *plan, *model, qo);
  EXPECT_TRUE(tasks.ok()) << tasks.message();
  std::map<std::string, gridbook::Codebook> books;
  for (const quant::TensorTask& t : *tasks) {
    if (!quant::is_cb_format(t.format) || books.count(t.format)) continue;
    books.emplace(t.format, *quant::lattice_codebook(*gridbook::parse_rung_name(t.format, 2)));
  }
  auto encs = quant::encode_layer_tensors(*tasks, 1, &cap, *model->checkpoint, books);
  EXPECT_TRUE(encs.ok()) << encs.message();
  return encs.ok() ? std::move(*encs) : std::vector<quant::EncodedTensor>{};
}

TEST(CudaEncodeExperts, SameBytesAndRecordsAsTheCpu) {
  REQUIRE_GPU();
  register_backend();
  const std::string src =
      (fs::temp_directory_path() / ("gridq_encode_experts_" + std::to_string(::getpid()))).string();
  TinyLaguna o;
  o.experts = 36;  // past one device batch of 32 experts
  o.top_k = 2;
  quant::testing::write_tiny_laguna(src, o);
  const auto wide = quant::testing::synthetic_stats("wide", o.hidden, 400, 48, 11);
  const auto narrow = quant::testing::synthetic_stats("narrow", o.moe_inter, 400, 48, 12);
  quant::LayerCapture cap = quant::testing::synthetic_capture(o, 1, wide, narrow, /*cold_expert=*/3);
  // Inputs that differ between experts, one without holdout rows, one with few tokens (rank-deficient H).
  cap.expert_in[5] = quant::testing::synthetic_stats("layers.1.experts.5.in", o.hidden, 300, 0, 21);
  cap.expert_down_in[7] =
      quant::testing::synthetic_stats("layers.1.experts.7.down_in", o.moe_inter, 500, 20, 22);
  cap.expert_in[33] = quant::testing::synthetic_stats("layers.1.experts.33.in", o.hidden, 90, 17, 23);
  for (const char* method : {"", "rtn"}) {
    const auto cpu = encode_layer(src, cap, method, "cpu");
    const auto gpu = encode_layer(src, cap, method, "cuda");
    ASSERT_EQ(cpu.size(), gpu.size());
    int experts = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      const auto& a = cpu[i];
      const auto& b = gpu[i];
      ASSERT_EQ(a.stats.tensor, b.stats.tensor);
      experts += a.stats.tensor.find(".experts.") != std::string::npos &&
                         a.stats.tensor.find("_proj.") != std::string::npos
                     ? 1
                     : 0;
      EXPECT_EQ(a.format, b.format) << a.stats.tensor;
      EXPECT_TRUE(a.data == b.data) << method << " " << a.stats.tensor << ": stored bytes differ";
      EXPECT_TRUE(a.w_hat == b.w_hat) << method << " " << a.stats.tensor << ": decoded weights differ";
      EXPECT_EQ(a.stats.to_json().dump(), b.stats.to_json().dump()) << method << " " << a.stats.tensor;
    }
    EXPECT_EQ(experts, 3 * o.experts) << method;
  }
  fs::remove_all(src);
}

}  // namespace
}  // namespace gridq::cuda::test
