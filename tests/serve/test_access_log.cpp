// --access-log and X-Request-Id (issue 14 item 10): a client's request id is used only when it is short and
// plain (it is echoed in a header and written to the log); log lines are JSON, so a path cannot forge one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve/access_log.h"

namespace gridq::serve {
namespace {

TEST(AccessLog, RequestIdTakenOnlyWhenSane) {
  EXPECT_EQ(request_id_for({{"x-request-id", "abc-123_x.y:z"}}), "abc-123_x.y:z");
  const std::string fresh = request_id_for({});
  EXPECT_FALSE(fresh.empty());
  EXPECT_NE(fresh, request_id_for({})) << "generated ids are random";
  for (const std::string& bad : {std::string(129, 'a'), std::string("a b"), std::string("a\r\nX: y"),
                                 std::string("\xc3\xa9"), std::string()}) {
    const std::string id = request_id_for({{"x-request-id", bad}});
    EXPECT_NE(id, bad);
    EXPECT_FALSE(id.empty());
  }
}

TEST(AccessLog, OneJsonLinePerEntry) {
  const auto path = std::filesystem::temp_directory_path() / "gridq-access-log-test.jsonl";
  std::filesystem::remove(path);
  {
    AccessLog log;
    ASSERT_TRUE(log.open(path.string()).ok());
    AccessEntry e;
    e.request_id = "r1";
    e.method = "POST";
    e.path = "/v1/x\n{\"forged\": true}\xff";
    e.status = 200;
    e.prompt_tokens = 3;
    e.completion_tokens = 4;
    log.write(e);
  }
  std::ifstream f(path);
  std::string line, extra;
  ASSERT_TRUE(std::getline(f, line));
  EXPECT_FALSE(std::getline(f, extra)) << "a newline in the path must not start a line";
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["request_id"], "r1");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["completion_tokens"], 4);
  EXPECT_FALSE(j.contains("forged"));
  std::filesystem::remove(path);
  AccessLog bad;
  EXPECT_FALSE(bad.open("/nonexistent-dir/x.log").ok());
}

}  // namespace
}  // namespace gridq::serve
