// The bundled laguna-tiny-code checkpoint opens through the sharded-index path with the counts stated in
// models/README.md (an independent source: written when the model was trained).
#include <gtest/gtest.h>

#include "io/checkpoint.h"

namespace gridq::io {
namespace {

TEST(CheckpointModel, BundledLagunaTinyCodeOpens) {
  auto ck = Checkpoint::open(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code");
  ASSERT_TRUE(ck.ok()) << ck.message();
  const Checkpoint& c = **ck;
  EXPECT_EQ(c.files().size(), 4u);
  EXPECT_EQ(c.names().size(), 165u);
  int64_t params = 0;
  for (const auto& n : c.names()) {
    const TensorInfo* t = c.find(n);
    ASSERT_NE(t, nullptr) << n;
    EXPECT_EQ(t->dtype, DType::BF16) << n;
    params += t->numel();
  }
  EXPECT_EQ(params, 24806948);
  EXPECT_EQ(c.total_tensor_bytes(), 49613896u);
  EXPECT_EQ(c.config().value("model_type", ""), "laguna");
  const TensorInfo* emb = c.find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{4096, 512}));
  EXPECT_EQ(c.find("no.such.tensor"), nullptr);
}

TEST(CheckpointModel, FixtureOpensAsSingleFile) {
  auto f = SafetensorsFile::open(std::string(GRIDQ_SOURCE_DIR) +
                                 "/tests/fixtures/laguna-tiny-code.hf-logits.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  const TensorInfo* ids = (*f)->find("input_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::I32);
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{2, 160}));
}

}  // namespace
}  // namespace gridq::io
