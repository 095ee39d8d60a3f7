// --cpu-weights: the matrices copied onto huge pages are the same bytes, so the engine's logits are the same
// bits as reading them from the mmap; the copy covers every matrix (tied ones once) and lands on 2 MiB
// boundaries; bad names are refused before anything loads.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "core/huge_pages.h"
#include "greedy_logits.h"
#include "model/loader.h"
#include "parity_util.h"
#include "runtime/cpu/weight_pages.h"
#include "runtime/engine.h"
#include "runtime/model_weights.h"

namespace gridq::runtime {
namespace {

TEST(HugeRegion, AlignedZeroedAndWritable) {
  auto r = HugeRegion::allocate(3 * kHugePageBytes + 5);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(r->data()) % kHugePageBytes);
  EXPECT_EQ(3 * kHugePageBytes + 5, r->size());
  for (size_t i = 0; i < r->size(); i += 4096) EXPECT_EQ(0, r->data()[i]) << i;
  std::memset(r->data(), 0x5a, r->size());
  EXPECT_EQ(0x5a, r->data()[r->size() - 1]);
  const int64_t huge =
      r->huge_bytes();  // whether the kernel granted them is its choice; never above the size
  EXPECT_LE(huge, static_cast<int64_t>(r->size()));
  HugeRegion moved = std::move(*r);
  EXPECT_EQ(nullptr, r->data());
  EXPECT_EQ(0x5a, moved.data()[0]);
}

TEST(CpuWeightPages, CopyCoversEveryMatrixOnce) {
  auto lm = model::load_model(testing::repo_path("models/laguna-tiny-code"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  auto w = build_model_weights(lm->spec, lm->weights);
  ASSERT_TRUE(w.ok()) << w.message();
  std::vector<std::vector<uint8_t>> before;  // the first and last row of every matrix, as mapped
  std::set<const void*> sources;
  for_each_matrix(*w, [&](const QMatrix& m) {
    if (m.rows == 0) return;
    sources.insert(m.data);
    const size_t row = m.format == WeightFormat::kBF16 ? static_cast<size_t>(m.cols) * 2 : 0;
    ASSERT_GT(row, 0u) << "the bundled model is BF16";
    const auto* p = static_cast<const uint8_t*>(m.data);
    before.emplace_back(p, p + row);
    before.emplace_back(p + row * static_cast<size_t>(m.rows - 1), p + row * static_cast<size_t>(m.rows));
  });
  auto c = cpu::place_weights(*w, cpu::WeightPages::kHuge, -1);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(static_cast<int64_t>(sources.size()), c->matrices);
  const uint8_t* lo = c->region.data();
  const uint8_t* hi = lo + c->region.size();
  size_t i = 0;
  for_each_matrix(*w, [&](const QMatrix& m) {
    if (m.rows == 0) return;
    const auto* p = static_cast<const uint8_t*>(m.data);
    const size_t row = static_cast<size_t>(m.cols) * 2;
    EXPECT_TRUE(p >= lo && p + row * static_cast<size_t>(m.rows) <= hi) << "a matrix outside the copy";
    EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(p) % 64) << "each copy starts on a line";
    EXPECT_EQ(0, std::memcmp(p, before[i].data(), row));
    EXPECT_EQ(0, std::memcmp(p + row * static_cast<size_t>(m.rows - 1), before[i + 1].data(), row));
    i += 2;
  });
}

// The copy never risks the memory a model streamed through the mmap needs: `auto` keeps the mmap (and says
// why) when the copy would take over half of MemAvailable, an explicit `huge-pages` is refused when it would
// not fit at all; the matrices are left untouched either way.
TEST(CpuWeightPages, ACopyThatDoesNotFitIsRefusedOrSkipped) {
  auto lm = model::load_model(testing::repo_path("models/laguna-tiny-code"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  auto w = build_model_weights(lm->spec, lm->weights);
  ASSERT_TRUE(w.ok()) << w.message();
  const void* before = w->lm_head.data;
  const int64_t small = int64_t{40} << 20;  // 40 MiB: below the bundled model's 47 MiB
  auto a = cpu::place_weights(*w, cpu::WeightPages::kAuto, small);
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(nullptr, a->region.data());
  EXPECT_NE(std::string::npos, cpu::weight_pages_log(*a).find("over half of the"))
      << cpu::weight_pages_log(*a);
  auto h = cpu::place_weights(*w, cpu::WeightPages::kHuge, small);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(std::string::npos, h.message().find("MemAvailable")) << h.message();
  EXPECT_EQ(before, w->lm_head.data);
  auto fits = cpu::place_weights(*w, cpu::WeightPages::kAuto, int64_t{1} << 40);
  ASSERT_TRUE(fits.ok()) << fits.message();
  EXPECT_NE(nullptr, fits->region.data());
  EXPECT_NE(before, w->lm_head.data);
  EXPECT_GT(cpu::mem_available_bytes(), 0) << "this Linux has /proc/meminfo";
}

std::vector<float> greedy(const std::string& weights, const testing::Fixture& fx,
                          const std::string& kernels) {
  EngineOptions o;
  o.device = "cpu";
  o.cpu_weights = weights;
  o.cpu_kernels = kernels;
  o.prefill_chunk = 29;
  auto eng = Engine::open(testing::repo_path("models/laguna-tiny-code"), o);
  EXPECT_TRUE(eng.ok()) << eng.message();
  if (!eng.ok()) return {};
  const bool copied = (*eng)->device_log().find("copied onto 2 MiB pages") != std::string::npos;
  EXPECT_EQ(weights == "huge-pages", copied) << (*eng)->device_log();
  const int64_t n = testing::kSanitized ? 30 : std::min<int64_t>(fx.T, 90);
  return testing::prefill_then_greedy(**eng, std::span<const int32_t>(fx.ids.data(), static_cast<size_t>(n)),
                                      testing::kSanitized ? 2 : 6);
}

TEST(CpuWeightPages, HugePagesGiveTheMmapsBits) {
  if (!thp_available(thp_mode())) GTEST_SKIP() << "transparent huge pages are off on this kernel";
  auto fx =
      testing::load_fixture(testing::repo_path("tests/fixtures/laguna-tiny-code.hf-logits.safetensors"));
  const auto mapped = greedy("mmap", fx, "reference");
  const auto huge = greedy("huge-pages", fx, "reference");
  ASSERT_FALSE(mapped.empty());
  ASSERT_EQ(mapped.size(), huge.size());
  EXPECT_EQ(0, std::memcmp(mapped.data(), huge.data(), mapped.size() * sizeof(float)));
}

TEST(CpuWeightPages, RefusesUnknownNamesBeforeLoading) {
  EngineOptions o;
  o.device = "cpu";
  o.cpu_weights = "hugepages";
  auto eng = Engine::open("/nonexistent/model", o);  // refused before the directory is read
  ASSERT_FALSE(eng.ok());
  EXPECT_NE(std::string::npos, eng.message().find("cpu weights 'hugepages'")) << eng.message();
  if (!thp_available(thp_mode())) {
    o.cpu_weights = "huge-pages";
    auto e2 = Engine::open("/nonexistent/model", o);
    ASSERT_FALSE(e2.ok());
    EXPECT_NE(std::string::npos, e2.message().find("transparent_hugepage")) << e2.message();
  }
}

}  // namespace
}  // namespace gridq::runtime
