// quant_config.json / config.json stub parsing and emission (format.md §11, §15 Config and Schemes,
// refusal vectors of §17.10). Expected values are the spec's own (the §11.2 illustrative routed group, the
// §4 type_size table, the §6.2 default table).
#include <gtest/gtest.h>

#include "gridbook/quant_config.h"

namespace gridq::gridbook {
namespace {

using nlohmann::json;

// The Laguna routed group exactly as format.md §11.2 prints it (targets shortened).
json spec_routed_group() {
  return json::parse(R"({"format": "NVFP4_CB_K16", "targets": ["model.layers.1.mlp.experts.gate_up_proj",
      "model.layers.1.mlp.experts.down_proj"], "scheme": {"grid": "fp4", "mode": "product", "k": 16,
      "superblock": 256, "group_size": 16, "vec_dim": 8, "n_sub": 2, "type_size": 73, "act_bits": 4,
      "codebook_source": "lattice", "codebook_group": null, "codebook_ref":
      ["cb_codebook.lattice.NVFP4_CB_K16.sub0", "cb_codebook.lattice.NVFP4_CB_K16.sub1"], "scale_coding":
      {"kind": "two_tier", "sub_bits": 4, "super_bias": 127, "table": [1.0, 1.125, 1.25, 1.375, 1.5, 1.625,
      1.75, 1.875, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75]}}})");
}

json spec_config() {
  json j = {{"quant_method", "gridbook"}, {"format", "nvfp4_cb"}, {"layout_version", 2}};
  j["config_groups"]["routed_k16"] = spec_routed_group();
  json ct = fp8_dynamic_group_body();
  ct["targets"] = {R"(re:model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj)"};
  j["config_groups"]["attention_fp8"] = ct;
  j["ignore"] = {"lm_head", "model.layers.1.mlp.gate"};
  j["provenance"] = {{"codebook_sha256",
                      {{"cb_codebook.lattice.NVFP4_CB_K16.sub0", std::string(64, 'a')},
                       {"cb_codebook.lattice.NVFP4_CB_K16.sub1", std::string(64, 'b')}}},
                     {"codebook_source", "lattice"}};
  return j;
}

void expect_refused(const json& j, std::string_view needle) {
  auto r = parse_quant_config(j);
  ASSERT_FALSE(r.ok()) << "accepted: " << j.dump();
  EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
}

TEST(QuantConfig, ParsesTheSpecExample) {
  auto r = parse_quant_config(spec_config());
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->layout_version, 2);
  ASSERT_EQ(r->groups.size(), 2u);
  const ConfigGroup* g = r->find_group("routed_k16");
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(g->scheme.has_value());
  EXPECT_EQ(g->scheme->rung.k, 16);
  EXPECT_EQ(g->scheme->rung.layout_version, 2);
  EXPECT_EQ(g->scheme->type_size, 73);
  ASSERT_TRUE(g->scheme->scale_coding.has_value());
  EXPECT_EQ(*g->scheme->scale_coding, default_scale_coding());
  EXPECT_FALSE(r->find_group("attention_fp8")->scheme.has_value());
  ASSERT_TRUE(r->codebook_sha256.has_value());
  EXPECT_EQ(r->codebook_sha256->size(), 2u);
  EXPECT_EQ(r->provenance_extra["codebook_source"], "lattice");
}

TEST(QuantConfig, DefaultTableIsT4_2oct8m) {
  const ScaleCoding sc = default_scale_coding();
  const float want[16] = {1, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
                          2, 2.25,  2.5,  2.75,  3,   3.25,  3.5,  3.75};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(sc.table[i], want[i]) << i;
}

TEST(QuantConfig, EmitMatchesTheSpecGroupAndRoundTrips) {
  const Rung k16{Grid::FP4, Mode::Product, 16, 2};
  QuantConfig qc;
  qc.format = "nvfp4_cb";
  qc.groups.push_back({"routed_k16",
                       {"model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj"},
                       "NVFP4_CB_K16",
                       make_cb_scheme(k16)});
  qc.groups.push_back(
      {"attention_fp8", {R"(re:model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj)"}, "", std::nullopt});
  qc.ignore = {"lm_head", "model.layers.1.mlp.gate"};
  qc.codebook_sha256 =
      std::map<std::string, std::string>{{"cb_codebook.lattice.NVFP4_CB_K16.sub0", std::string(64, 'a')},
                                         {"cb_codebook.lattice.NVFP4_CB_K16.sub1", std::string(64, 'b')}};
  qc.provenance_extra = {{"codebook_source", "lattice"}};
  const json j = emit_quant_config(qc);
  EXPECT_EQ(j["config_groups"]["routed_k16"], spec_routed_group());
  EXPECT_EQ(j["layout_version"], 2);
  EXPECT_EQ(j["quant_method"], "gridbook");
  auto back = parse_quant_config(j);
  ASSERT_TRUE(back.ok()) << back.message();
  // Compressed-tensors groups re-emit with their fixed body; compare through JSON.
  EXPECT_EQ(emit_quant_config(*back), j);
  EXPECT_EQ(emit_quant_config(*back).dump(), j.dump());  // deterministic bytes
}

