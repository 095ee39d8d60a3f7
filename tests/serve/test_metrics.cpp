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

// issue 14 item 10: prometheus_client's parser types a counter's samples only when the TYPE line carries
// the `_total` name; vLLM's names repeat the common families; the process_* metrics are there.
TEST(Metrics, CountersTypedOnTotalNamesWithVllmAndProcessFamilies) {
  Metrics m("model");
  m.add_prompt_tokens(7);
  const std::string out = m.render();
  EXPECT_NE(out.find("# TYPE gridq:prompt_tokens_total counter\ngridq:prompt_tokens_total{"),
            std::string::npos);
  EXPECT_EQ(out.find("# TYPE gridq:prompt_tokens counter"), std::string::npos);
  EXPECT_NE(out.find("vllm:prompt_tokens_total{model_name=\"model\"} 7\n"), std::string::npos);
  EXPECT_NE(out.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(out.find("# TYPE vllm:num_requests_running gauge"), std::string::npos);
  EXPECT_EQ(out.find("vllm:http_requests"), std::string::npos) << "only the families vLLM has";
  EXPECT_NE(out.find("\nprocess_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(out.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
}

// The step histograms: tokens a step in token buckets (vLLM's iteration_tokens_total, copied under its
// name), decode-step times in the fine step buckets; the step-time families are gridq's own.
TEST(Metrics, StepHistogramsBucketTheirOwnUnits) {
  Metrics m("model");
  m.observe(Hist::kIterTokens, 64);
  m.observe(Hist::kDecodeStep, 0.033);
  m.observe(Hist::kDecodeForward, 0.028);
  const std::string out = m.render();
  EXPECT_NE(out.find("gridq:iteration_tokens_total_bucket{model_name=\"model\",le=\"50\"} 0\n"
                     "gridq:iteration_tokens_total_bucket{model_name=\"model\",le=\"100\"} 1\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("vllm:iteration_tokens_total_count{model_name=\"model\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("gridq:decode_step_seconds_bucket{model_name=\"model\",le=\"0.03\"} 0\n"
                     "gridq:decode_step_seconds_bucket{model_name=\"model\",le=\"0.035\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("gridq:decode_step_forward_seconds_sum{model_name=\"model\"} 0.028\n"),
            std::string::npos);
  EXPECT_EQ(out.find("vllm:decode_step"), std::string::npos);
}

}  // namespace
}  // namespace gridq::serve
