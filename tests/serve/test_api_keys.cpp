// --api-key-file parsing (issue 14 item 6): trimmed keys, blank and # lines skipped, no empty key set.
#include <gtest/gtest.h>

#include "serve/api_keys.h"

namespace gridq::serve {
namespace {

TEST(ApiKeyFile, TrimsAndSkipsBlankAndCommentLines) {
  auto k = parse_api_key_file(
      "# keys for the team\r\n  key-one  \r\n\n\t\n#key-off\nkey-two\t\n   # indented\nk3", "f");
  ASSERT_TRUE(k.ok()) << k.message();
  EXPECT_EQ(*k, (std::vector<std::string>{"key-one", "key-two", "k3"}));
}

TEST(ApiKeyFile, RefusesAnEmptyKeySet) {
  for (const char* text : {"", "\n\n", "  \r\n\t\n", "# only a comment\n#another\n"}) {
    auto k = parse_api_key_file(text, "keys.txt");
    ASSERT_FALSE(k.ok()) << "'" << text << "'";
    EXPECT_NE(k.message().find("keys.txt"), std::string::npos);
    EXPECT_NE(k.message().find("no API key"), std::string::npos);
  }
}

TEST(ApiKeyFile, RefusesKeysWithInnerWhitespace) {
  auto k = parse_api_key_file("good\nkey1 key2\n", "f");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.message().find("line 2"), std::string::npos) << k.message();
}

}  // namespace
}  // namespace gridq::serve
