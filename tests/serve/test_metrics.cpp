// Metric labels never take unbounded client values (issue 14 item 1): methods, handlers, statuses and finish
// reasons outside their closed lists are counted as "other", so /metrics stays the same size whatever
// clients send.
#include <gtest/gtest.h>

#include <string>

#include "serve/metrics.h"

namespace gridq::serve {
namespace {

TEST(Metrics, LabelsFoldUnknownValuesIntoOther) {
  EXPECT_EQ(method_label("GET"), "GET");
  EXPECT_EQ(method_label("PATCH"), "PATCH");
  EXPECT_EQ(method_label("get"), "other");  // methods are case-sensitive (RFC 9110 §9.1)
  EXPECT_EQ(method_label(std::string(8192, 'X')), "other");
  EXPECT_EQ(finish_reason_label("tool_calls"), "tool_calls");
  EXPECT_EQ(finish_reason_label("<|endoftext|>"), "other");
}

TEST(Metrics, ClientValuesDoNotGrowTheExposition) {
  Metrics m("model");
  m.allow_handler("/v1/models");
  m.inc_http("/v1/models", "GET", 200);
  const size_t before = m.render().size();
  for (int i = 0; i < 1000; ++i) {
    const std::string junk = std::string(64, 'A') + std::to_string(i);
    m.inc_http("/v1/models", junk, 405);        // a method token of the client's choosing
    m.inc_http("/" + junk, "GET", 404);         // a path that is not a route
    m.inc_http("/v1/models", "GET", 1000 + i);  // a status outside HTTP's range
    m.request_success(junk);                    // a finish reason that is not one
  }
  const std::string out = m.render();
  EXPECT_EQ(out.find("AAAA"), std::string::npos);
  // Three new series (method other, handler other, status other); the finish reasons' "other" series was
  // always there.
  EXPECT_LT(out.size(), before + 3 * 200) << out;
  EXPECT_NE(out.find("handler=\"/v1/models\",method=\"other\",status=\"405\"} 1000"), std::string::npos)
      << out;
  EXPECT_NE(out.find("handler=\"other\",method=\"GET\",status=\"404\"} 1000"), std::string::npos);
  EXPECT_NE(out.find("method=\"GET\",status=\"other\"} 1000"), std::string::npos);
  EXPECT_NE(out.find("finished_reason=\"other\"} 1000"), std::string::npos);
}

}  // namespace
}  // namespace gridq::serve
