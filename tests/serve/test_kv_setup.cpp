// gridq serve's KV set-up (serve/kv_setup.h): prefix caching fails closed on a backend without it (a log line
// and serving without it by default; an error when asked for explicitly), and is turned on in the backend
// when it has it; the page pool reaches gridq:cache_config_info.
#include <gtest/gtest.h>

#include "model/model_spec.h"
#include "serve/kv_setup.h"

namespace gridq::serve {
namespace {

// The least backend: pages accounted, no prefix cache unless `prefix` (then it records being switched).
class StubBackend final : public runtime::Backend {
 public:
  explicit StubBackend(bool prefix) : prefix_(prefix) {}
  const model::ModelSpec& spec() const override { return spec_; }
  Status add_sequence(runtime::SeqId) override { return {}; }
  void remove_sequence(runtime::SeqId) override {}
  int64_t sequence_length(runtime::SeqId) const override { return 0; }
  Status forward(std::span<const runtime::BatchItem>, std::vector<float>&) override { return {}; }
  runtime::KvPageStats kv_pages() const override { return {16, 10, 0, 0}; }
  bool supports_prefix_caching() const override { return prefix_; }
  Status set_prefix_caching(bool on) override {
    if (on && !prefix_) return err("stub: no prefix cache");
    switched_on = on;
    return {};
  }
  bool switched_on = false;

 private:
  bool prefix_;
  model::ModelSpec spec_;
};

TEST(KvSetup, PrefixCachingFailsClosedOnABackendWithoutIt) {
  std::vector<std::string> lines;
  auto log = [&](const std::string& s) { lines.push_back(s); };
  {
    Metrics m("stub");
    auto r = make_serve_engine(runtime::Engine::from_backend(std::make_unique<StubBackend>(false), {}), 4096,
                               true, false, m, log);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_FALSE((*r)->prefix_caching());
    bool said = false;
    for (const auto& l : lines) said = said || l.find("prefix caching: not supported") != std::string::npos;
    EXPECT_TRUE(said);
    const std::string text = m.render();
    EXPECT_NE(text.find("block_size=\"16\",num_gpu_blocks=\"10\",enable_prefix_caching=\"False\""),
              std::string::npos)
        << text;
  }
  {
    Metrics m("stub");
    auto r = make_serve_engine(runtime::Engine::from_backend(std::make_unique<StubBackend>(false), {}), 4096,
                               true, true, m, log);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("--enable-prefix-caching"), std::string::npos) << r.message();
  }
  {
    Metrics m("stub");
    auto be = std::make_unique<StubBackend>(true);
    StubBackend* raw = be.get();
    auto r = make_serve_engine(runtime::Engine::from_backend(std::move(be), {}), 4096, true, true, m, log);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE((*r)->prefix_caching());
    EXPECT_TRUE(raw->switched_on);
    // The pool (160 tokens) is smaller than max_model_len: said at start.
    EXPECT_NE(lines.back().find("WARNING: max_model_len 4096 exceeds the KV cache (160 tokens)"),
              std::string::npos)
        << lines.back();
  }
}

}  // namespace
}  // namespace gridq::serve
