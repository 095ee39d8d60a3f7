// `gridq bench grammar`: MaskBench-style timing of the structured-output engine. For each schema: compile
// time (schema text to grammar), then a walk of a valid instance token by token with a cold mask cache,
// timing every mask (the first one is the time to first mask, the rest the time between masks). Single
// thread. Schemas that do not compile are counted, not timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/command.h"
#include "cli/grammar_cli.h"
#include "core/version.h"
#include "grammar/matcher.h"

namespace gridq::cli {
namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int run_bench_grammar(const BenchGrammarFlags& f) {
  namespace fs = std::filesystem;
  auto t_vocab = std::chrono::steady_clock::now();
  auto v = load_vocab(f.tokenizer);
  if (!v) return fail(v.message());
  double vocab_s = secs_since(t_vocab);
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(f.schemas, ec))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  if (ec) return fail(f.schemas + ": " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) return fail(f.schemas + ": no .json files");
  grammar::CompileOptions opt;
  opt.flexible_whitespace = f.flexible_ws;
  std::vector<double> compile_s, first_mask_s, mask_s;
  size_t compiled = 0, failed = 0, walked = 0, tokens = 0, mask_errors = 0;
  std::vector<std::string> errors;
  std::vector<std::pair<double, std::string>> slowest;  // (max mask seconds, schema)
  std::map<std::string, size_t> slow_by_schema;         // masks over 500 us
  for (int rep = 0; rep < f.repeat; ++rep) {
    for (const std::string& path : files) {
      auto c = read_schema_case(path);
      if (!c) return fail(c.message());
      auto t0 = std::chrono::steady_clock::now();
      auto g = grammar::compile(grammar::InputKind::kJsonSchema, c->schema_text, opt);
      double cs = secs_since(t0);
      if (!g) {
        if (rep == 0) {
          ++failed;
          errors.push_back(c->name + ": " + g.message());
        }
        continue;
      }
      compile_s.push_back(cs);
      if (rep == 0) ++compiled;
      if (c->valid.empty()) continue;
      auto ids = v->tokenizer->try_encode(c->valid[0]);
      if (!ids) return fail(ids.message());
      grammar::TokenMasker masker(v->vocab);
      grammar::Matcher m(*g);
      std::vector<uint64_t> mask;
      bool first = true;
      double worst = 0;
      for (int32_t id : *ids) {
        auto t1 = std::chrono::steady_clock::now();
        masker.compute(m, mask);
        double ms = secs_since(t1);
        (first ? first_mask_s : mask_s).push_back(ms);
        worst = std::max(worst, ms);
        if (!first && ms > 500e-6) ++slow_by_schema[c->name];
        first = false;
        const std::string& bytes = v->vocab->bytes(id);
        if (!grammar::mask_test(mask, id) || m.advance_bytes(bytes) != bytes.size()) {
          ++mask_errors;
          if (rep == 0)
            errors.push_back(c->name + ": valid instance refused at token id " + std::to_string(id));
          break;
        }
        ++tokens;
      }
      if (rep == 0) {
        ++walked;
        slowest.emplace_back(worst, c->name);
      }
    }
  }
  nlohmann::ordered_json j;
  j["bench"] = "grammar";
  j["commit"] = git_commit();
  j["tokenizer"] = f.tokenizer;
  j["vocab_size"] = v->vocab->size();
  j["vocab_index_s"] = vocab_s;
  j["schemas"] = files.size();
  j["compiled"] = compiled;
  j["compile_errors"] = failed;
  j["walked"] = walked;
  j["tokens"] = tokens;
  j["mask_errors"] = mask_errors;
  auto us = [](double s) { return s * 1e6; };
  j["compile_us"] = {
      {"p50", us(pct(compile_s, 0.5))}, {"p99", us(pct(compile_s, 0.99))}, {"max", us(pct(compile_s, 1.0))}};
  j["first_mask_us"] = {{"p50", us(pct(first_mask_s, 0.5))},
                        {"p99", us(pct(first_mask_s, 0.99))},
                        {"max", us(pct(first_mask_s, 1.0))}};
  j["mask_us"] = {
      {"p50", us(pct(mask_s, 0.5))}, {"p99", us(pct(mask_s, 0.99))}, {"max", us(pct(mask_s, 1.0))}};
  j["masks_over_500us"] = std::count_if(mask_s.begin(), mask_s.end(), [](double x) { return x > 500e-6; });
  j["masks_timed"] = mask_s.size();
  j["masks_over_500us_by_schema"] = slow_by_schema;
  j["errors"] = errors;
  std::sort(slowest.rbegin(), slowest.rend());
  slowest.resize(std::min<size_t>(slowest.size(), 5));
  for (const auto& [t, name] : slowest) j["slowest_mask_us"][name] = us(t);
  if (!f.out.empty()) {
    std::ofstream o(f.out);
    o << j.dump(2) << "\n";
  }
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return mask_errors ? 1 : 0;
  }
  std::printf("vocabulary: %zu tokens (%s), indexed in %.1f ms\n", v->vocab->size(), f.tokenizer.c_str(),
              vocab_s * 1e3);
  std::printf("schemas: %zu, compiled %zu, refused %zu; walked %zu instances, %zu tokens, %zu mask errors\n",
              files.size(), compiled, failed, walked, tokens, mask_errors);
  std::printf("%-14s %10s %10s %10s\n", "", "p50 us", "p99 us", "max us");
  std::printf("%-14s %10.1f %10.1f %10.1f\n", "compile", us(pct(compile_s, 0.5)), us(pct(compile_s, 0.99)),
              us(pct(compile_s, 1.0)));
  std::printf("%-14s %10.1f %10.1f %10.1f\n", "first mask", us(pct(first_mask_s, 0.5)),
              us(pct(first_mask_s, 0.99)), us(pct(first_mask_s, 1.0)));
  std::printf("%-14s %10.1f %10.1f %10.1f\n", "mask", us(pct(mask_s, 0.5)), us(pct(mask_s, 0.99)),
              us(pct(mask_s, 1.0)));
  std::printf(
      "masks over 500 us: %zu of %zu\n",
      static_cast<size_t>(std::count_if(mask_s.begin(), mask_s.end(), [](double x) { return x > 500e-6; })),
      mask_s.size());
  std::printf("slowest masks:");
  for (const auto& [t, name] : slowest) std::printf(" %s %.0f us;", name.c_str(), us(t));
  std::printf("\n");
  for (const std::string& e : errors) std::printf("  %s\n", e.c_str());
  return mask_errors ? 1 : 0;
}

}  // namespace gridq::cli
