// Structured-output request fields (docs/serving.md "Structured outputs"): every accepted spelling becomes
// the GrammarSpec it means, and every malformed, unsupported or conflicting one is a 400 naming the field.
#include <gtest/gtest.h>

#include "serve/openai_protocol.h"

namespace gridq::serve {
namespace {

using grammar::InputKind;
const Limits kLim{4096, 4096};

ojson chat_with(const char* extra) {
  ojson b = ojson::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  const ojson more = ojson::parse(extra);
  for (auto it = more.begin(); it != more.end(); ++it) b[it.key()] = it.value();
  return b;
}

std::optional<GrammarSpec> spec_of(const char* extra) {
  auto r = parse_chat_request(chat_with(extra), kLim);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << extra << " -> " << e->message;
  if (!std::holds_alternative<ChatRequest>(r)) return std::nullopt;
  return std::get<ChatRequest>(r).gen.grammar;
}

ApiError error_of(const char* extra) {
  auto r = parse_chat_request(chat_with(extra), kLim);
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << extra << " was accepted";
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(StructuredRequest, ResponseFormatKinds) {
  EXPECT_FALSE(spec_of(R"({"response_format":{"type":"text"}})").has_value());
  EXPECT_FALSE(spec_of(R"({"response_format":null})").has_value());
  auto o = spec_of(R"({"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, InputKind::kJsonObject);
  EXPECT_EQ(o->param, "response_format");
  auto s = spec_of(
      R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
          "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, InputKind::kJsonSchema);
  EXPECT_EQ(ojson::parse(s->text)["properties"]["a"]["type"], "integer");
  EXPECT_EQ(s->param, "response_format.json_schema.schema");
  EXPECT_FALSE(s->flexible_whitespace);
  // strict: false still constrains (the schema is always enforced).
  auto ns = spec_of(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":false,
                        "schema":{"type":"string"}}}})");
  ASSERT_TRUE(ns);
  EXPECT_EQ(ns->kind, InputKind::kJsonSchema);
}

TEST(StructuredRequest, ResponseFormatErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"response_format":"json"})", "response_format"},
      {R"({"response_format":{"type":"yaml"}})", "response_format.type"},
      {R"({"response_format":{"type":"json_schema"}})", "response_format.json_schema"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})",
       "response_format.json_schema.name"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})",
       "response_format.json_schema.schema"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":3}}})",
       "response_format.json_schema.schema"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{},"strict":"yes"}}})",
       "response_format.json_schema.strict"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{},"extra":1}}})",
       "response_format.json_schema"},
  };
  for (const auto& c : cases) {
    ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(StructuredRequest, StructuredOutputsObject) {
  auto j = spec_of(R"({"structured_outputs":{"json":{"type":"integer"}}})");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->kind, InputKind::kJsonSchema);
  EXPECT_EQ(j->param, "structured_outputs.json");
  auto js = spec_of(R"({"structured_outputs":{"json":"{\"type\":\"boolean\"}"}})");  // a string holding one
  ASSERT_TRUE(js);
  EXPECT_EQ(ojson::parse(js->text)["type"], "boolean");
  auto r = spec_of(R"({"structured_outputs":{"regex":"[a-c]{3}"}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, InputKind::kRegex);
  EXPECT_EQ(r->text, "[a-c]{3}");
  auto c = spec_of(R"({"structured_outputs":{"choice":["yes","no"]}})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, InputKind::kChoice);
  EXPECT_EQ(ojson::parse(c->text), ojson::parse(R"(["yes","no"])"));
  auto g = spec_of(R"({"structured_outputs":{"grammar":"root ::= \"a\""}})");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->kind, InputKind::kGbnf);
  auto o = spec_of(R"({"structured_outputs":{"json_object":true,"disable_any_whitespace":false}})");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, InputKind::kJsonObject);
  EXPECT_TRUE(o->flexible_whitespace);
  // null members are absent; json_object false is not a constraint by itself.
  auto n = spec_of(R"({"structured_outputs":{"regex":"x","json":null,"json_object":false}})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->kind, InputKind::kRegex);
}

