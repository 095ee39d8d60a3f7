// Artifact reader end to end on the synthetic artifact (synthetic_artifact.h) and on the bundled
// laguna-tiny-code checkpoint, plus every refusal of format.md §15 by mutating one piece at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gridbook/artifact.h"
#include "gridbook/sidecar.h"
#include "io/pins.h"
#include "synthetic_artifact.h"

namespace gridq::gridbook {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::SyntheticArtifact;
using testing::SyntheticOptions;

std::string temp_dir(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::temp_directory_path() / fmt::format("gridq_artifact_{}_{}_{}_{}", ::getpid(),
                                                       info->test_suite_name(), info->name(), tag);
  fs::remove_all(p);
  return p.string();
}

std::unique_ptr<Artifact> open_ok(const SyntheticArtifact& a, const std::string& tag = "ok") {
  const std::string dir = temp_dir(tag);
  Status st = a.write(dir);
  EXPECT_TRUE(st.ok()) << st.message();
  auto r = Artifact::open(dir);
  EXPECT_TRUE(r.ok()) << r.message();
  fs::remove_all(dir);
  return r.ok() ? std::move(*r) : nullptr;
}

// Writes the mutated artifact and expects open() to refuse with every needle in the message.
void expect_refused(const SyntheticArtifact& a, std::initializer_list<std::string_view> needles) {
  const std::string dir = temp_dir("bad");
  Status st = a.write(dir);
  ASSERT_TRUE(st.ok()) << st.message();
  auto r = Artifact::open(dir);
  fs::remove_all(dir);
  ASSERT_FALSE(r.ok()) << "artifact was accepted";
  if (std::getenv("GRIDQ_TEST_VERBOSE")) std::printf("refused: %s\n", r.message().c_str());
  for (std::string_view n : needles) EXPECT_NE(r.message().find(n), std::string::npos) << r.message();
}

const SyntheticArtifact& base() {
  static const SyntheticArtifact a = testing::make_synthetic_artifact();
  return a;
}

TEST(Sidecar, SpecDigestVector) {
  // format.md §10: [[0, 0.5, 1, 1.5], [2, 3, 4, 6]] -> FP16 bytes 0000 0038 003c 003e 0040 0042 0044 0046.
  const std::vector<uint16_t> f16 = {0x0000, 0x3800, 0x3C00, 0x3E00, 0x4000, 0x4200, 0x4400, 0x4600};
  EXPECT_EQ(codebook_digest(f16), "1f663d7c86186c579915453b2926745a68df71a97f15e282adb53339921292bc");
  // And through a written + re-read sidecar (digest of the bytes as read).
  const std::string dir = temp_dir("sidecar");
  fs::create_directories(dir);
  const std::string path = dir + "/cb.pqcb";
  ASSERT_TRUE(write_sidecar(path, {{"cb_codebook.lattice.X.sub0", 2, 4, f16, ""}}).ok());
  auto sc = Sidecar::read(path);
  ASSERT_TRUE(sc.ok()) << sc.message();
  ASSERT_EQ(sc->tables().size(), 1u);
  EXPECT_EQ(sc->tables()[0].sha256, "1f663d7c86186c579915453b2926745a68df71a97f15e282adb53339921292bc");
  EXPECT_EQ(sc->tables()[0].f16, f16);
  std::map<std::string, std::string> d = {{"cb_codebook.lattice.X.sub0", sc->tables()[0].sha256}};
  EXPECT_TRUE(verify_codebook_provenance(d, *sc).ok());
  EXPECT_TRUE(verify_codebook_provenance(std::nullopt, *sc).ok());
  d["cb_codebook.lattice.X.sub0"][0] = '0';
  EXPECT_FALSE(verify_codebook_provenance(d, *sc).ok());
  EXPECT_FALSE(verify_codebook_provenance(std::map<std::string, std::string>{}, *sc).ok());
  fs::remove_all(dir);
}

TEST(Sidecar, RefusesNonF16Tables) {
  const std::string dir = temp_dir("sidecar");
  fs::create_directories(dir);
  auto w = io::SafetensorsWriter::create(dir + "/cb.pqcb", {{"t", io::DType::BF16, {1, 4}}});
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> b(8, 0);
  ASSERT_TRUE((*w)->write(b).ok());
  ASSERT_TRUE((*w)->finish().ok());
  auto sc = Sidecar::read(dir + "/cb.pqcb");
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.message().find("F16"), std::string::npos) << sc.message();
  fs::remove_all(dir);
}

