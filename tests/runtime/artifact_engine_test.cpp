// The engine on a gridbook artifact (tests/gridbook/synthetic_artifact.h: NVFP4_CB v2 routed experts,
// FP8 W8A8 attention, BF16 passthrough): it loads through the same adapter, runs with CB rows decoded on
// the fly, is deterministic, and actually reads the CB bytes and the FP8 weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "../gridbook/synthetic_artifact.h"
#include "runtime/engine.h"

namespace gridq::runtime {
namespace {

namespace fs = std::filesystem;

std::string write_artifact(const testing::SyntheticArtifact& a, const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / fmt::format("gridq_rt_artifact_{}_{}", ::getpid(), tag);
  fs::remove_all(p);
  Status st = a.write(p.string());
  EXPECT_TRUE(st.ok()) << st.message();
  return p.string();
}

std::vector<float> run(const std::string& dir, const std::vector<int32_t>& ids) {
  auto e = Engine::open(dir, {});
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return {};
  auto s = (*e)->create_sequence();
  auto lg = (*e)->prefill(s, ids, LogitsMode::kAll);
  EXPECT_TRUE(lg.ok()) << lg.message();
  return lg.ok() ? *lg : std::vector<float>{};
}

TEST(ArtifactEngine, LoadsRunsAndReadsQuantizedWeights) {
  auto a = testing::make_synthetic_artifact();
  const std::vector<int32_t> ids = {3, 17, 42, 99, 5, 200, 7, 1, 64, 128};
  const std::string dir = write_artifact(a, "base");
  auto l1 = run(dir, ids);
  auto l2 = run(dir, ids);
  ASSERT_FALSE(l1.empty());
  EXPECT_EQ(l1, l2);  // deterministic
  for (float v : l1) ASSERT_TRUE(std::isfinite(v));
  // FP8 W8A8 weights are read: nudge the mantissa of every byte of one q_proj (never producing NaN 0x7F).
  auto b = a;
  bool found = false;
  for (auto& t : b.tensors)
    if (t.name == "model.layers.1.self_attn.q_proj.weight") {
      for (auto& x : t.bytes)
        if ((x & 0x7F) < 0x7E) x ^= 0x01;
      found = true;
    }
  ASSERT_TRUE(found);
  const std::string dir2 = write_artifact(b, "fp8");
  auto l3 = run(dir2, ids);
  ASSERT_FALSE(l3.empty());
  EXPECT_NE(l3, l1);
  // CB bytes are read: change the first index byte of every superblock of one expert stack (the scale
  // plane sits after the 4k index bytes, so the artifact stays valid).
  auto c = a;
  found = false;
  for (auto& t : c.tensors) {
    if (t.name.find("experts.gate_up_proj.cb_qweight") == std::string::npos) continue;
    const std::string module = t.name.substr(0, t.name.size() - std::string(".cb_qweight").size());
    int ts = 0;
    for (const auto& [gname, g] : c.quant_config["config_groups"].items()) {
      if (!g.contains("scheme")) continue;
      for (const auto& target : g["targets"])
        if (target == module) ts = g["scheme"]["type_size"].get<int>();
    }
    ASSERT_GT(ts, 0) << module;
    for (size_t i = 0; i < t.bytes.size(); i += static_cast<size_t>(ts)) t.bytes[i] ^= 0xFF;
    found = true;
    break;
  }
  ASSERT_TRUE(found);
  const std::string dir3 = write_artifact(c, "cb");
  auto l4 = run(dir3, ids);
  ASSERT_FALSE(l4.empty());
  EXPECT_NE(l4, l1);
  fs::remove_all(dir3);
  fs::remove_all(dir);
  fs::remove_all(dir2);
}

}  // namespace
}  // namespace gridq::runtime