TEST(StructuredRequest, StructuredOutputsErrors) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"structured_outputs":[]})", "structured_outputs"},
      {R"({"structured_outputs":{}})", "structured_outputs"},
      {R"({"structured_outputs":{"regex":"a","choice":["a"]}})", "structured_outputs"},
      {R"({"structured_outputs":{"regex":"a","whatever":1}})", "structured_outputs"},
      {R"({"structured_outputs":{"regex":""}})", "structured_outputs.regex"},
      {R"({"structured_outputs":{"regex":3}})", "structured_outputs.regex"},
      {R"({"structured_outputs":{"choice":[]}})", "structured_outputs.choice"},
      {R"({"structured_outputs":{"choice":["a",1]}})", "structured_outputs.choice"},
      {R"({"structured_outputs":{"json":"not json"}})", "structured_outputs.json"},
      {R"({"structured_outputs":{"json":[1]}})", "structured_outputs.json"},
      {R"({"structured_outputs":{"json_object":"yes"}})", "structured_outputs.json_object"},
      {R"({"structured_outputs":{"regex":"a","structural_tag":"{}"}})", "structured_outputs.structural_tag"},
      {R"({"structured_outputs":{"regex":"a","whitespace_pattern":" *"}})",
       "structured_outputs.whitespace_pattern"},
  };
  for (const auto& c : cases) {
    ApiError e = error_of(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
  }
  EXPECT_EQ(error_of(R"({"structured_outputs":{"regex":"a","structural_tag":"{}"}})").code,
            "unsupported_parameter");
}

TEST(StructuredRequest, GuidedFieldsAndExclusivity) {
  auto j = spec_of(R"({"guided_json":{"type":"number"},"guided_decoding_backend":"xgrammar"})");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->kind, InputKind::kJsonSchema);
  EXPECT_EQ(j->param, "guided_json");
  auto r = spec_of(R"({"guided_regex":"\\d+"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, InputKind::kRegex);
  auto c = spec_of(R"({"guided_choice":["a","b"]})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, InputKind::kChoice);
  auto g = spec_of(R"({"guided_grammar":"root ::= [a-z]+"})");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->kind, InputKind::kGbnf);

  EXPECT_EQ(error_of(R"({"guided_json":{},"guided_regex":"a"})").param, "guided_regex");
  EXPECT_EQ(error_of(R"({"guided_whitespace_pattern":" "})").code, "unsupported_parameter");
  EXPECT_EQ(error_of(R"({"guided_choice":"a"})").param, "guided_choice");
  // Two sources of a constraint are refused, naming the second.
  EXPECT_EQ(error_of(R"({"response_format":{"type":"json_object"},"guided_regex":"a"})").param,
            "guided_regex");
  EXPECT_EQ(
      error_of(R"({"response_format":{"type":"json_object"},"structured_outputs":{"regex":"a"}})").param,
      "structured_outputs.regex");
  EXPECT_EQ(error_of(R"({"structured_outputs":{"regex":"a"},"guided_choice":["a"]})").param, "guided_choice");
  // text does not constrain, so it combines with anything.
  EXPECT_TRUE(spec_of(R"({"response_format":{"type":"text"},"guided_regex":"a"})").has_value());
}

TEST(StructuredRequest, ToolChoiceThatForcesACallConflicts) {
  const char* tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  for (const char* tc : {R"("required")", R"({"type":"function","function":{"name":"f"}})"}) {
    std::string body =
        std::string("{") + tools + ",\"tool_choice\":" + tc + R"(,"response_format":{"type":"json_object"}})";
    auto r = parse_chat_request(chat_with(body.c_str()), kLim);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << tc;
    EXPECT_EQ(std::get<ApiError>(r).param, "response_format");
  }
  std::string ok =
      std::string("{") + tools + R"(,"tool_choice":"auto","response_format":{"type":"json_object"}})";
  EXPECT_TRUE(std::holds_alternative<ChatRequest>(parse_chat_request(chat_with(ok.c_str()), kLim)));
}

TEST(StructuredRequest, CompletionsTakeTheSameFields) {
  ojson b = ojson::parse(R"({"model":"m","prompt":"x","structured_outputs":{"choice":["a","b"]}})");
  auto r = parse_completion_request(b, kLim);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  ASSERT_TRUE(std::get<CompletionRequest>(r).gen.grammar);
  EXPECT_EQ(std::get<CompletionRequest>(r).gen.grammar->kind, InputKind::kChoice);
  b["response_format"] = ojson::parse(R"({"type":"json_object"})");
  auto e = parse_completion_request(b, kLim);
  ASSERT_TRUE(std::holds_alternative<ApiError>(e));
  EXPECT_EQ(std::get<ApiError>(e).param, "structured_outputs.choice");
}

}  // namespace
}  // namespace gridq::serve