TEST(Artifact, SyntheticOpensAndReportsEveryModule) {
  const SyntheticOptions o;
  auto a = open_ok(base());
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->quantized());
  // Independent count from the options: per layer 4 norms-ish params + q,k,v,o,g; layer 0 dense (3);
  // MoE layers router, bias, 2 stacks, 3 shared; plus embed, final norm, lm_head.
  const size_t moe_layers = static_cast<size_t>(o.layers - 1);
  EXPECT_EQ(a->modules().size(), 3 + static_cast<size_t>(o.layers) * 9 + 3 + moe_layers * 7);
  const ModuleInfo* gu = a->find_module("model.layers.1.mlp.experts.gate_up_proj");
  ASSERT_NE(gu, nullptr);
  EXPECT_EQ(gu->format, WeightFormat::kCodebook);
  EXPECT_EQ(gu->format_label(), "NVFP4_CB_K12");
  EXPECT_EQ(gu->shape, (std::vector<int64_t>{o.experts, 2 * o.moe_inter, o.hidden}));
  EXPECT_EQ(gu->params, int64_t{o.experts} * 2 * o.moe_inter * o.hidden);
  EXPECT_EQ(gu->bytes, uint64_t(o.experts) * 2 * o.moe_inter * (o.hidden / 256) * 57);
  EXPECT_DOUBLE_EQ(gu->bpw(), 57.0 * 8 / 256);
  ASSERT_NE(a->codebook(*gu), nullptr);
  const ModuleInfo* dn = a->find_module("model.layers.2.mlp.experts.down_proj");
  ASSERT_NE(dn, nullptr);
  EXPECT_EQ(dn->format_label(), "NVFP4_CB_K16");
  EXPECT_DOUBLE_EQ(dn->bpw(), 2.28125);  // format.md §4: K16 v2
  EXPECT_EQ(dn->component, Component::kRoutedExperts);
  const ModuleInfo* q = a->find_module("model.layers.0.self_attn.q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->format, WeightFormat::kFP8W8A8);
  EXPECT_EQ(q->bytes, uint64_t(o.heads) * 128 * o.hidden + uint64_t(o.heads) * 128 * 4);
  EXPECT_EQ(q->scale_tensor, "model.layers.0.self_attn.q_proj.weight_scale");
  const ModuleInfo* g = a->find_module("model.layers.1.self_attn.g_proj");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->format, WeightFormat::kBF16);
  EXPECT_EQ(g->component, Component::kGProj);
  const ModuleInfo* bias = a->find_module("model.layers.1.mlp.experts.e_score_correction_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->format, WeightFormat::kF32);
  EXPECT_EQ(bias->component, Component::kRouters);
  EXPECT_FALSE(a->checks().empty());
}

TEST(Artifact, WeightScaleAsRowsVectorAccepted) {
  SyntheticArtifact a = base();
  auto* s = a.find("model.layers.0.self_attn.k_proj.weight_scale");
  ASSERT_NE(s, nullptr);
  s->shape = {s->shape[0]};
  EXPECT_NE(open_ok(a), nullptr);
}

TEST(Artifact, PlainAttentionVariantAndPins) {
  SyntheticOptions o;
  o.fp8_attention = false;
  o.expert_k = {16};
  const SyntheticArtifact a = testing::make_synthetic_artifact(o);
  const std::string dir = temp_dir("pins");
  ASSERT_TRUE(a.write(dir).ok());
  ASSERT_TRUE(io::write_pins(dir).ok());
  auto r = Artifact::open(dir);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ((*r)->find_module("model.layers.0.self_attn.o_proj")->format, WeightFormat::kBF16);
  EXPECT_TRUE(io::verify_pins(dir).ok());
  fs::remove_all(dir);
}

// ---- §17.10 refusals ------------------------------------------------------------------------------------

TEST(ArtifactRefusal, UnknownScaleCodingKind) {
  SyntheticArtifact a = base();
  a.quant_config["config_groups"]["routed_k16"]["scheme"]["scale_coding"]["kind"] = "three_tier";
  expect_refused(a, {"routed_k16", "three_tier", "kind"});
}

TEST(ArtifactRefusal, TypeSizeOffByOneInConfig) {
  SyntheticArtifact a = base();
  a.quant_config["config_groups"]["routed_k16"]["scheme"]["type_size"] = 74;
  expect_refused(a, {"routed_k16", "type_size"});
}

TEST(ArtifactRefusal, TensorRowBytesOffByOne) {
  SyntheticArtifact a = base();
  auto* t = a.find("model.layers.2.mlp.experts.down_proj.cb_qweight");
  ASSERT_NE(t, nullptr);
  const int64_t rows = t->shape[0] * t->shape[1];
  t->shape[2] += 1;
  t->bytes.resize(static_cast<size_t>(rows * t->shape[2]));
  expect_refused(a, {"model.layers.2.mlp.experts.down_proj.cb_qweight", "type_size 73"});
}