TEST(QuantConfig, TypeSizesOfTheSpecTable) {
  // format.md §4: fp4 v1 4k+16, v2 4k+9, fp8 4k.
  const int ks[] = {12, 13, 14, 16, 18, 20, 24};
  const int v1[] = {64, 68, 72, 80, 88, 96, 112};
  const int v2[] = {57, 61, 65, 73, 81, 89, 105};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(make_cb_scheme({Grid::FP4, Mode::Product, ks[i], 1}).type_size, v1[i]);
    EXPECT_EQ(make_cb_scheme({Grid::FP4, Mode::Product, ks[i], 2}).type_size, v2[i]);
  }
  EXPECT_EQ(make_cb_scheme({Grid::FP8, Mode::Product, 32, 1}).type_size, 128);
  EXPECT_EQ(make_cb_scheme({Grid::FP8, Mode::Product, 32, 1}).n_sub, 4);
  EXPECT_FALSE(make_cb_scheme({Grid::FP8, Mode::Product, 32, 1}).scale_coding.has_value());
}

TEST(QuantConfig, AcceptsV1AndFp8Groups) {
  json j = {{"quant_method", "prismaquant"}};
  json g = spec_routed_group();
  g["scheme"].erase("scale_coding");
  g["scheme"]["type_size"] = 80;  // v1
  j["config_groups"]["v1"] = g;
  json f = {{"format", "FP8_CB_K32"}, {"targets", {"lm_head"}}};
  f["scheme"] = {{"grid", "fp8"},
                 {"mode", "product"},
                 {"k", 32},
                 {"superblock", 256},
                 {"group_size", 0},
                 {"vec_dim", 8},
                 {"n_sub", 4},
                 {"type_size", 128},
                 {"act_bits", 8},
                 {"codebook_source", "learned"},
                 {"codebook_group", "lm"},
                 {"codebook_ref",
                  {"cb_codebook.b.FP8_CB_K32.sub0", "cb_codebook.b.FP8_CB_K32.sub1",
                   "cb_codebook.b.FP8_CB_K32.sub2", "cb_codebook.b.FP8_CB_K32.sub3"}}};
  j["config_groups"]["fp8"] = f;
  auto r = parse_quant_config(j);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->layout_version, 1);
  EXPECT_EQ(r->find_group("v1")->scheme->rung.layout_version, 1);
  EXPECT_EQ(r->find_group("fp8")->scheme->rung.grid, Grid::FP8);
  EXPECT_EQ(*r->find_group("fp8")->scheme->codebook_group, "lm");
  EXPECT_EQ(emit_quant_config(*r)["quant_method"], "gridbook");  // never writes the legacy alias
}

