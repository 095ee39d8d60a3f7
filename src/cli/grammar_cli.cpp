#include "cli/grammar_cli.h"

#include <algorithm>
#include <filesystem>

namespace gridq::cli {

Expected<LoadedVocab> load_vocab(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string tok_path = dir, base = dir;
  if (fs::is_directory(dir)) {
    tok_path = (fs::path(dir) / "tokenizer.json").string();
  } else {
    base = fs::path(dir).parent_path().string();
  }
  auto tok = text::Tokenizer::from_file(tok_path);
  if (!tok) return tok.error();
  auto shared = std::make_shared<const text::Tokenizer>(std::move(*tok));
  std::vector<int32_t> eos;
  auto add = [&](int64_t id) {
    if (id >= 0 && std::find(eos.begin(), eos.end(), id) == eos.end())
      eos.push_back(static_cast<int32_t>(id));
  };
  if (auto gc = read_file_bytes((fs::path(base) / "generation_config.json").string()); gc.ok()) {
    auto j = nlohmann::json::parse(*gc, nullptr, false);
    if (j.is_object() && j.contains("eos_token_id")) {
      if (j["eos_token_id"].is_number_integer()) add(j["eos_token_id"].get<int64_t>());
      if (j["eos_token_id"].is_array())
        for (const auto& e : j["eos_token_id"])
          if (e.is_number_integer()) add(e.get<int64_t>());
    }
  }
  if (auto tc = read_file_bytes((fs::path(base) / "tokenizer_config.json").string()); tc.ok()) {
    auto j = nlohmann::json::parse(*tc, nullptr, false);
    if (j.is_object() && j.contains("eos_token")) {
      const auto& e = j["eos_token"];
      std::string t = e.is_string() ? e.get<std::string>() : e.is_object() ? e.value("content", "") : "";
      if (!t.empty()) add(shared->token_id(t));
    }
  }
  LoadedVocab v;
  v.vocab = grammar::TokenVocab::from_tokenizer(*shared, eos);
  v.tokenizer = shared;
  return v;
}

Expected<SchemaCase> read_schema_case(const std::string& path) {
  GRIDQ_ASSIGN_OR_RETURN(std::string text, read_file_bytes(path));
  SchemaCase c;
  c.name = std::filesystem::path(path).stem().string();
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const std::exception& e) {
    // Not JSON at all: the compiler reports it with its own message.
    c.schema_text = text;
    return c;
  }
  if (j.is_object() && j.contains("schema") &&
      (j.contains("valid") || j.contains("invalid") || j.contains("error"))) {
    c.schema_text = j["schema"].dump();
    for (const auto& v : j.value("valid", nlohmann::ordered_json::array())) c.valid.push_back(v.dump());
    for (const auto& v : j.value("invalid", nlohmann::ordered_json::array())) c.invalid.push_back(v.dump());
  } else {
    c.schema_text = text;
  }
  return c;
}

}  // namespace gridq::cli
