// The API server's side of structured outputs: the token vocabularies (built once, on the first constrained
// request, so a server that never sees one pays nothing) and the compiled-grammar caches.
#include <fmt/format.h>

#include "grammar/tool_call.h"
#include "serve/api_server.h"

namespace gridq::serve {

namespace {

std::vector<int32_t> end_ids(const ModelBinding& m) {
  std::vector<int32_t> ends = m.eos_ids;
  if (m.end_of_turn_id >= 0) ends.push_back(m.end_of_turn_id);
  return ends;
}

// The tool vocabulary: the <tool_call>/</tool_call> ids read as grammar::kToolCallOpen/Close, and every
// other token holding a 0xFF byte (never part of UTF-8 text) is left out, so nothing else can spell them.
std::shared_ptr<const grammar::TokenVocab> tool_vocab(const ModelBinding& m) {
  const text::Tokenizer& tok = *m.tok;
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<bool> special(tok.vocab_size(), false);
  for (size_t id = 0; id < bytes.size(); ++id) {
    auto i = static_cast<int32_t>(id);
    if (!tok.is_known(i)) continue;
    bytes[id] = tok.token_bytes(i);
    special[id] = tok.is_special(i) || bytes[id].find('\xff') != std::string::npos;
  }
  for (auto [id, marker] : {std::pair{m.tool_call_open_id, grammar::kToolCallOpen},
                            std::pair{m.tool_call_close_id, grammar::kToolCallClose}}) {
    bytes[static_cast<size_t>(id)] = std::string(marker);
    special[static_cast<size_t>(id)] = false;
  }
  return std::make_shared<const grammar::TokenVocab>(std::move(bytes), std::move(special), end_ids(m));
}

}  // namespace

std::variant<std::shared_ptr<CompiledGrammar>, ApiError> ApiServer::request_grammar(const GenParams& g) {
  if (!g.grammar) return std::shared_ptr<CompiledGrammar>();
  std::call_once(grammars_once_, [&] {
    grammars_ =
        std::make_unique<GrammarCache>(grammar::TokenVocab::from_tokenizer(*model_.tok, end_ids(model_)));
  });
  auto cg = grammars_->get(*g.grammar);
  if (!cg.ok()) return invalid(g.grammar->param, fmt::format("{}: {}", g.grammar->param, cg.message()));
  return std::move(*cg);
}

std::variant<std::shared_ptr<CompiledGrammar>, ApiError> ApiServer::tool_grammar(const ChatRequest& r) {
  const bool forced = r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed;
  // The poolside_v1 and JSON (hermes) syntaxes have grammars; without a tool parser nothing is forced.
  if (!forced || r.tools.is_null() || model_.tool_parser == ToolParserKind::kNone ||
      model_.tool_call_open_id < 0 || model_.tool_call_close_id < 0)
    return std::shared_ptr<CompiledGrammar>();
  const bool json = model_.tool_parser == ToolParserKind::kJson;
  std::call_once(tool_grammars_once_,
                 [&] { tool_grammars_ = std::make_unique<GrammarCache>(tool_vocab(model_)); });
  const std::string name = r.tool_choice == ToolChoice::kNamed ? r.tool_choice_name : "";
  std::string key =
      fmt::format("tools:{}:{}:{}:", json ? "json" : "poolside", r.parallel_tool_calls ? 1 : 0, name);
  key += dump(r.tools);
  auto cg = tool_grammars_->get(std::move(key), [&] {
    return json ? grammar::compile_json_tool_calls(r.tools, name, r.parallel_tool_calls)
                : grammar::compile_poolside_tool_calls(r.tools, name, r.parallel_tool_calls);
  });
  if (!cg.ok()) return invalid("tools", "tool_choice forces a call, but " + cg.message());
  return std::move(*cg);
}

}  // namespace gridq::serve