TEST(QuantConfig, SchemeRefusals) {
  auto with = [](auto mutate) {
    json j = spec_config();
    mutate(j["config_groups"]["routed_k16"]);
    return j;
  };
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["kind"] = "three_tier"; }), "kind");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["sub_bits"] = 3; }), "sub_bits");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["super_bias"] = 128; }), "super_bias");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["table"].erase(15); }), "16 numbers");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["table"][3] = 0.0; }), "positive");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["table"][3] = -1.5; }), "positive");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["table"][3] = 1.0625; }), "exact E4M3");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["table"][3] = 0.53125; }), "exact E4M3");
  expect_refused(with([](json& g) { g["scheme"]["scale_coding"]["extra"] = 1; }), "extra");
  expect_refused(with([](json& g) { g["scheme"]["type_size"] = 74; }), "type_size");
  expect_refused(with([](json& g) { g["scheme"]["type_size"] = 72; }), "type_size");
  expect_refused(with([](json& g) { g["scheme"]["k"] = 12; }), "disagrees");
  expect_refused(with([](json& g) { g["format"] = "NVFP4_CB_K12"; }), "disagrees");
  expect_refused(with([](json& g) { g["scheme"]["grid"] = "fp8"; }), "scale_coding");
  expect_refused(with([](json& g) { g["scheme"]["n_sub"] = 4; }), "n_sub");
  expect_refused(with([](json& g) { g["scheme"]["superblock"] = 128; }), "superblock");
  expect_refused(with([](json& g) { g["scheme"]["vec_dim"] = 4; }), "vec_dim");
  expect_refused(with([](json& g) { g["scheme"]["group_size"] = 32; }), "group_size");
  expect_refused(with([](json& g) { g["scheme"]["act_bits"] = 8; }), "act_bits");
  expect_refused(with([](json& g) { g["scheme"]["codebook_ref"].erase(1); }), "codebook_ref");
  expect_refused(with([](json& g) { g["scheme"]["codebook_ref"] = "cb_codebook.lattice.NVFP4_CB_K16"; }),
                 "codebook_ref");
  expect_refused(with([](json& g) { g["scheme"]["codebook_source"] = "random"; }), "codebook_source");
  expect_refused(with([](json& g) { g["scheme"]["codebook_group"] = 3; }), "codebook_group");
  expect_refused(with([](json& g) { g["scheme"]["activation_contract"] = json::object(); }),
                 "activation_contract");
  expect_refused(with([](json& g) { g["scheme"]["unknown"] = 1; }), "unknown");
  expect_refused(with([](json& g) { g["scheme"].erase("type_size"); }), "type_size");
  expect_refused(with([](json& g) { g["scheme"]["mode"] = "lattice"; }), "mode");
  expect_refused(with([](json& g) { g["targets"] = json::array(); }), "targets");
  expect_refused(with([](json& g) { g.erase("format"); }), "format");
  expect_refused(with([](json& g) { g["extra"] = 1; }), "extra");
  // signed / full are defined by the spec but not implemented: refused at the rung.
  expect_refused(with([](json& g) {
                   g["format"] = "NVFP4_CB_S16";
                   g["scheme"]["mode"] = "signed";
                   g["scheme"]["n_sub"] = 1;
                 }),
                 "");
  // k outside the family's range.
  expect_refused(with([](json& g) {
                   g["format"] = "NVFP4_CB_K11";
                   g["scheme"]["k"] = 11;
                   g["scheme"]["type_size"] = 53;
                 }),
                 "");
}

TEST(QuantConfig, TopLevelRefusals) {
  auto with = [](auto mutate) {
    json j = spec_config();
    mutate(j);
    return j;
  };
  expect_refused(with([](json& j) { j["layout_version"] = 1; }), "layout_version");
  expect_refused(with([](json& j) { j["layout_version"] = 3; }), "layout_version");
  expect_refused(with([](json& j) { j.erase("layout_version"); }),
                 "layout_version");  // absent ⇒ 1, inconsistent
  expect_refused(with([](json& j) { j["quant_method"] = "compressed-tensors"; }), "quant_method");
  expect_refused(with([](json& j) { j.erase("config_groups"); }), "config_groups");
  for (const char* key : {"per_expert_format_groups", "source_passthrough", "execution_contracts",
                          "dspark_target_bridge", "some_future_key"}) {
    expect_refused(with([&](json& j) { j[key] = json::object({{"version", 1}}); }), key);
  }
  expect_refused(with([](json& j) { j["kv_cache_scheme"] = {{"num_bits", 8}}; }), "kv_cache_scheme");
  auto ok = parse_quant_config(with([](json& j) {
    j["kv_cache_scheme"] = nullptr;
    j["quantization_status"] = "compressed";
  }));
  EXPECT_TRUE(ok.ok()) << ok.message();
  // v2 layout declared with no group carrying scale_coding.
  json v1 = spec_config();
  v1["config_groups"]["routed_k16"]["scheme"].erase("scale_coding");
  v1["config_groups"]["routed_k16"]["scheme"]["type_size"] = 80;
  expect_refused(v1, "layout_version");
  v1["layout_version"] = 1;
  EXPECT_TRUE(parse_quant_config(v1).ok());
}

