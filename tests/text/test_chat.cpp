// Chat rendering on the bundled model: the four worked examples in chat_template_examples.md byte for byte,
// the double-BOS rule, OpenAI string arguments, reserved kwargs. Parity with python jinja2 on more cases is in
// tests/python/test_chat_template_parity.py.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "text/chat.h"

namespace gridq::text {
namespace {

using ojson = nlohmann::ordered_json;
const std::string kModel = std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code";

std::string read(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ChatTemplate& tmpl() {
  static const ChatTemplate t = [] {
    auto r = ChatTemplate::load(kModel);
    if (!r) {
      ADD_FAILURE() << r.message();
      std::abort();
    }
    return std::move(*r);
  }();
  return t;
}

// (variables, expected prompt) for each "## N." section: its first and last ```json blocks.
std::vector<std::pair<ojson, std::string>> examples() {
  const std::string md = read(kModel + "/chat_template_examples.md");
  std::vector<std::pair<ojson, std::string>> out;
  size_t pos = 0;
  while ((pos = md.find("\n## ", pos)) != std::string::npos) {
    const size_t end = md.find("\n## ", pos + 1);
    const std::string sec = md.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    std::vector<std::string> blocks;
    size_t b = 0;
    while ((b = sec.find("```json\n", b)) != std::string::npos) {
      const size_t e = sec.find("\n```", b + 8);
      blocks.push_back(sec.substr(b + 8, e - b - 8));
      b = e;
    }
    if (blocks.size() >= 2) out.emplace_back(ojson::parse(blocks.front()), ojson::parse(blocks.back()).get<std::string>());
    pos += 4;
  }
  return out;
}

TEST(Chat, BundledExamplesByteForByte) {
  const auto ex = examples();
  ASSERT_EQ(ex.size(), 4u);
  for (const auto& [vars, expected] : ex) {
    ojson kwargs = ojson::object();
    for (auto it = vars.begin(); it != vars.end(); ++it)
      if (it.key() != "messages" && it.key() != "tools" && it.key() != "add_generation_prompt") kwargs[it.key()] = it.value();
    auto r = render_chat(tmpl(), vars["messages"], vars.value("tools", ojson()), vars.value("add_generation_prompt", false),
                         kwargs);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(*r, expected);
  }
}

TEST(Chat, NoDoubleBos) {
  auto tok = Tokenizer::from_file(kModel + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  auto ids = encode_chat_prompt(*tok, tmpl(), msgs, ojson(), true, ojson());
  ASSERT_TRUE(ids.ok()) << ids.message();
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], tok->token_id("<|endoftext|>"));
  EXPECT_NE((*ids)[1], (*ids)[0]);
  // Ends with the generation prompt <assistant><think> as two control ids (README: ids 4 and 2).
  EXPECT_EQ((*ids)[ids->size() - 2], 4);
  EXPECT_EQ((*ids)[ids->size() - 1], 2);
}

TEST(Chat, OpenAiStringArgumentsAreDecoded) {
  const ojson as_string = ojson::parse(R"([{"role": "user", "content": "go"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": "{\"b\": 2, \"a\": \"x\\n\"}"}}]}])");
  const ojson as_object = ojson::parse(R"([{"role": "user", "content": "go"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"b": 2, "a": "x\n"}}}]}])");
  auto a = render_chat(tmpl(), as_string, ojson(), false, ojson());
  auto b = render_chat(tmpl(), as_object, ojson(), false, ojson());
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(*a, *b);
  EXPECT_NE(a->find("<tool_call>f<arg_key>b</arg_key><arg_value>2</arg_value><arg_key>a</arg_key><arg_value>x\n"
                    "</arg_value></tool_call>"),
            std::string::npos)
      << *a;
  ojson broken = as_string;
  broken[1]["tool_calls"][0]["function"]["arguments"] = "{not json";
  EXPECT_FALSE(render_chat(tmpl(), broken, ojson(), false, ojson()).ok());
}

TEST(Chat, ReservedKwargsAndBadInputsAreRejected) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  for (const char* k : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    EXPECT_FALSE(render_chat(tmpl(), msgs, ojson(), true, ojson{{k, 1}}).ok()) << k;
  EXPECT_FALSE(render_chat(tmpl(), ojson::object(), ojson(), true, ojson()).ok());
  EXPECT_FALSE(render_chat(tmpl(), msgs, ojson::object(), true, ojson()).ok());
  auto r = render_chat(tmpl(), ojson::parse(R"([{"role": "robot", "content": "x"}])"), ojson(), true, ojson());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unsupported message role: robot"), std::string::npos) << r.message();
}

TEST(Chat, ThinkingSwitchAndTokenizerConfigFallback) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  auto on = render_chat(tmpl(), msgs, ojson(), true, ojson());
  auto off = render_chat(tmpl(), msgs, ojson(), true, ojson{{"enable_thinking", false}});
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_TRUE(on->ends_with("<assistant><think>"));
  EXPECT_TRUE(off->ends_with("<assistant></think>"));
  // tokenizer_config.json carries the same template text (README): loading from it renders the same.
  const ojson cfg = ojson::parse(read(kModel + "/tokenizer_config.json"));
  auto t2 = ChatTemplate::from_source(cfg["chat_template"].get<std::string>(), cfg);
  ASSERT_TRUE(t2.ok()) << t2.message();
  EXPECT_EQ(t2->bos_token, "<|endoftext|>");
  auto r2 = render_chat(*t2, msgs, ojson(), true, ojson());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, *on);
}

}  // namespace
}  // namespace gridq::text
