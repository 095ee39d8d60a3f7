// Non-finite logits are detected so the request fails with a 500 naming the cause (issue 14 item 4).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "runtime/sampler.h"
#include "serve/logit_check.h"

namespace gridq::serve {
namespace {

TEST(LogitCheck, FiniteRowsPass) {
  std::vector<float> row = {0.5f, -3.0f, 12.0f, -std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(runtime::nonfinite_logits(row).has_value());
}

TEST(LogitCheck, NanAndInfinityAreNamed) {
  std::vector<float> row(4096, 0.0f);
  row[17] = std::numeric_limits<float>::quiet_NaN();
  auto m = runtime::nonfinite_logits(row);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("1 NaN"), std::string::npos) << *m;
  EXPECT_NE(m->find("token id 17"), std::string::npos) << *m;
  row[17] = 0.0f;
  row[3] = std::numeric_limits<float>::infinity();
  m = runtime::nonfinite_logits(row);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("1 +inf"), std::string::npos) << *m;
  std::vector<float> all_neg(8, -std::numeric_limits<float>::infinity());
  m = runtime::nonfinite_logits(all_neg);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("no finite logit"), std::string::npos);
}

struct Recorder final : SchedRequest {
  bool on_token(int, const runtime::SampledToken&) override { return false; }
  void on_choice_done(int, FinishReason) override {}
  void on_error(int s, const std::string& c, const std::string& m) override {
    ++errors;
    status = s;
    code = c;
    message = m;
  }
  int errors = 0, status = 0;
  std::string code, message;
};

TEST(LogitCheck, FailsTheRequestOnceWithA500) {
  Recorder r;
  // What the sampler returns for a usable row and for a row with a NaN (runtime::Sampler::run).
  runtime::SamplePlan plan;
  std::vector<float> good_row = {1.0f, 2.0f};
  const runtime::SampledToken good = runtime::Sampler::run(plan, good_row);
  EXPECT_FALSE(fail_on_non_finite(good, r));
  EXPECT_FALSE(r.cancelled);
  std::vector<float> bad_row = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  const runtime::SampledToken bad = runtime::Sampler::run(plan, bad_row);
  EXPECT_EQ(bad.token, -1);
  EXPECT_TRUE(fail_on_non_finite(bad, r));
  EXPECT_TRUE(fail_on_non_finite(bad, r));  // a second choice of the same request: no second error
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(r.errors, 1);
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.code, "non_finite_logits");
  EXPECT_NE(r.message.find("NaN"), std::string::npos);
}

}  // namespace
}  // namespace gridq::serve
