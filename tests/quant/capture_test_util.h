// Shared by the capture tests (test_capture.cpp, test_calib_set.cpp): the small calibration set of
// laguna-tiny-code and one streamed pass over all its layers (computed once per test binary).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../runtime/parity_util.h"
#include "quant/capture.h"
#include "quant_test_util.h"

namespace gridq::quant::capture_test {

namespace fs = std::filesystem;
using gridq::testing::repo_path;

inline constexpr int kSeqLen = gridq::testing::kSanitized ? 64 : 128,
                     kSeqs = gridq::testing::kSanitized ? 4 : 8;
inline constexpr int kHoldEvery = 4;  // sequences 3 (and 7) are held out

inline std::string model_dir() { return repo_path("models/laguna-tiny-code"); }
inline std::string tokenizer_json() { return model_dir() + "/tokenizer.json"; }

inline std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A prefix of data/code-calib.txt (whole lines) written to a temp file (removed at exit): enough for
// kSeqs × kSeqLen tokens, small enough to tokenize in a blink.
inline std::string small_calib_file(size_t bytes) {
  struct Files {
    std::map<size_t, std::string> paths;
    ~Files() {
      for (const auto& [n, p] : paths) fs::remove(p);
    }
  };
  static Files files;
  auto it = files.paths.find(bytes);
  if (it != files.paths.end()) return it->second;
  std::string text = read_file(repo_path("data/code-calib.txt")).substr(0, bytes);
  text.resize(text.rfind('\n') + 1);
  const fs::path p = fs::temp_directory_path() / fmt::format("gridq-capture-{}-{}.txt", getpid(), bytes);
  std::ofstream(p, std::ios::binary) << text;
  return files.paths[bytes] = p.string();
}

inline const text::Tokenizer& tokenizer() {
  static const text::Tokenizer tok = *text::Tokenizer::from_file(tokenizer_json());
  return tok;
}

inline CalibSet small_calib() {
  CalibOptions o;
  o.tokens = int64_t{kSeqs} * kSeqLen;
  o.seq_len = kSeqLen;
  o.holdout_every = kHoldEvery;
  auto cs = make_calib_set(small_calib_file(24000), tokenizer(), tokenizer_json(), o);
  EXPECT_TRUE(cs.ok()) << cs.message();
  return cs.ok() ? *cs : CalibSet{};
}

inline bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline std::vector<const InputStats*> all_inputs(const LayerCapture& c) {
  std::vector<const InputStats*> v = {&c.attn_in, &c.o_in, &c.mlp_in, &c.dense_down_in, &c.shared_down_in};
  for (const auto& s : c.expert_in) v.push_back(&s);
  for (const auto& s : c.expert_down_in) v.push_back(&s);
  return v;
}

// Every H, imatrix and holdout row of two captures is byte-identical.
inline void expect_same_capture(const LayerCapture& a, const LayerCapture& b) {
  const auto va = all_inputs(a), vb = all_inputs(b);
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) {
    EXPECT_EQ(va[i]->name, vb[i]->name);
    EXPECT_EQ(va[i]->n, vb[i]->n) << va[i]->name;
    EXPECT_TRUE(same_bytes(va[i]->H, vb[i]->H)) << va[i]->name;
    EXPECT_TRUE(same_bytes(va[i]->imatrix, vb[i]->imatrix)) << va[i]->name;
    EXPECT_TRUE(same_bytes(va[i]->holdout, vb[i]->holdout)) << va[i]->name;
  }
  EXPECT_EQ(a.expert_counts, b.expert_counts);
}

// One streamed pass over all layers, shared by the tests that only read it.
struct Streamed {
  CalibSet calib;
  std::unique_ptr<LayerStreamer> st;
  std::vector<LayerCapture> caps;
  std::vector<std::vector<float>> h_in;  // [layer] the carry before the layer: h_l [n_tok, H]
};

inline const Streamed& streamed() {
  static Streamed* s = [] {
    auto* r = new Streamed();
    r->calib = small_calib();
    auto st = LayerStreamer::create(model_dir(), r->calib, {});
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return r;
    r->st = std::move(*st);
    for (int l = 0; l < r->st->num_layers(); ++l) {
      r->h_in.push_back(r->st->carry());
      auto cap = r->st->run_layer();
      EXPECT_TRUE(cap.ok()) << cap.message();
      if (!cap.ok()) break;
      std::printf("[capture] layer %d: %.3f s\n", l, cap->seconds);
      r->caps.push_back(std::move(*cap));
    }
    return r;
  }();
  return *s;
}

}  // namespace gridq::quant::capture_test