TEST(ArtifactRefusal, InNotMultipleOf256) {
  SyntheticOptions o;
  o.moe_inter = 384;  // down_proj in = 384
  expect_refused(testing::make_synthetic_artifact(o), {"down_proj", "not a multiple of 256"});
}

TEST(ArtifactRefusal, OffGridCodebookValue) {
  SyntheticArtifact a = base();
  auto* t = a.table("cb_codebook.lattice.NVFP4_CB_K16.sub1");
  ASSERT_NE(t, nullptr);
  t->f16[5] = f32_to_f16(0.53125f);  // exact in FP16, not an E2M1 value
  a.refresh_provenance();            // digests agree: the grid check itself must refuse
  expect_refused(a, {"0.53125"});
}

TEST(ArtifactRefusal, FormatDisagreesWithK) {
  SyntheticArtifact a = base();
  a.quant_config["config_groups"]["routed_k12"]["format"] = "NVFP4_CB_K16";
  expect_refused(a, {"routed_k12", "disagrees"});
}

TEST(ArtifactRefusal, RoleClaimedTwice) {
  SyntheticArtifact a = base();
  a.quant_config["config_groups"]["routed_k16"]["targets"].push_back(
      "model.layers.1.mlp.experts.gate_up_proj");
  expect_refused(a, {"model.layers.1.mlp.experts.gate_up_proj", "claimed twice"});
}

TEST(ArtifactRefusal, RoleWithoutBook) {
  // gate_up in K12, down moved to ignore: the experts of layer 1 would need two paths.
  SyntheticArtifact a = base();
  auto& targets = a.quant_config["config_groups"]["routed_k12"]["targets"];
  targets.erase(1);
  a.quant_config["ignore"].push_back("model.layers.1.mlp.experts.down_proj");
  expect_refused(a, {"model.layers.1.mlp.experts.down_proj"});
}

TEST(ArtifactRefusal, DigestMismatch) {
  SyntheticArtifact a = base();
  a.quant_config["provenance"]["codebook_sha256"]["cb_codebook.lattice.NVFP4_CB_K12.sub0"] =
      std::string(64, '0');
  expect_refused(a, {"cb_codebook.lattice.NVFP4_CB_K12.sub0", "SHA-256"});
}

TEST(ArtifactRefusal, ProvenanceMissingNameExtraNullEmpty) {
  SyntheticArtifact a = base();
  a.quant_config["provenance"]["codebook_sha256"].erase("cb_codebook.lattice.NVFP4_CB_K12.sub1");
  expect_refused(a, {"cb_codebook.lattice.NVFP4_CB_K12.sub1", "not bound"});
  a = base();
  a.quant_config["provenance"]["codebook_sha256"]["cb_codebook.lattice.NVFP4_CB_K20.sub0"] =
      std::string(64, '1');
  expect_refused(a, {"cb_codebook.lattice.NVFP4_CB_K20.sub0", "does not contain"});
  a = base();
  a.quant_config["provenance"]["codebook_sha256"] = nullptr;
  expect_refused(a, {"null"});
  a = base();
  a.quant_config["provenance"]["codebook_sha256"] = json::object();
  expect_refused(a, {"empty"});
  // Absent key: no check, still opens.
  a = base();
  a.quant_config["provenance"].erase("codebook_sha256");
  EXPECT_NE(open_ok(a, "noprov"), nullptr);
}

TEST(ArtifactRefusal, UnreferencedSidecarTable) {
  SyntheticArtifact a = base();
  auto t = *a.table("cb_codebook.lattice.NVFP4_CB_K12.sub0");
  t.name = "cb_codebook.spare.NVFP4_CB_K12.sub0";
  a.tables.push_back(t);
  a.refresh_provenance();
  expect_refused(a, {"cb_codebook.spare.NVFP4_CB_K12.sub0", "referenced by no group"});
}

TEST(ArtifactRefusal, MissingTensor) {
  SyntheticArtifact a = base();
  ASSERT_TRUE(a.remove("model.layers.1.post_attention_layernorm.weight"));
  expect_refused(a, {"model.layers.1.post_attention_layernorm", "missing"});
  a = base();
  ASSERT_TRUE(a.remove("model.layers.0.self_attn.v_proj.weight_scale"));
  expect_refused(a, {"model.layers.0.self_attn.v_proj", "weight_scale"});
  a = base();
  ASSERT_TRUE(a.remove("model.layers.2.mlp.experts.gate_up_proj.cb_qweight"));
  expect_refused(a, {"model.layers.2.mlp.experts.gate_up_proj"});
}

