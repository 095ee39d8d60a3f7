// S5–S7 without the streamer: a small BF16 Laguna checkpoint, synthetic input statistics, the laguna recipe →
// encode every tensor → per-layer shards → metadata → S7 → PINS + rename. The artifact must pass the reader
// (gridbook::Artifact::open), load in the runtime engine, store exactly what independent references compute
// (BF16 bytes copied, FP8 = compressed-tensors RTN), decode bit-exactly to the encoder's Ŵ, and be
// byte-identical across runs. A corrupted index byte must be caught by the S7 decode check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gridbook/artifact.h"
#include "io/pins.h"
#include "model/loader.h"
#include "pipeline_test_util.h"
#include "quant/allocate.h"
#include "quant/export.h"
#include "quant/fp8_weights.h"
#include "quant/lattice_codebook.h"
#include "quant/pipeline.h"
#include "runtime/engine.h"

namespace gridq::quant {
namespace {

namespace fs = std::filesystem;
using gridq::testing::kSanitized;
using gridq::testing::repo_path;
using testing::TinyLaguna;

std::string tmp_dir(const std::string& tag) { return testing::test_tmp_dir("export", tag); }

// Encodes `src` with the given recipe/method on synthetic statistics and writes the artifact to `out`.
Status build_artifact(const std::string& src, const TinyLaguna& o, const std::string& out,
                      const std::string& recipe_name, const std::string& method,
                      std::vector<CbSlice>* slices_out) {
  GRIDQ_ASSIGN_OR_RETURN(Recipe recipe, load_recipe(recipe_name, repo_path("")));
  GRIDQ_ASSIGN_OR_RETURN(model::LoadedModel model, model::load_model(src));
  std::vector<SourceTensor> st;
  for (const std::string& n : model.checkpoint->names()) {
    const io::TensorInfo* t = model.checkpoint->find(n);
    st.push_back({n, std::string(io::dtype_name(t->dtype)), t->shape});
  }
  GRIDQ_ASSIGN_OR_RETURN(Plan plan, make_plan(recipe, st, true));
  QuantizeOptions qo;
  qo.method = method;
  GRIDQ_ASSIGN_OR_RETURN(std::vector<TensorTask> tasks, resolve_tasks(recipe, plan, model, qo));
  std::map<std::string, gridbook::Codebook> books;
  for (const TensorTask& t : tasks) {
    if (!is_cb_format(t.format) || books.count(t.format)) continue;
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(t.format, 2));
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook cb, lattice_codebook(r));
    books.emplace(t.format, std::move(cb));
  }
  const int64_t n = kSanitized ? 272 : 512;
  static const InputStats wide = testing::synthetic_stats("wide", o.hidden, n, 48, 11);
  static const InputStats narrow = testing::synthetic_stats("narrow", o.moe_inter, n, 48, 12);
  const std::string partial = out + ".partial";
  fs::remove_all(partial);
  fs::create_directories(partial);
  std::vector<CbSlice> slices;
  ExportInfo info;
  info.source_dir = src;
  info.source_config = model.checkpoint->config();
  for (int l = 0; l <= o.layers; ++l) {
    const int layer = l < o.layers ? l : -1;
    LayerCapture cap;
    if (layer >= 0)
      cap = testing::synthetic_capture(o, layer, wide, narrow, /*cold_expert=*/layer == 1 ? 1 : -1);
    GRIDQ_ASSIGN_OR_RETURN(
        auto encs, encode_layer_tensors(tasks, layer, layer >= 0 ? &cap : nullptr, *model.checkpoint, books));
    GRIDQ_ASSIGN_OR_RETURN(ShardContent c, assemble_tensors(std::move(encs)));
    const std::string shard = shard_file_name(l, o.layers + 1);
    GRIDQ_RETURN_IF_ERROR(write_shard((fs::path(partial) / shard).string(), c.tensors).status());
    info.shard_files.push_back(shard);
    slices.insert(slices.end(), c.cb_slices.begin(), c.cb_slices.end());
  }
  for (const TensorTask& t : tasks) {
    info.tensor_formats[t.name] = t.format;
    if (is_cb_format(t.format)) info.codebooks.emplace(t.format, books.at(t.format));
  }
  info.provenance = {{"recipe", {{"name", recipe.name}, {"sha256", recipe.sha256}}}};
  GRIDQ_RETURN_IF_ERROR(write_artifact_metadata(partial, info));
  GRIDQ_RETURN_IF_ERROR(verify_artifact(partial, slices).status());
  GRIDQ_RETURN_IF_ERROR(finalize_artifact(partial, out, /*overwrite=*/true));
  if (slices_out) *slices_out = slices;
  return Status();
}

