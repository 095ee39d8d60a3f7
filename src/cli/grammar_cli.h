// Shared by `gridq grammar ...` and `gridq bench grammar`: reading a grammar input, a vocabulary with its
// end-of-sequence ids, and the test-case files of tests/grammar/schemas.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_read.h"
#include "core/status.h"
#include "grammar/compile.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

namespace gridq::cli {

struct LoadedVocab {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocab> vocab;
};
// DIR holds tokenizer.json (or is a tokenizer.json); EOS ids come from generation_config.json's
// eos_token_id and tokenizer_config.json's eos_token when present.
Expected<LoadedVocab> load_vocab(const std::string& dir);

// A file of tests/grammar/schemas: {"schema": ..., "valid": [...], "invalid": [...]} or a bare schema.
struct SchemaCase {
  std::string name;
  std::string schema_text;                  // the schema, serialized
  std::vector<std::string> valid, invalid;  // instances, serialized compact in their own key order
};
Expected<SchemaCase> read_schema_case(const std::string& path);

}  // namespace gridq::cli

namespace gridq::cli {

struct BenchGrammarFlags {
  std::string tokenizer, schemas, out;
  bool json = false, flexible_ws = false;
  int repeat = 1;
};
// `gridq bench grammar` (cmd_bench_grammar.cpp).
int run_bench_grammar(const BenchGrammarFlags& f);

}  // namespace gridq::cli
