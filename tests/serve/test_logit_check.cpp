// Non-finite logits are detected so the request fails with a 500 naming the cause (issue 14 item 4).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "serve/logit_check.h"

namespace gridq::serve {
namespace {

TEST(LogitCheck, FiniteRowsPass) {
  std::vector<float> row = {0.5f, -3.0f, 12.0f, -std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(non_finite_logits(row).has_value());
}

TEST(LogitCheck, NanAndInfinityAreNamed) {
  std::vector<float> row(4096, 0.0f);
  row[17] = std::numeric_limits<float>::quiet_NaN();
  auto m = non_finite_logits(row);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("1 NaN"), std::string::npos) << *m;
  EXPECT_NE(m->find("token id 17"), std::string::npos) << *m;
  row[17] = 0.0f;
  row[3] = std::numeric_limits<float>::infinity();
  m = non_finite_logits(row);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("1 +inf"), std::string::npos) << *m;
  std::vector<float> all_neg(8, -std::numeric_limits<float>::infinity());
  m = non_finite_logits(all_neg);
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("no finite logit"), std::string::npos);
}

}  // namespace
}  // namespace gridq::serve