TEST(QuantConfig, CompressedTensorsGroupRefusals) {
  auto with = [](auto mutate) {
    json j = spec_config();
    mutate(j["config_groups"]["attention_fp8"]);
    return j;
  };
  expect_refused(with([](json& g) { g["weights"]["dynamic"] = true; }), "dynamic");
  expect_refused(with([](json& g) { g["weights"]["strategy"] = "tensor"; }), "strategy");
  expect_refused(with([](json& g) { g["weights"]["num_bits"] = 4; }), "num_bits");
  expect_refused(with([](json& g) { g["input_activations"]["strategy"] = "tensor"; }), "strategy");
  expect_refused(with([](json& g) { g["input_activations"]["dynamic"] = false; }), "dynamic");
  expect_refused(with([](json& g) { g["weights"]["group_size"] = 128; }), "group_size");
  expect_refused(with([](json& g) { g["format"] = "nvfp4-pack-quantized"; }), "format");
  expect_refused(with([](json& g) { g.erase("input_activations"); }), "input_activations");
  expect_refused(with([](json& g) { g["output_activations"] = g["weights"]; }), "output_activations");
  auto ok = parse_quant_config(with([](json& g) {
    g["weights"]["observer"] = "minmax";
    g["weights"]["observer_kwargs"] = json::object();
    g["weights"]["group_size"] = nullptr;
    g["output_activations"] = nullptr;
  }));
  EXPECT_TRUE(ok.ok()) << ok.message();
}

TEST(QuantConfig, ProvenanceRefusals) {
  json j = spec_config();
  j["provenance"]["codebook_sha256"] = nullptr;
  expect_refused(j, "null");
  j["provenance"]["codebook_sha256"] = json::object();
  expect_refused(j, "empty");
  j["provenance"]["codebook_sha256"] = {{"x", "ABCD"}};
  expect_refused(j, "hex");
  j["provenance"]["codebook_sha256"] = {{"x", std::string(64, 'A')}};
  expect_refused(j, "lowercase");
  j["provenance"].erase("codebook_sha256");
  auto r = parse_quant_config(j);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE(r->codebook_sha256.has_value());  // absent: load without the check
}

TEST(QuantizationStub, ParseAndEmit) {
  json cfg = {{"model_type", "laguna"}};
  auto none = parse_quantization_stub(cfg);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  QuantizationStub s;
  s.format = "nvfp4_cb";
  cfg["quantization_config"] = emit_quantization_stub(s);
  EXPECT_EQ(cfg["quantization_config"], json({{"quant_method", "gridbook"},
                                              {"format", "nvfp4_cb"},
                                              {"config_file", "quant_config.json"},
                                              {"codebook_file", "cb_codebooks.pqcb"}}));
  auto r = parse_quantization_stub(cfg);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->config_file, "quant_config.json");
  EXPECT_EQ((*r)->codebook_file, "cb_codebooks.pqcb");
  EXPECT_FALSE((*r)->inline_config.has_value());

  // Defaults when the stub names no files; legacy alias readable.
  cfg["quantization_config"] = {{"quant_method", "prismaquant"}};
  r = parse_quantization_stub(cfg);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ((*r)->config_file, "quant_config.json");
  EXPECT_EQ((*r)->quant_method, "prismaquant");
  EXPECT_EQ(emit_quantization_stub(**r)["quant_method"], "gridbook");

  for (const char* bad : {"../quant_config.json", "sub/quant_config.json", "a\\b", "..", ".", ""}) {
    cfg["quantization_config"] = {{"quant_method", "gridbook"}, {"config_file", bad}};
    EXPECT_FALSE(parse_quantization_stub(cfg).ok()) << bad;
    cfg["quantization_config"] = {{"quant_method", "gridbook"}, {"codebook_file", bad}};
    EXPECT_FALSE(parse_quantization_stub(cfg).ok()) << bad;
  }
  cfg["quantization_config"] = {{"quant_method", "compressed-tensors"}};
  EXPECT_FALSE(parse_quantization_stub(cfg).ok());
  cfg["quantization_config"] = {{"quant_method", "gridbook"}, {"surprise", 1}};
  EXPECT_FALSE(parse_quantization_stub(cfg).ok());
}

TEST(QuantizationStub, InlineFullConfig) {
  json cfg = {{"model_type", "laguna"}};
  json q = spec_config();
  q["codebook_file"] = "books.pqcb";
  cfg["quantization_config"] = q;
  auto r = parse_quantization_stub(cfg);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE((*r)->inline_config.has_value());
  EXPECT_EQ((*r)->inline_config->groups.size(), 2u);
  EXPECT_EQ((*r)->codebook_file, "books.pqcb");
  q["config_groups"]["routed_k16"]["scheme"]["type_size"] = 74;
  cfg["quantization_config"] = q;
  EXPECT_FALSE(parse_quantization_stub(cfg).ok());
}

}  // namespace
}  // namespace gridq::gridbook
