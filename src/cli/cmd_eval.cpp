// gridq eval: perplexity over windows of a text file and, with --teacher (or a --teacher-dump), the
// student-vs-teacher metrics of quantizer.md §8 on the same windows (ALL-KL, confident-KL, top-1 agreement).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "core/progress.h"
#include "eval/perplexity.h"
#include "eval/teacher_compare.h"
#include "eval/teacher_dump.h"

namespace gridq::cli {
namespace {

// A long eval printed nothing for minutes (issue 14 item 12): on a terminal, stderr gets one line redrawn in
// place with the windows done, the time spent and the ETA, erased at the end. Not on a pipe or a log, and
// never on stdout, which may hold --json.
std::function<void(int64_t, int64_t)> progress_line() {
  if (isatty(STDERR_FILENO) == 0) return {};
  const auto t0 = std::chrono::steady_clock::now();
  return [t0](int64_t done, int64_t total) {
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = done > 0 ? spent / static_cast<double>(done) * static_cast<double>(total - done) : 0.0;
    if (done >= total) {
      std::fputs("\r\x1b[2K", stderr);
    } else {
      std::fprintf(stderr, "\r\x1b[2Keval: window %lld/%lld, %s spent, ETA %s", static_cast<long long>(done),
                   static_cast<long long>(total), format_duration(spent).c_str(),
                   format_duration(eta).c_str());
    }
    std::fflush(stderr);
  };
}

struct EvalArgs {
  std::string model, text_file;
  std::string teacher;       // teacher model directory (the BF16 source)
  std::string teacher_dump;  // teacher log-prob dump: written when absent, reused when present
  int64_t tokens = 0;
  int window = 512;
  int batch = 1;
  bool json = false;
  RunOptions run;
};

// JSON number, or null where the metric is undefined (no confident positions).
nlohmann::ordered_json num(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

int run_teacher_eval(const EvalArgs& a, std::span<const int32_t> ids) {
  const bool reuse_dump = !a.teacher_dump.empty() && std::filesystem::exists(a.teacher_dump);
  if (a.teacher.empty() && !reuse_dump)
    return fail("--teacher-dump " + a.teacher_dump + " does not exist yet: give --teacher SRC to write it");
  if (!a.teacher.empty()) {
    if (!std::filesystem::is_directory(a.teacher))
      return fail(a.teacher + ": --teacher must name a model directory (" +
                  (std::filesystem::exists(a.teacher) ? "not a directory" : "does not exist") + ")");
    if (Status st = eval::check_same_tokenizer(a.model, a.teacher); !st.ok()) return fail(st.message());
  }
  auto digest = eval::tokenizer_digest(a.model);
  if (!digest.ok()) return fail(digest.message());
  // The exact stream evaluated: the dump records it, so --tokens is applied here once.
  if (a.tokens > 0 && static_cast<int64_t>(ids.size()) > a.tokens)
    ids = ids.first(static_cast<size_t>(a.tokens));
  auto eng = open_engine(a.model, a.run);
  if (!eng.ok()) return fail(eng.message());

  std::unique_ptr<runtime::Engine> teacher_engine;
  std::unique_ptr<eval::TeacherSource> live, reader;
  std::unique_ptr<eval::TeacherDumpWriter> writer;
  eval::TeacherSource* source = nullptr;
  std::string teacher_name = a.teacher;
  if (reuse_dump) {
    auto r = eval::TeacherDumpReader::open(a.teacher_dump, ids, a.window, *digest);
    if (!r.ok()) return fail(r.message());
    namespace fs = std::filesystem;
    if (!a.teacher.empty() && fs::weakly_canonical(a.teacher) != fs::weakly_canonical((*r)->teacher()))
      return fail(a.teacher_dump + ": the dump holds teacher " + (*r)->teacher() + ", not --teacher " +
                  a.teacher + " (drop --teacher to reuse the dump, or name another --teacher-dump)");
    teacher_name = (*r)->teacher();
    std::fprintf(stderr,
                 "eval: scoring against teacher dump %s (teacher %s, sha256 %s); the teacher is not run\n",
                 a.teacher_dump.c_str(), (*r)->teacher().c_str(), (*r)->sha256().c_str());
    reader = std::move(*r);
    source = reader.get();
  } else {
    RunOptions teacher_run = a.run;
    teacher_run.activation_contract
        .clear();  // --activation-contract is the student's; the teacher runs as is
    teacher_run.cpu_kernels = "reference";  // so is --cpu-kernels: the teacher is the oracle
    auto te = open_engine(a.teacher, teacher_run, [](const std::string& line) {
      std::fprintf(stderr, "gridq: teacher %s\n", line.c_str());
    });
    if (!te.ok()) return fail(te.message());
    teacher_engine = std::move(*te);
    live = std::make_unique<eval::EngineTeacher>(*teacher_engine);
    source = live.get();
    if (!a.teacher_dump.empty()) {
      auto w = eval::TeacherDumpWriter::create(a.teacher_dump, *live, a.teacher, ids, a.window, *digest);
      if (!w.ok()) return fail(w.message());
      writer = std::move(*w);
      source = writer.get();
    }
  }

  eval::PerplexityOptions o;
  o.window = a.window;
  o.batch = a.batch;
  o.on_progress = progress_line();
  auto r = eval::evaluate_against_teacher(**eng, *source, ids, o);
  if (!r.ok()) return fail(r.message());
  const eval::PerplexityResult& s = r->student;
  const eval::TeacherCompareResult& c = r->compare;
  if (writer) {
    auto h = writer->finish();
    if (!h.ok()) return fail(h.message());
    if (*h != c.teacher_sha256)  // both hash the same bytes in the same order; a difference is a bug
      return fail("teacher dump " + a.teacher_dump + ": written hash " + *h + " differs from the scored " +
                  c.teacher_sha256);
    std::fprintf(stderr, "eval: wrote teacher dump %s (%lld x %d fp32 log-probs, sha256 %s)\n",
                 a.teacher_dump.c_str(), static_cast<long long>(c.positions), (*eng)->vocab_size(),
                 h->c_str());
  }
  const double tps = s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0;
  if (a.json) {
    nlohmann::ordered_json j;
    j["ppl"] = num(s.ppl);
    j["teacher_ppl"] = num(c.teacher_ppl);
    j["all_kl"] = num(c.all_kl);
    j["confident_kl"] = num(c.confident_kl);
    j["top1_agree"] = num(c.top1_agree);
    j["top1_agree_confident"] = num(c.top1_agree_confident);
    j["positions"] = c.positions;
    j["confident_positions"] = c.confident_positions;
    j["mean_nll"] = num(s.mean_nll);
    j["teacher_mean_nll"] = num(c.teacher_mean_nll);
    j["windows"] = s.windows;
    j["tokens"] = s.tokens;
    j["window"] = a.window;
    j["teacher_sha256"] = c.teacher_sha256;
    j["model"] = a.model;
    j["teacher"] = teacher_name;
    j["teacher_dump"] =
        a.teacher_dump.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(a.teacher_dump);
    j["activation_contract"] =
        a.run.activation_contract.empty() ? std::string("artifact") : a.run.activation_contract;
    j["cpu_kernels"] = a.run.cpu_kernels;
    j["seconds"] = s.seconds;
    j["tokens_per_second"] = tps;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("student  %s: perplexity %.4f\n", a.model.c_str(), s.ppl);
    std::printf("teacher  %s: perplexity %.4f\n", teacher_name.c_str(), c.teacher_ppl);
    std::printf("positions %lld (%lld windows of <= %d tokens), confident (teacher top-1 p > %.1f): %lld\n",
                static_cast<long long>(c.positions), static_cast<long long>(s.windows), a.window,
                eval::kConfidentTopP, static_cast<long long>(c.confident_positions));
    std::printf("ALL-KL        %.6g nats\n", c.all_kl);
    std::printf("confident-KL  %.6g nats\n", c.confident_kl);
    std::printf("top-1 agree   %.4f%% of all, %.4f%% of confident\n", 100.0 * c.top1_agree,
                100.0 * c.top1_agree_confident);
    std::printf("teacher sha256 %s (compare numbers only across runs with the same hash)\n",
                c.teacher_sha256.c_str());
    std::printf("%.1f s, %.1f tok/s (student and teacher)\n", s.seconds, tps);
  }
  return 0;
}

int run_eval(const EvalArgs& a) {
  std::ifstream f(a.text_file, std::ios::binary);
  if (!f) return fail(a.text_file + ": cannot open text file");
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = open_tokenizer(a.model);
  if (!tok.ok()) return fail(tok.message());
  auto ids = tok->encode(ss.str(), /*add_special_tokens=*/false);
  if (!a.teacher.empty() || !a.teacher_dump.empty()) return run_teacher_eval(a, ids);
  auto eng = open_engine(a.model, a.run);
  if (!eng.ok()) return fail(eng.message());
  eval::PerplexityOptions o;
  o.max_tokens = a.tokens;
  o.window = a.window;
  o.batch = a.batch;
  o.on_progress = progress_line();
  auto r = eval::perplexity(**eng, ids, o);
  if (!r.ok()) return fail(r.message());
  const double tps = r->seconds > 0 ? static_cast<double>(r->tokens) / r->seconds : 0.0;
  if (a.json) {
    std::printf(
        "{\"ppl\": %.6f, \"mean_nll\": %.8f, \"positions\": %lld, \"windows\": %lld, \"tokens\": %lld, "
        "\"window\": %d, \"seconds\": %.3f, \"tokens_per_second\": %.1f}\n",
        r->ppl, r->mean_nll, static_cast<long long>(r->positions), static_cast<long long>(r->windows),
        static_cast<long long>(r->tokens), a.window, r->seconds, tps);
  } else {
    std::printf("perplexity %.4f over %lld positions (%lld windows of <= %d tokens), %.1f tok/s\n", r->ppl,
                static_cast<long long>(r->positions), static_cast<long long>(r->windows), a.window, tps);
  }
  return 0;
}

Registrar reg{Command{
    "eval",
    "Perplexity of a model on a text file, over non-overlapping windows; with --teacher, also KL,\n"
    "confident-KL and top-1 agreement against the teacher's full-vocabulary distribution (docs/eval.md)\n"
    "Examples:\n"
    "  gridq eval models/laguna-tiny-code --text data/code-eval.txt --tokens 16384\n"
    "  gridq eval models/laguna-tiny-code --text data/code-eval.txt --window 512 --json\n"
    "  gridq eval OUT --teacher models/laguna-tiny-code --text data/code-eval.txt --tokens 8192 --json\n"
    "  gridq eval OUT --teacher models/laguna-tiny-code --teacher-dump teacher.st --text "
    "data/code-eval.txt\n"
    "  gridq eval OUT --teacher models/laguna-tiny-code --text data/code-eval.txt --activation-contract "
    "w4a16\n",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<EvalArgs>();
      sub.add_option("MODEL", a->model, "HF checkpoint or gridbook artifact directory")->required();
      sub.add_option("--text", a->text_file, "UTF-8 text file")->required();
      sub.add_option("--tokens", a->tokens, "use only the first N tokens (0 = all)")
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
      sub.add_option("--window", a->window, "tokens per window")->check(CLI::Range(2, 1 << 20));
      sub.add_option("--batch", a->batch, "windows per forward")->check(CLI::PositiveNumber);
      sub.add_option("--teacher", a->teacher,
                     "teacher model directory (same tokenizer): adds KL and top-1 metrics");
      sub.add_option("--teacher-dump", a->teacher_dump,
                     "teacher log-prob file: written (with --teacher) when absent, reused when present");
      sub.add_flag("--json", a->json,
                   "print one JSON object (keys ppl, positions, ...; with a teacher also teacher_ppl, "
                   "all_kl, confident_kl, top1_agree, teacher_sha256, ...)");
      a->run.cpu_kernels = "reference";  // a measuring command: the oracle's kernels unless asked
      add_run_options(sub, a->run);
      return [a] {
        // --batch windows hold KV at once; a device backend sizes its per-sequence state for that many.
        a->run.max_num_seqs = std::max(a->run.max_num_seqs, a->batch);
        return run_eval(*a);
      };
    }}};

}  // namespace
}  // namespace gridq::cli
