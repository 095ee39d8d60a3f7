// `gridq grammar compile|check|sample`: the structured-output engine (src/grammar) from the command line.
// Exit codes: 0 ok/accept, 1 compile error or reject, 3 a sampling walk that dead-ends (an engine bug).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <set>

#include "cli/command.h"
#include "cli/grammar_cli.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

namespace gridq::cli {
namespace {

struct InputFlags {
  std::string path, expr;
  bool regex = false, choice = false, gbnf = false, json_object = false;
  bool flexible_ws = false, allow_extra = false;
};

void add_input_flags(CLI::App* c, InputFlags& f) {
  c->add_option("INPUT", f.path, "file with the schema (default), regex, choice list or grammar");
  c->add_option("-e,--expr", f.expr, "the input itself instead of a file");
  c->add_flag("--regex", f.regex, "INPUT is a regular expression the whole output must match");
  c->add_flag("--choice", f.choice, "INPUT is a JSON array of strings; the output is one of them");
  c->add_flag("--gbnf", f.gbnf, "INPUT is a GBNF grammar (llama.cpp syntax, start rule 'root')");
  c->add_flag("--json-object", f.json_object, "any JSON object (response_format json_object); no INPUT");
  c->add_flag("--flexible-ws", f.flexible_ws, "allow whitespace between JSON tokens (default: compact)");
  c->add_flag("--allow-extra-properties", f.allow_extra,
              "objects without additionalProperties may carry extra keys (default: none, like strict mode)");
}

Expected<std::shared_ptr<const grammar::Grammar>> compile_input(const InputFlags& f,
                                                                double* seconds = nullptr) {
  grammar::InputKind kind = grammar::InputKind::kJsonSchema;
  int kinds = f.regex + f.choice + f.gbnf + f.json_object;
  if (kinds > 1) return err("give at most one of --regex, --choice, --gbnf, --json-object");
  if (f.regex) kind = grammar::InputKind::kRegex;
  if (f.choice) kind = grammar::InputKind::kChoice;
  if (f.gbnf) kind = grammar::InputKind::kGbnf;
  if (f.json_object) kind = grammar::InputKind::kJsonObject;
  std::string text = f.expr;
  if (kind != grammar::InputKind::kJsonObject && f.expr.empty()) {
    if (f.path.empty()) return err("give INPUT (a file) or --expr");
    GRIDQ_ASSIGN_OR_RETURN(SchemaCase c, read_schema_case(f.path));
    text = c.schema_text;
    if (kind != grammar::InputKind::kJsonSchema) {
      GRIDQ_ASSIGN_OR_RETURN(text, read_file_bytes(f.path));
      // A regex file's final newline is the file's, not the pattern's.
      if (kind == grammar::InputKind::kRegex && !text.empty() && text.back() == '\n') text.pop_back();
    }
  }
  grammar::CompileOptions o;
  o.flexible_whitespace = f.flexible_ws;
  o.allow_additional_properties = f.allow_extra;
  auto t0 = std::chrono::steady_clock::now();
  auto g = grammar::compile(kind, text, o);
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

std::string show_bytes(const std::string& s, size_t at) {
  size_t lo = at > 20 ? at - 20 : 0;
  nlohmann::json before = s.substr(lo, at - lo), here = s.substr(at, 12);
  return before.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + " | " +
         here.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

int run_compile(const InputFlags& f) {
  double secs = 0;
  auto g = compile_input(f, &secs);
  if (!g) return fail(g.message());
  auto st = (*g)->stats();
  std::printf("ok: %zu rules, %zu alternatives, %zu symbols, %zu byte classes, compiled in %.3f ms\n",
              st.rules, st.alts, st.symbols, st.classes, secs * 1e3);
  return 0;
}

int run_check(const InputFlags& f, const std::string& text_file, const std::string& tok_dir) {
  auto g = compile_input(f);
  if (!g) return fail(g.message());
  auto text = read_file_bytes(text_file);
  if (!text) return fail(text.message());
  grammar::Matcher m(*g);
  if (tok_dir.empty()) {
    size_t n = m.advance_bytes(*text);
    if (n < text->size()) {
      std::printf("reject at byte %zu: %s\n", n, show_bytes(*text, n).c_str());
      return 1;
    }
  } else {
    // Token by token through the masks, as decoding would: each token must be in the mask of its state.
    auto v = load_vocab(tok_dir);
    if (!v) return fail(v.message());
    auto ids = v->tokenizer->try_encode(*text);
    if (!ids) return fail(ids.message());
    grammar::TokenMasker masker(v->vocab);
    std::vector<uint64_t> mask;
    size_t at = 0;
    for (size_t k = 0; k < ids->size(); ++k) {
      int32_t id = (*ids)[k];
      masker.compute(m, mask);
      const std::string& bytes = v->vocab->bytes(id);
      if (!grammar::mask_test(mask, id)) {
        size_t n = m.advance_bytes(bytes);
        std::printf("reject at token %zu (id %d) byte %zu: %s\n", k, id, at + n,
                    show_bytes(*text, at + n).c_str());
        return 1;
      }
      at += m.advance_bytes(bytes);
    }
    masker.compute(m, mask);
    bool eos_ok = v->vocab->eos_ids().empty() || grammar::mask_test(mask, v->vocab->eos_ids()[0]);
    if (m.accepting() != eos_ok) return fail("check: end-of-sequence mask disagrees with the matcher (bug)");
  }
  if (!m.accepting()) {
    std::printf("reject at byte %zu: input ends before the grammar is complete\n", text->size());
    return 1;
  }
  std::printf("accept: %zu bytes\n", text->size());
  return 0;
}

// The shortest byte string that takes the matcher to an accepting state (breadth-first over canonical
// states), for ending a long random walk; empty if none is found within the budget.
std::string shortest_completion(grammar::Matcher& m) {
  std::vector<std::string> queue = {""};
  std::set<std::vector<uint32_t>> seen = {m.canonical_key()};
  for (size_t q = 0; q < queue.size() && q < 20000; ++q) {
    const std::string path = queue[q];
    m.advance_bytes(path);
    grammar::ByteSet next = m.allowed();
    for (int b = 0; b < 256; ++b) {
      if (!next.test(b) || !m.advance(static_cast<uint8_t>(b))) continue;
      bool done = m.accepting();
      bool fresh = seen.insert(m.canonical_key()).second;
      m.rollback(1);
      if (done) {
        m.rollback(path.size());
        return path + static_cast<char>(b);
      }
      if (fresh) queue.push_back(path + static_cast<char>(b));
    }
    m.rollback(path.size());
  }
  return {};
}

int run_sample(const InputFlags& f, const std::string& tok_dir, uint64_t seed, int count, int max_tokens,
               bool jsonl) {
  auto g = compile_input(f);
  if (!g) return fail(g.message());
  auto v = load_vocab(tok_dir);
  if (!v) return fail(v.message());
  grammar::TokenMasker masker(v->vocab);
  std::mt19937_64 rng(seed);
  const auto& free_bits = v->vocab->free_bits();
  std::vector<int32_t> single_byte(256, -1);  // byte -> a token of exactly that byte
  for (size_t id = 0; id < v->vocab->size(); ++id) {
    const std::string& bytes = v->vocab->bytes(static_cast<int32_t>(id));
    if (bytes.size() == 1 && single_byte[static_cast<unsigned char>(bytes[0])] < 0)
      single_byte[static_cast<unsigned char>(bytes[0])] = static_cast<int32_t>(id);
  }
  for (int s = 0; s < count; ++s) {
    grammar::Matcher m(*g);
    std::string out;
    std::vector<uint64_t> mask;
    int steps = 0;
    while (!m.accepting()) {
      if (++steps > max_tokens) return fail("sample: no complete output within --max-tokens");
      masker.compute(m, mask);
      if (steps > max_tokens / 2) {
        // Long enough: finish on the shortest completion, one single-byte token at a time (each checked
        // against its mask like any other draw).
        std::string rest = shortest_completion(m);
        if (rest.empty()) return fail("sample: no completion found from this state"), 3;
        for (unsigned char c : rest) {
          masker.compute(m, mask);
          int32_t id = single_byte[c];
          if (id < 0 || !grammar::mask_test(mask, id) || !m.advance(c))
            return fail("sample: the completion's byte is not an allowed token (engine bug)"), 3;
          out += static_cast<char>(c);
        }
        break;
      }
      // A third of the draws prefer tokens that are not plain string text (quotes, punctuation) and a third
      // single-byte tokens, so strings and patterns reach their end in a few dozen tokens.
      std::vector<int32_t> any, structural, single;
      for (size_t w = 0; w < mask.size(); ++w)
        for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
          auto id = static_cast<int32_t>(w * 64 + __builtin_ctzll(bits));
          if (v->vocab->bytes(id).empty()) continue;
          any.push_back(id);
          if (!grammar::mask_test(free_bits, id)) structural.push_back(id);
          if (v->vocab->bytes(id).size() == 1) single.push_back(id);
        }
      if (any.empty()) return fail("sample: the mask is empty before the grammar accepts (engine bug)"), 3;
      uint64_t pick = rng() % 3;
      const auto& pool = (pick == 0 && !structural.empty()) ? structural
                         : (pick == 1 && !single.empty())   ? single
                                                            : any;
      int32_t id = pool[rng() % pool.size()];
      const std::string& bytes = v->vocab->bytes(id);
      if (m.advance_bytes(bytes) != bytes.size())
        return fail("sample: a masked-in token was refused (engine bug)"), 3;
      out += bytes;
    }
    if (jsonl) {
      nlohmann::json j = {{"text", out}, {"tokens", steps}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << out << "\n";
    }
  }
  return 0;
}

const Registrar reg{Command{
    "grammar",
    "Structured outputs: compile a JSON Schema / regex / choice / GBNF grammar, check a text, sample",
    [](CLI::App& sub) -> std::function<int()> {
      struct Opts {
        InputFlags in;
        std::string text, tokenizer;
        uint64_t seed = 1;
        int count = 1, max_tokens = 400;
        bool jsonl = false;
      };
      auto o = std::make_shared<Opts>();
      sub.require_subcommand(1);
      CLI::App* c = sub.add_subcommand("compile",
                                       "Compile and print ok + stats, or the unsupported feature (exit 1)\n"
                                       "Examples:\n"
                                       "  gridq grammar compile tests/grammar/schemas/object_required.json\n"
                                       "  gridq grammar compile --regex -e '[a-z]+@[a-z]+\\.com'\n"
                                       "  gridq grammar compile --gbnf my.gbnf");
      add_input_flags(c, o->in);
      CLI::App* k = sub.add_subcommand(
          "check",
          "Accept or reject a text, and at which byte (exit 0 accept, 1 reject)\n"
          "Examples:\n"
          "  gridq grammar check schema.json --text out.json\n"
          "  gridq grammar check schema.json --text out.json --tokenizer models/laguna-tiny-code\n"
          "  gridq grammar check --choice -e '[\"yes\",\"no\"]' --text answer.txt");
      add_input_flags(k, o->in);
      k->add_option("--text", o->text, "file whose bytes are checked")->required();
      k->add_option("--tokenizer", o->tokenizer,
                    "also check token by token through the masks of this tokenizer");
      CLI::App* s = sub.add_subcommand(
          "sample",
          "Random walk: sample allowed tokens until the grammar accepts\n"
          "Examples:\n"
          "  gridq grammar sample schema.json --tokenizer models/laguna-tiny-code --seed 7\n"
          "  gridq grammar sample --json-object --tokenizer models/laguna-tiny-code --count 5 --jsonl");
      add_input_flags(s, o->in);
      s->add_option("--tokenizer", o->tokenizer, "model directory or tokenizer.json")->required();
      s->add_option("--seed", o->seed, "random seed (default 1)");
      s->add_option("--count", o->count, "number of samples (default 1)")->check(CLI::Range(1, 100000));
      s->add_option("--max-tokens", o->max_tokens,
                    "after half this many tokens, finish on the shortest completion (default 400)");
      s->add_flag("--jsonl", o->jsonl, "print each sample as a JSON line {text, tokens}");
      return [o, c, k]() -> int {
        if (c->parsed()) return run_compile(o->in);
        if (k->parsed()) return run_check(o->in, o->text, o->tokenizer);
        return run_sample(o->in, o->tokenizer, o->seed, o->count, o->max_tokens, o->jsonl);
      };
    }}};

}  // namespace
}  // namespace gridq::cli