TEST(ArtifactRefusal, ExtraTensor) {
  SyntheticArtifact a = base();
  a.tensors.push_back(
      {"model.layers.0.mlp.extra_proj.weight", io::DType::BF16, {2, 2}, std::vector<uint8_t>(8, 0)});
  expect_refused(a, {"model.layers.0.mlp.extra_proj.weight"});
  a = base();  // a BF16 weight left next to a CB tensor of the same module
  a.tensors.push_back(
      {"model.layers.1.mlp.experts.down_proj", io::DType::BF16, {2}, std::vector<uint8_t>(4, 0)});
  expect_refused(a, {"model.layers.1.mlp.experts.down_proj"});
  a = base();
  a.tensors.push_back(
      {"model.layers.0.self_attn.q_proj.input_scale", io::DType::F32, {1}, std::vector<uint8_t>(4, 0)});
  expect_refused(a, {"input_scale", "not supported"});
}

TEST(ArtifactRefusal, IllegalV2Plane) {
  SyntheticArtifact a = base();
  auto* t = a.find("model.layers.1.mlp.experts.gate_up_proj.cb_qweight");
  ASSERT_NE(t, nullptr);
  // Superblock 5, plane byte 0 (E) = 140: no code is legal above E = 135 (format.md §6.2).
  t->bytes[5 * 57 + 48] = 140;
  expect_refused(a, {"model.layers.1.mlp.experts.gate_up_proj.cb_qweight"});
}

TEST(ArtifactRefusal, BadFp8Scales) {
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    SyntheticArtifact a = base();
    auto* s = a.find("model.layers.1.self_attn.o_proj.weight_scale");
    ASSERT_NE(s, nullptr);
    std::memcpy(s->bytes.data() + 8, &bad, 4);
    expect_refused(a, {"model.layers.1.self_attn.o_proj.weight_scale", "finite and > 0"});
  }
  SyntheticArtifact a = base();
  a.find("model.layers.1.self_attn.o_proj.weight")->bytes[3] = 0x7F;
  expect_refused(a, {"model.layers.1.self_attn.o_proj.weight", "NaN"});
}

TEST(ArtifactRefusal, WrongDtypes) {
  SyntheticArtifact a = base();
  a.find("model.layers.0.self_attn.q_proj.weight")->dtype = io::DType::I8;
  expect_refused(a, {"model.layers.0.self_attn.q_proj.weight", "F8_E4M3"});
  a = base();
  a.find("model.layers.1.mlp.experts.down_proj.cb_qweight")->dtype = io::DType::I8;
  expect_refused(a, {"model.layers.1.mlp.experts.down_proj.cb_qweight", "U8"});
}

TEST(ArtifactRefusal, UnclaimedLinearAndSubstringIgnore) {
  SyntheticArtifact a = base();
  auto& ig = a.quant_config["ignore"];
  for (size_t i = 0; i < ig.size(); ++i) {
    if (ig[i] == "model.layers.1.mlp.gate") ig.erase(i);
  }
  expect_refused(a, {"model.layers.1.mlp.gate", "not claimed"});
}

TEST(ArtifactRefusal, NonDefaultScaleTableNotDecodable) {
  SyntheticArtifact a = base();
  a.quant_config["config_groups"]["routed_k16"]["scheme"]["scale_coding"]["table"][15] = 4.0;
  expect_refused(a, {"routed_k16", "default"});
}

TEST(ArtifactRefusal, NotAnArtifact) {
  SyntheticArtifact a = base();
  a.config.erase("quantization_config");
  expect_refused(a, {"quantization_config"});
}

// ---- the bundled model through the same reader ---------------------------------------------------------

TEST(Artifact, LagunaTinyCodeCheckpointCounts) {
  auto r = Artifact::open_any(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE((*r)->quantized());
  std::map<Component, int64_t> per;
  int64_t total = 0;
  uint64_t bytes = 0;
  for (const auto& m : (*r)->modules()) {
    per[m.component] += m.params;
    total += m.params;
    bytes += m.bytes;
  }
  // models/README.md
  EXPECT_EQ(total, 24806948);
  EXPECT_EQ(bytes, 49613896u);
  EXPECT_EQ(per[Component::kRoutedExperts], 14155776);
  EXPECT_EQ(per[Component::kAttention], 3670016);
  EXPECT_EQ(per[Component::kEmbed], 2097152);
  EXPECT_EQ(per[Component::kLmHead], 2097152);
  EXPECT_EQ(per[Component::kDenseMlp], 1572864);
  EXPECT_EQ(per[Component::kSharedExperts], 1179648);
  EXPECT_EQ(per[Component::kRouters], 18468);
  EXPECT_EQ(per[Component::kGProj], 10240);
  EXPECT_EQ(per[Component::kNorms], 5632);
  EXPECT_EQ(per.count(Component::kOther), 0u);
  // Artifact::open refuses it: no quantization_config.
  EXPECT_FALSE(Artifact::open(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code").ok());
}

}  // namespace
}  // namespace gridq::gridbook
