// gridq logits: fp32 logits of every position of a batch of token rows, for parity checks.
#include <cstring>
#include <string>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "io/safetensors.h"

namespace gridq::cli {
namespace {

struct LogitsArgs {
  std::string model, input, output;
  RunOptions run;
};

int run_logits(const LogitsArgs& a) {
  auto in = io::SafetensorsFile::open(a.input);
  if (!in.ok()) return fail(in.message());
  const io::TensorInfo* ids = (*in)->find("input_ids");
  if (!ids) return fail(a.input + ": tensor 'input_ids' is missing");
  if (ids->dtype != io::DType::I32 || ids->shape.size() != 2)
    return fail(a.input + ": 'input_ids' must be I32 [B, T]");
  const int64_t B = ids->shape[0], T = ids->shape[1];
  if (B <= 0 || T <= 0) return fail(a.input + ": 'input_ids' is empty");
  std::vector<int32_t> tok(static_cast<size_t>(B * T));
  std::memcpy(tok.data(), ids->data, tok.size() * sizeof(int32_t));
  auto eng = open_engine(a.model, a.run);
  if (!eng.ok()) return fail(eng.message());
  const int64_t V = (*eng)->vocab_size();
  std::vector<float> all;
  all.reserve(static_cast<size_t>(B * T * V));
  for (int64_t b = 0; b < B; ++b) {
    auto s = (*eng)->create_sequence();
    auto lg = (*eng)->prefill(s, std::span<const int32_t>(tok.data() + b * T, static_cast<size_t>(T)),
                              runtime::LogitsMode::kAll);
    (*eng)->free_sequence(s);
    if (!lg.ok()) return fail(lg.message());
    all.insert(all.end(), lg->begin(), lg->end());
  }
  auto w = io::SafetensorsWriter::create(a.output, {{"logits", io::DType::F32, {B, T, V}}});
  if (!w.ok()) return fail(w.message());
  Status st = (*w)->write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(all.data()), all.size() * 4));
  if (st.ok()) st = (*w)->finish();
  if (!st.ok()) return fail(st.message());
  std::fprintf(stderr, "[gridq] wrote logits [%lld, %lld, %lld] to %s\n", static_cast<long long>(B),
               static_cast<long long>(T), static_cast<long long>(V), a.output.c_str());
  return 0;
}

Registrar reg{Command{
    "logits",
    "Write fp32 logits [B, T, V] for input_ids [B, T] (I32) read from a safetensors file\n"
    "Examples:\n"
    "  gridq logits models/laguna-tiny-code --input ids.safetensors --output logits.safetensors\n"
    "  gridq logits models/laguna-tiny-code --input tests/fixtures/laguna-tiny-code.hf-logits.safetensors "
    "--output /tmp/ours.safetensors\n",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<LogitsArgs>();
      sub.add_option("MODEL", a->model, "HF checkpoint or gridbook artifact directory")->required();
      sub.add_option("--input", a->input, "safetensors file with input_ids I32 [B, T]")->required();
      sub.add_option("--output", a->output, "safetensors file to write logits F32 [B, T, V] to")->required();
      a->run.cpu_kernels = "reference";  // a measuring command: the oracle's kernels unless asked
      add_run_options(sub, a->run);
      return [a] { return run_logits(*a); };
    }}};

}  // namespace
}  // namespace gridq::cli