class ExportRoundTrip : public ::testing::Test {
 protected:
  // The recipe's encoders (CB-GPTQ for the experts); round-to-nearest under a sanitizer to stay fast.
  static std::string method() { return kSanitized ? "rtn" : ""; }
  static void SetUpTestSuite() {
    src_ = tmp_dir("src");
    testing::write_tiny_laguna(src_, opt_);
    out_ = tmp_dir("out");
    Status st = build_artifact(src_, opt_, out_, "laguna", method(), &slices_);
    build_status_ = st.ok() ? "" : st.message();
  }
  static void TearDownTestSuite() {
    fs::remove_all(src_);
    fs::remove_all(out_);
  }
  static inline TinyLaguna opt_;
  static inline std::string src_, out_, build_status_;
  static inline std::vector<CbSlice> slices_;
};

TEST_F(ExportRoundTrip, ReaderAcceptsAndFormatsFollowTheRecipe) {
  ASSERT_EQ(build_status_, "");
  EXPECT_FALSE(fs::exists(out_ + ".partial"));
  auto art = gridbook::Artifact::open(out_);
  ASSERT_TRUE(art.ok()) << art.message();
  int cb = 0, fp8 = 0;
  for (const auto& m : (*art)->modules()) {
    if (m.component == gridbook::Component::kRoutedExperts) {
      ++cb;
      EXPECT_EQ(m.format, gridbook::WeightFormat::kCodebook) << m.name;
      EXPECT_EQ(m.format_label(), "NVFP4_CB_K16") << m.name;
      EXPECT_DOUBLE_EQ(m.bpw(), 2.28125) << m.name;
      EXPECT_EQ(m.shape.size(), 3u) << m.name;  // stacked
    } else if (m.component == gridbook::Component::kAttention) {
      ++fp8;
      EXPECT_EQ(m.format, gridbook::WeightFormat::kFP8W8A8) << m.name;
    } else if (m.name.ends_with("e_score_correction_bias")) {
      EXPECT_EQ(m.format, gridbook::WeightFormat::kF32) << m.name;  // the fp32 bias stays fp32
    } else {
      EXPECT_EQ(m.format, gridbook::WeightFormat::kBF16) << m.name;
    }
  }
  EXPECT_EQ(cb, 2);       // layer 1: gate_up_proj + down_proj
  EXPECT_EQ(fp8, 4 * 2);  // q/k/v/o of both layers
  const auto& st = (*art)->quant_config()->provenance_extra;
  ASSERT_TRUE(st.contains("tensor_formats"));
  EXPECT_EQ(st["tensor_formats"]["model.layers.1.mlp.experts.gate_up_proj"], "NVFP4_CB_K16");
  // Every CB Linear (2 experts x 3 roles) was decode-checked.
  EXPECT_EQ(slices_.size(), 6u);
  const auto& qc = *(*art)->quant_config();
  auto has = [&](const std::string& m) {
    return std::find(qc.ignore.begin(), qc.ignore.end(), m) != qc.ignore.end();
  };
  EXPECT_TRUE(has("model.layers.1.mlp.gate"));
  EXPECT_TRUE(has("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(has("model.layers.1.self_attn.g_proj"));
  EXPECT_TRUE(has("lm_head"));
  EXPECT_FALSE(has("model.layers.1.mlp.experts.gate_up_proj"));
  ASSERT_TRUE(qc.codebook_sha256.has_value());
  EXPECT_EQ(qc.codebook_sha256->size(), 2u);  // K16 sub0 + sub1
  EXPECT_TRUE(io::verify_pins(out_).ok());
}

TEST_F(ExportRoundTrip, StoresWhatIndependentReferencesCompute) {
  ASSERT_EQ(build_status_, "");
  auto src = io::Checkpoint::open(src_);
  auto dst = io::Checkpoint::open(out_);
  ASSERT_TRUE(src.ok() && dst.ok());
  // BF16 rule = the source bytes unchanged (and the F32 bias stays F32).
  for (const char* n :
       {"model.embed_tokens.weight", "model.layers.1.mlp.experts.e_score_correction_bias",
        "model.layers.1.mlp.shared_expert.down_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
    const io::TensorInfo* a = (*src)->find(n);
    const io::TensorInfo* b = (*dst)->find(n);
    ASSERT_TRUE(a && b) << n;
    EXPECT_EQ(a->dtype, b->dtype) << n;
    EXPECT_EQ(a->shape, b->shape) << n;
    EXPECT_TRUE(std::equal(a->bytes().begin(), a->bytes().end(), b->bytes().begin(), b->bytes().end())) << n;
  }
  // FP8_DYNAMIC (laguna: round to nearest) = the compressed-tensors reference on the source weight.
  const io::TensorInfo* w = (*src)->find("model.layers.1.self_attn.q_proj.weight");
  std::vector<float> W(static_cast<size_t>(w->numel()));
  for (size_t i = 0; i < W.size(); ++i)
    W[i] = bf16_to_f32(static_cast<uint16_t>(w->data[2 * i] | (w->data[2 * i + 1] << 8)));
  auto ref = quantize_fp8_per_channel(W.data(), static_cast<int>(w->shape[0]), static_cast<int>(w->shape[1]));
  ASSERT_TRUE(ref.ok());
  const io::TensorInfo* q = (*dst)->find("model.layers.1.self_attn.q_proj.weight");
  const io::TensorInfo* s = (*dst)->find("model.layers.1.self_attn.q_proj.weight_scale");
  ASSERT_TRUE(q && s);
  EXPECT_EQ(q->dtype, io::DType::F8_E4M3);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{w->shape[0], 1}));
  EXPECT_TRUE(std::equal(ref->q.begin(), ref->q.end(), q->bytes().begin(), q->bytes().end()));
  std::vector<float> scale(ref->scale.size());
  std::memcpy(scale.data(), s->data, scale.size() * 4);
  EXPECT_EQ(scale, ref->scale);
}

TEST_F(ExportRoundTrip, EngineRunsTheArtifact) {
  ASSERT_EQ(build_status_, "");
  auto e = runtime::Engine::open(out_, {});
  ASSERT_TRUE(e.ok()) << e.message();
  auto b = runtime::Engine::open(src_, {});
  ASSERT_TRUE(b.ok()) << b.message();
  const std::vector<int32_t> ids = {3, 17, 42, 99, 5, 200, 7, 1};
  auto sq = (*e)->create_sequence();
  auto sb = (*b)->create_sequence();
  auto lq = (*e)->prefill(sq, ids, runtime::LogitsMode::kAll);
  auto lb = (*b)->prefill(sb, ids, runtime::LogitsMode::kAll);
  ASSERT_TRUE(lq.ok() && lb.ok());
  ASSERT_EQ(lq->size(), lb->size());
  // The quantized model differs from the teacher, but only by quantization noise: relative L2 of the logits
  // well below 1 (a wrongly laid-out stack or a swapped gate/up gives O(1)).
  double num = 0, den = 0;
  for (size_t i = 0; i < lq->size(); ++i) {
    ASSERT_TRUE(std::isfinite((*lq)[i]));
    num += ((*lq)[i] - (*lb)[i]) * double((*lq)[i] - (*lb)[i]);
    den += double((*lb)[i]) * (*lb)[i];
  }
  EXPECT_GT(num, 0.0);
  EXPECT_LT(std::sqrt(num / den), 0.25);
}

TEST_F(ExportRoundTrip, ByteIdenticalAcrossRuns) {
  ASSERT_EQ(build_status_, "");
  const std::string again = tmp_dir("again");
  Status st = build_artifact(src_, opt_, again, "laguna", method(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto a = testing::dir_digests(out_), b = testing::dir_digests(again);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(a.count("PINS.json") && a.count("cb_codebooks.pqcb") && a.count("quant_config.json"));
  fs::remove_all(again);
}

TEST_F(ExportRoundTrip, CorruptedIndexBitIsCaughtByTheDecodeCheck) {
  ASSERT_EQ(build_status_, "");
  const std::string copy = tmp_dir("corrupt");
  fs::remove_all(copy);
  fs::copy(out_, copy, fs::copy_options::recursive);
  // Flip bit 0 of the first index byte of the stacked gate_up_proj: the scale planes stay legal, so the
  // reader accepts the file; only the decode comparison can tell.
  const std::string shard = (fs::path(copy) / shard_file_name(1, 3)).string();
  uint64_t offset = 0;
  {
    auto f = io::SafetensorsFile::open(shard);
    ASSERT_TRUE(f.ok()) << f.message();
    const io::TensorInfo* t = (*f)->find("model.layers.1.mlp.experts.gate_up_proj.cb_qweight");
    ASSERT_NE(t, nullptr);
    uint64_t n = 0;
    std::ifstream in(shard, std::ios::binary);
    in.read(reinterpret_cast<char*>(&n), 8);
    offset = 8 + n + t->begin;
  }
  {
    std::fstream io(shard, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 1);
    io.seekp(static_cast<std::streamoff>(offset));
    io.write(&c, 1);
  }
  EXPECT_TRUE(gridbook::Artifact::open(copy).ok());
  auto v = verify_artifact(copy, slices_);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("does not reproduce"), std::string::npos) << v.message();
  EXPECT_NE(v.message().find("experts.0.gate_proj"), std::string::npos) << v.message();
  fs::remove_all(copy);
}

TEST(ExportAssemble, RefusesAnIncompleteStack) {
  auto book = lattice_codebook(*gridbook::parse_rung_name("NVFP4_CB_K12", 2));
  ASSERT_TRUE(book.ok());
  const InputStats in = testing::synthetic_stats("x", 256, 64, 0, 3);
  const testing::Bf16Src src("", 8, 256, 5);
  const std::vector<uint8_t>& bytes = src.bytes;
  EncodeParams p{"NVFP4_CB_K12", "rtn", {}, {}};
  std::vector<EncodedTensor> encs;
  for (const char* leaf : {"gate_proj", "up_proj"}) {  // no down_proj
    SourceWeight sw{
        std::string("model.layers.1.mlp.experts.0.") + leaf + ".weight", io::DType::BF16, {8, 256}, bytes};
    auto e = encode_tensor(sw, &in, p, &*book);
    ASSERT_TRUE(e.ok()) << e.message();
    encs.push_back(std::move(*e));
  }
  auto c = assemble_tensors(std::move(encs));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("down_proj"), std::string::npos) << c.message();
}

TEST(ExportQuantConfig, GroupsIgnoreAndModuleNames) {
  auto book = lattice_codebook(*gridbook::parse_rung_name("NVFP4_CB_K16", 2));
  ASSERT_TRUE(book.ok());
  ExportInfo info;
  info.codebooks.emplace("NVFP4_CB_K16", *book);
  info.tensor_formats = {{"model.layers.1.mlp.experts.0.gate_proj.weight", "NVFP4_CB_K16"},
                         {"model.layers.1.mlp.experts.0.down_proj.weight", "NVFP4_CB_K16"},
                         {"model.layers.1.mlp.gate.weight", "BF16"},
                         {"model.layers.1.mlp.experts.e_score_correction_bias", "BF16"},
                         {"model.layers.1.self_attn.q_proj.weight", "FP8_DYNAMIC"}};
  auto q = build_quant_config(info);
  ASSERT_TRUE(q.ok()) << q.message();
  const auto& qc = q->config;
  ASSERT_EQ(qc.groups.size(), 2u);
  EXPECT_EQ(qc.groups[0].name, "fp8_dynamic");
  EXPECT_EQ(qc.groups[0].targets, std::vector<std::string>{"model.layers.1.self_attn.q_proj"});
  EXPECT_EQ(qc.groups[1].name, "nvfp4_cb_k16");
  EXPECT_EQ(qc.groups[1].targets, (std::vector<std::string>{"model.layers.1.mlp.experts.down_proj",
                                                            "model.layers.1.mlp.experts.gate_up_proj"}));
  EXPECT_EQ(qc.ignore, (std::vector<std::string>{"model.layers.1.mlp.experts.e_score_correction_bias",
                                                 "model.layers.1.mlp.gate"}));
  EXPECT_EQ(q->tables.size(), 2u);
  // Emitted and re-parsed, the config is the same (the reader's parser accepts what the writer emits).
  auto back = gridbook::parse_quant_config(gridbook::emit_quant_config(qc));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->groups, qc.groups);
  EXPECT_EQ(back->ignore, qc.ignore);
  EXPECT_EQ(back->layout_version, 2);
  // One module in two formats is refused.
  info.tensor_formats["model.layers.1.mlp.experts.0.up_proj.weight"] = "NVFP4_CB_K12";
  info.codebooks.emplace("NVFP4_CB_K12", *lattice_codebook(*gridbook::parse_rung_name("NVFP4_CB_K12", 2)));
  EXPECT_FALSE(build_quant_config(info).ok());
}

