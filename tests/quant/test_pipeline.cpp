// The quantize driver end to end with the real layer streamer, on a small BF16 Laguna checkpoint (2 layers,
// 4 experts, the bundled tokenizer) and a few calibration sequences: the run produces a valid artifact; a run
// stopped after layer 0 and resumed is byte-identical to an uninterrupted one (with layers captured while the
// previous one is encoded, or one after the other); a resume with different
// inputs is refused naming what differs; malformed inputs are refused before anything is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gridbook/artifact.h"
#include "pipeline_test_util.h"
#include "quant/pipeline.h"

namespace gridq::quant {
namespace {

namespace fs = std::filesystem;
using gridq::testing::kSanitized;
using gridq::testing::repo_path;

std::string tmp_dir(const std::string& tag) {
  return (fs::temp_directory_path() / fmt::format("gridq_pipeline_{}_{}", ::getpid(), tag)).string();
}

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    src_ = tmp_dir("src");
    testing::TinyLaguna o;
    o.copy_tokenizer = true;
    testing::write_tiny_laguna(src_, o);
  }
  static void TearDownTestSuite() { fs::remove_all(src_); }

  static QuantizeOptions opts(const std::string& out) {
    QuantizeOptions q;
    q.src = src_;
    q.out = out;
    q.recipe = "laguna";
    q.repo_root = repo_path("");
    q.calib = repo_path("data/code-calib.txt");
    q.calib_tokens = kSanitized ? 256 : 1024;
    q.seq_len = 64;  // 16 sequences at 1024 tokens: one held out
    q.method = "rtn";
    q.progress = Progress::Mode::kQuiet;
    q.overwrite = true;
    return q;
  }
  static inline std::string src_;
};

TEST_F(PipelineTest, ResumedRunIsByteIdenticalToAnUninterruptedOne) {
  const std::string a = tmp_dir("a"), b = tmp_dir("b");
  QuantizeOptions oa = opts(a);
  oa.overlap_capture = "on";  // layer 1 captured while layer 0 is encoded; the bytes are the serial run's
  auto sa = quantize(oa);
  ASSERT_TRUE(sa.ok()) << sa.message();
  EXPECT_TRUE(sa->finished);
  EXPECT_TRUE(gridbook::Artifact::open(a).ok());

  QuantizeOptions ob = opts(b);
  ob.overlap_capture = "off";
  ob.stop_after_layer = 0;
  auto s1 = quantize(ob);
  ASSERT_TRUE(s1.ok()) << s1.message();
  EXPECT_FALSE(s1->finished);
  EXPECT_FALSE(fs::exists(b));
  EXPECT_TRUE(fs::exists(b + ".partial/resume/manifest.json"));

  // Different inputs: refused, naming what differs and the way out.
  QuantizeOptions other = opts(b);
  other.calib_tokens = ob.calib_tokens / 2;
  auto bad = quantize(other);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("options"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("--no-resume"), std::string::npos) << bad.message();

  ob.stop_after_layer = -1;
  ob.threads = 1;  // and the thread count does not matter
  ob.overlap_capture = "on";
  auto s2 = quantize(ob);
  ASSERT_TRUE(s2.ok()) << s2.message();
  EXPECT_TRUE(s2->finished);
  EXPECT_EQ(s2->resumed_at, 1);
  EXPECT_EQ(testing::dir_digests(a), testing::dir_digests(b));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_F(PipelineTest, MalformedInputsAreRefusedBeforeAnythingIsWritten) {
  const std::string out = tmp_dir("bad");
  auto expect_refused = [&](QuantizeOptions q, const std::string& needle) {
    q.overwrite = false;
    auto s = quantize(q);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(q.out)) << needle;
    EXPECT_FALSE(fs::exists(q.out + ".partial")) << needle;
  };
  // Unknown architecture.
  const std::string arch = tmp_dir("arch");
  fs::remove_all(arch);
  fs::copy(src_, arch, fs::copy_options::recursive);
  {
    auto cfg = io::read_json_file(arch + "/config.json");
    ASSERT_TRUE(cfg.ok());
    (*cfg)["architectures"] = {"MysteryForCausalLM"};
    std::ofstream(arch + "/config.json") << cfg->dump(2);
  }
  QuantizeOptions q = opts(out);
  q.src = arch;
  expect_refused(q, "MysteryForCausalLM");
  // Missing weights file.
  fs::remove(arch + "/model.safetensors");
  expect_refused(q, arch);
  fs::remove_all(arch);
  // A CB rule on a 1-D tensor; an unmatched tensor.
  const std::string rdir = tmp_dir("recipes");
  fs::create_directories(rdir);
  auto base = io::read_json_file(repo_path("recipes/laguna.json"));
  ASSERT_TRUE(base.ok());
  nlohmann::json bad = *base;
  bad["rules"].insert(bad["rules"].begin(), nlohmann::json::object({{"match", "model\\.norm\\.weight"},
                                                                    {"format", "NVFP4_CB_K16"}}));
  std::ofstream(rdir + "/bad.json") << bad.dump();
  q = opts(out);
  q.recipe = rdir + "/bad.json";
  expect_refused(q, "model.norm.weight");
  nlohmann::json un = *base;
  un["rules"].erase(un["rules"].end() - 1);
  std::ofstream(rdir + "/un.json") << un.dump();
  q.recipe = rdir + "/un.json";
  expect_refused(q, "lm_head.weight");
  fs::remove_all(rdir);
  // An existing OUT without --overwrite.
  fs::create_directories(out);
  q = opts(out);
  q.overwrite = false;
  auto s = quantize(q);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--overwrite"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(out + ".partial"));
  fs::remove_all(out);
}

}  // namespace
}  // namespace gridq::quant