TEST(ExportQuantConfig, PerLayerBooksGetAGroupAndTablesPerLayer) {
  EXPECT_EQ(layer_of_name("model.layers.12.mlp.experts.3.down_proj.weight"), 12);
  EXPECT_EQ(layer_of_name("model.layers.7.mlp.experts.gate_up_proj"), 7);
  EXPECT_EQ(layer_of_name("model.embed_tokens.weight"), -1);
  EXPECT_EQ(layer_of_name("model.layers.x.mlp"), -1);
  EXPECT_EQ(layer_of_name("model.layers.3"), -1);  // no module after the index
  EXPECT_EQ(book_key_for(kPerLayerBooks, "NVFP4_CB_K16", "model.layers.2.mlp.experts.0.up_proj.weight"),
            "NVFP4_CB_K16@2");
  EXPECT_EQ(book_key_for("learned", "NVFP4_CB_K16", "model.layers.2.mlp.experts.0.up_proj.weight"),
            "NVFP4_CB_K16");

  const gridbook::Rung rung = *gridbook::parse_rung_name("NVFP4_CB_K16", 2);
  auto book = lattice_codebook(rung);
  ASSERT_TRUE(book.ok());
  gridbook::Codebook other = *book;  // layer 2's book differs from layer 1's in one value
  ASSERT_NE(other.sub[0].back(), 0.0f);
  other.sub[0].back() = -other.sub[0].back();
  ExportInfo info;
  info.codebook_source = kPerLayerBooks;
  info.codebooks.emplace("NVFP4_CB_K16@1", *book);
  info.codebooks.emplace("NVFP4_CB_K16@2", other);
  for (int l : {1, 2})
    for (const char* p : {"gate", "up", "down"})
      info.tensor_formats[fmt::format("model.layers.{}.mlp.experts.0.{}_proj.weight", l, p)] = "NVFP4_CB_K16";
  auto q = build_quant_config(info);
  ASSERT_TRUE(q.ok()) << q.message();
  const auto& g = q->config.groups;
  ASSERT_EQ(g.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const int l = i + 1;
    EXPECT_EQ(g[i].name, fmt::format("nvfp4_cb_k16_l{}", l));
    EXPECT_EQ(g[i].targets,
              (std::vector<std::string>{fmt::format("model.layers.{}.mlp.experts.down_proj", l),
                                        fmt::format("model.layers.{}.mlp.experts.gate_up_proj", l)}));
    ASSERT_TRUE(g[i].scheme.has_value());
    EXPECT_EQ(g[i].scheme->codebook_source, "learned");  // the format's vocabulary
    EXPECT_EQ(g[i].scheme->codebook_ref,
              (std::vector<std::string>{fmt::format("cb_codebook.learned.L{}.NVFP4_CB_K16.sub0", l),
                                        fmt::format("cb_codebook.learned.L{}.NVFP4_CB_K16.sub1", l)}));
  }
  ASSERT_EQ(q->tables.size(), 4u);  // two per layer, each layer's own values
  EXPECT_NE(q->tables[0].sha256, q->tables[2].sha256);
  EXPECT_EQ(q->tables[1].sha256, q->tables[3].sha256);
  EXPECT_EQ(q->config.provenance_extra.value("codebook_source", ""), kPerLayerBooks);
  // A layer without its book is refused, naming the key.
  info.tensor_formats["model.layers.3.mlp.experts.0.up_proj.weight"] = "NVFP4_CB_K16";
  auto bad = build_quant_config(info);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("NVFP4_CB_K16@3"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace gridq::quant
