#include "runtime/cuda/bench_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include "core/version.h"
#include "io/checkpoint.h"
#include "model/loader.h"
#include "runtime/artifact_weights.h"
#include "runtime/cuda/bench_decode_util.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/synthetic_model.h"
#include "runtime/model_weights.h"

namespace gridq::cuda {
namespace {

using nlohmann::json;
using namespace decode_bench;

constexpr const char* kBytesModel =
    "weight_bytes_per_step = every non-expert weight once (lm_head included, one embedding row per "
    "token) + per MoE layer E*(1-(1-k/E)^batch) distinct experts (expected under uniform random routing) "
    "x one expert's bytes; kv_bytes_per_step = per sequence, K+V BF16 of (p+1) keys on full layers and "
    "min(p+1, W) on sliding layers, averaged over the timed positions p = context .. context+steps-1; "
    "bytes_per_step = their sum; phases: the same bytes split by the phase that reads them, timed in a "
    "separate pass that synchronizes after each phase (no overlap between phases, no graph); "
    "vs_batch1_bytes_scaled = ms_per_step / (bytes_per_step / batch-1 bytes_per_step x batch-1 ms_per_step) "
    "at the same context";
constexpr const char* kSyntheticRecipe =
    "seed recipe: routed experts NVFP4_CB_K16 v2, attention q/k/v/o FP8 W8A8, everything else BF16; random "
    "legal bytes built on the device";

struct Model {
  model::ModelSpec spec;
  std::unique_ptr<CudaBackend> be;
  json desc;
};

Expected<Model> open_model(const BenchDecodeOptions& o, const runtime::DeviceOptions& dev) {
  Model m;
  if (!o.synthetic.empty()) {
    GRIDQ_ASSIGN_OR_RETURN(m.spec, synthetic_spec(o.synthetic));
    if (o.progress)
      std::fprintf(stderr, "building synthetic %s on the device (seed %llu)...\n", o.synthetic.c_str(),
                   static_cast<unsigned long long>(o.seed));
    GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceModel> dm, synthetic_device_model(m.spec, o.seed));
    GRIDQ_ASSIGN_OR_RETURN(m.be, CudaBackend::from_device_model(m.spec, std::move(dm), dev));
    m.desc = {{"name", o.synthetic}, {"source", "synthetic"}, {"seed", o.seed}, {"recipe", kSyntheticRecipe}};
    return m;
  }
  const std::filesystem::path dir(o.model_dir);
  GRIDQ_ASSIGN_OR_RETURN(json cfg, io::read_json_file((dir / "config.json").string()));
  const bool artifact = cfg.contains("quantization_config");
  if (o.progress)
    std::fprintf(stderr, "loading %s (%s)...\n", o.model_dir.c_str(), artifact ? "artifact" : "HF");
  if (artifact) {
    // The mmapped artifact stays alive until the weights are on the device.
    GRIDQ_ASSIGN_OR_RETURN(std::shared_ptr<runtime::ArtifactModel> am,
                           runtime::load_artifact_model(o.model_dir));
    m.spec = am->spec;
    GRIDQ_ASSIGN_OR_RETURN(m.be, CudaBackend::create(am->spec, am->weights, dev));
  } else {
    GRIDQ_ASSIGN_OR_RETURN(model::LoadedModel lm, model::load_model(o.model_dir));
    GRIDQ_ASSIGN_OR_RETURN(runtime::ModelWeights w, runtime::build_model_weights(lm.spec, lm.weights));
    m.spec = lm.spec;
    GRIDQ_ASSIGN_OR_RETURN(m.be, CudaBackend::create(lm.spec, w, dev));
  }
  m.desc = {{"name", dir.filename().string().empty() ? dir.parent_path().filename().string()
                                                     : dir.filename().string()},
            {"source", o.model_dir},
            {"format", artifact ? "gridbook artifact" : "HF checkpoint"}};
  return m;
}

struct Cell {
  std::vector<double> ms, ms_sampled;
  bool sampled_is_argmax = false;
  std::map<std::string, double> phase_ms;
  double phase_pass_ms = 0;
  uint64_t hash = 0;
  bool finite = true;
};

// One (batch, context) cell: warm-up steps, the timed steps, then the same steps with phase timing.
Status run_cell(CudaBackend& be, const BenchDecodeOptions& o, int batch, int ctx, std::mt19937_64& rng,
                runtime::SeqId& next_id, Cell& cell) {
  const int V = be.spec().vocab_size;
  std::vector<runtime::SeqId> ids;
  struct Cleanup {
    CudaBackend& be;
    std::vector<runtime::SeqId>& ids;
    ~Cleanup() {
      for (auto id : ids) be.remove_sequence(id);
    }
  } cleanup{be, ids};
  for (int b = 0; b < batch; ++b) {
    GRIDQ_RETURN_IF_ERROR(be.add_sequence(next_id));
    ids.push_back(next_id++);
  }
  auto reset = [&]() -> Status {
    for (auto id : ids) GRIDQ_RETURN_IF_ERROR(be.set_length_for_bench(id, ctx));
    return {};
  };
  std::vector<int32_t> toks(static_cast<size_t>(batch));
  std::vector<runtime::BatchItem> items(static_cast<size_t>(batch));
  std::vector<float> logits;
  // The sampled pass's plans, every row's drawn each step as serve draws them (greedy: argmax on the device).
  runtime::SamplingParams sp;
  sp.temperature = o.temperature, sp.top_p = o.top_p, sp.top_k = o.top_k, sp.seed = o.seed;
  runtime::Sampler sampler(sp);
  std::vector<runtime::SamplePlan> plan_rows(static_cast<size_t>(batch));
  std::vector<const runtime::SamplePlan*> plans;
  for (const runtime::SamplePlan& p : plan_rows) plans.push_back(&p);
  std::vector<runtime::SampledToken> sampled;
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  auto run = [&](int n, std::vector<double>* ms, bool sample = false) -> Status {
    for (int i = 0; i < n; ++i) {
      for (int b = 0; b < batch; ++b) {
        if (sample) plan_rows[static_cast<size_t>(b)] = sampler.plan(static_cast<size_t>(V), {}, {});
        toks[static_cast<size_t>(b)] = tok(rng);
        items[static_cast<size_t>(b)] = {
            ids[static_cast<size_t>(b)], {&toks[static_cast<size_t>(b)], 1}, runtime::LogitsMode::kLast};
      }
      logits.clear();
      sampled.clear();
      const auto t0 = std::chrono::steady_clock::now();
      if (sample)  // synchronizes (the tokens come back)
        GRIDQ_RETURN_IF_ERROR(be.forward_sampled(items, plans, sampled));
      else  // synchronizes (the logits come back)
        GRIDQ_RETURN_IF_ERROR(be.forward(items, logits));
      const auto t1 = std::chrono::steady_clock::now();
      if (ms) ms->push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return {};
  };
  GRIDQ_RETURN_IF_ERROR(reset());
  GRIDQ_RETURN_IF_ERROR(run(o.warmup, nullptr));
  GRIDQ_RETURN_IF_ERROR(reset());
  const std::mt19937_64 rng0 = rng;  // the sampled pass below runs the same tokens
  GRIDQ_RETURN_IF_ERROR(run(o.steps, &cell.ms));
  cell.hash = fnv1a(logits);
  cell.finite = std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
  // The same steps as `serve` runs them: sampled on the device, only the tokens copied back (at batch 64
  // the logits rows are 25 MB a step to the host, which the pass above times and serving never does).
  GRIDQ_RETURN_IF_ERROR(reset());
  rng = rng0;
  GRIDQ_RETURN_IF_ERROR(run(o.steps, &cell.ms_sampled, true));
  // Same tokens, same positions: the last step's greedy tokens are its logits rows' argmaxes (first of ties).
  cell.sampled_is_argmax = o.temperature <= 0.0f && sampled.size() == static_cast<size_t>(batch);
  for (size_t r = 0; cell.sampled_is_argmax && r < sampled.size(); ++r) {
    const auto row = logits.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(V));
    cell.sampled_is_argmax = std::max_element(row, row + V) - row == sampled[r].token;
  }
  GRIDQ_RETURN_IF_ERROR(reset());
  (void)be.take_phase_ms();
  be.set_phase_timing(true);
  std::vector<double> pms;
  Status st = run(o.steps, &pms);
  be.set_phase_timing(false);
  GRIDQ_RETURN_IF_ERROR(st);
  cell.phase_ms = be.take_phase_ms();
  for (double x : pms) cell.phase_pass_ms += x;
  return {};
}

Status check_options(const BenchDecodeOptions& o) {
  if (o.synthetic.empty() == o.model_dir.empty())
    return err("bench decode: give exactly one of --synthetic NAME or a model directory");
  if ((o.batches.empty() || o.contexts.empty()) && o.prefill.empty())
    return err("bench decode: no batch sizes or no contexts");
  for (int L : o.prefill)
    if (L < 1) return err("bench prefill: prompt length {} < 1", L);
  if (o.prefill_repeats < 1) return err("bench prefill: repeats {} < 1", o.prefill_repeats);
  for (int b : o.batches)
    if (b < 1) return err("bench decode: batch {} < 1", b);
  for (int c : o.contexts)
    if (c < 0) return err("bench decode: context {} < 0", c);
  if (o.steps < 1 || o.warmup < 0)
    return err("bench decode: steps {} < 1 or warmup {} < 0", o.steps, o.warmup);
  if (o.l2_ahead < detail::kL2AheadAuto || o.l2_ahead > detail::kL2AheadAll)
    return err("bench decode: --l2-ahead {} is neither -1 (auto) nor a mask of 1, 2, 4, 8 and 16",
               o.l2_ahead);
  if (o.beside < 0 || o.beside > detail::kBesideAll)
    return err("bench decode: --beside {} is not a mask of 1 (shared expert) and 2 (g_proj)", o.beside);
  return {};
}

}  // namespace

Expected<json> run_bench_decode(const BenchDecodeOptions& o) {
  GRIDQ_RETURN_IF_ERROR(check_options(o));
  detail::set_forward_pdl(o.pdl);
  if (o.min_warp_bytes > 0) set_gemv_min_warp_bytes(o.min_warp_bytes);
  if (o.blocks_per_sm >= 0) set_gemv_blocks_per_sm(o.blocks_per_sm);
  detail::set_forward_l2_ahead(o.l2_ahead);
  detail::set_forward_beside(o.beside);
  GRIDQ_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  if (info.major != 9 || info.minor != 0)
    return err("bench decode: built for sm_90a, device is sm_{}{} ({})", info.major, info.minor, info.name);
  int driver = 0, runtime_v = 0;
  GRIDQ_CUDA(cudaDriverGetVersion(&driver));
  GRIDQ_CUDA(cudaRuntimeGetVersion(&runtime_v));
  double copy = 0;
  {
    GRIDQ_ASSIGN_OR_RETURN(Stream s, Stream::create());
    GRIDQ_ASSIGN_OR_RETURN(copy, bench::copy_bandwidth(s.get(), 10));
  }
  if (o.progress) std::fprintf(stderr, "device-to-device copy: %.0f GB/s (read + write)\n", copy);
  const int max_batch = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  const int max_ctx = o.contexts.empty() ? 0 : *std::max_element(o.contexts.begin(), o.contexts.end());
  const int max_prompt = o.prefill.empty() ? 0 : *std::max_element(o.prefill.begin(), o.prefill.end());
  runtime::DeviceOptions dev;
  dev.gpu_memory_utilization = 0.9;
  dev.max_model_len = std::max<int64_t>(static_cast<int64_t>(max_ctx) + o.steps + o.warmup, max_prompt) + 16;
  dev.max_num_seqs = max_batch;
  dev.max_num_batched_tokens = o.max_num_batched_tokens;
  GRIDQ_ASSIGN_OR_RETURN(Model m, open_model(o, dev));
  CudaBackend& be = *m.be;
  GRIDQ_RETURN_IF_ERROR(be.randomize_kv_for_bench(o.seed ^ 0x5C2B));
  const MemoryReport& mem = be.memory();
  const StreamBytes sb = stream_bytes(m.spec, be.device_model());
  m.desc["weights_bytes"] = mem.weights;
  m.desc["packed_bytes"] = mem.packed;
  m.desc["kv_pages_bytes"] = mem.kv_pages;
  m.desc["kv_rings_bytes"] = mem.kv_rings;
  m.desc["kv_tokens"] = mem.kv_tokens;
  m.desc["layers"] = m.spec.n_layers;
  m.desc["hidden"] = m.spec.hidden_size;
  m.desc["vocab"] = m.spec.vocab_size;
  m.desc["experts"] = m.spec.moe.n_experts;
  m.desc["top_k"] = m.spec.moe.top_k;
  m.desc["kernels"] = sb.kernels;
  m.desc["fused_moe_layers"] = sb.fused_moe_layers;
  m.desc["moe_layers"] = sb.moe_layers;
  m.desc["expert_bytes_all_moe_layers"] = sb.experts;
  m.desc["non_expert_weight_bytes"] = sb.fixed;
  if (o.progress) {
    std::fprintf(
        stderr, "%s: %.2f GB resident weights, KV for %lld tokens; %.3f GB non-expert + %.1f MB/expert set\n",
        m.desc["name"].get<std::string>().c_str(), static_cast<double>(mem.weights) / 1e9,
        static_cast<long long>(mem.kv_tokens), sb.fixed / 1e9, sb.experts / 1e6);
    std::fprintf(stderr, "%5s %7s %9s %9s %9s %8s %6s %9s\n", "batch", "context", "ms/step", "tok/s",
                 "GB/step", "GB/s", "%copy", "tok/s smp");
  }
  std::mt19937_64 rng(o.seed ^ 0x5EEDDECull);
  runtime::SeqId next_id = 1;
  json cells = json::array(), skipped = json::array();
  const double E = std::max(1, m.spec.moe.n_experts), k = m.spec.moe.top_k;
  for (int batch : o.batches)
    for (int ctx : o.contexts) {
      const int64_t last = static_cast<int64_t>(ctx) + std::max(o.steps, o.warmup);
      if (m.spec.max_position_embeddings > 0 && last > m.spec.max_position_embeddings) {
        skipped.push_back({{"batch", batch},
                           {"context", ctx},
                           {"reason", fmt::format("positions up to {} pass max_position_embeddings {}", last,
                                                  m.spec.max_position_embeddings)}});
        if (o.progress)
          std::fprintf(stderr, "%5d %7d   skipped (past max_position_embeddings)\n", batch, ctx);
        continue;
      }
      // Full-layer KV the cell holds at its last position, in whole pages (the pool's unit).
      const runtime::KvPageStats kvp = be.kv_pages();
      const int64_t need = static_cast<int64_t>(batch) * ((last + kvp.page_tokens) / kvp.page_tokens);
      if (kvp.total >= 0 && need > kvp.total) {
        skipped.push_back(
            {{"batch", batch},
             {"context", ctx},
             {"reason", fmt::format("needs {} pages of {} tokens of full-layer KV, the cache holds {}", need,
                                    kvp.page_tokens, kvp.total)}});
        if (o.progress) std::fprintf(stderr, "%5d %7d   skipped (KV cache too small)\n", batch, ctx);
        continue;
      }
      Cell c;
      GRIDQ_RETURN_IF_ERROR(run_cell(be, o, batch, ctx, rng, next_id, c));
      const double ms = bench::median(c.ms), ms_smp = bench::median(c.ms_sampled);
      const double distinct = sb.moe_layers > 0 ? E * (1.0 - std::pow(1.0 - k / E, batch)) : 0.0;
      const double wbytes = sb.fixed + batch * sb.embed_row + distinct * sb.experts;
      double kv = 0;
      for (int i = 0; i < o.steps; ++i) kv += kv_bytes_at(m.spec, static_cast<int64_t>(ctx) + i);
      kv = kv / o.steps * batch;
      const double bytes = wbytes + kv, gbs = bytes / (ms * 1e-3) / 1e9;
      json phases = json::object(), per_phase = json::object();
      const auto pb = phase_bytes(sb, batch, distinct, kv);
      const int kernels = be.graph_kernel_nodes(batch);
      for (const auto& [name, pms] : c.phase_ms) {
        const double us = pms * 1e3 / o.steps, b = pb.count(name) ? pb.at(name) : 0.0;
        phases[name] = us;
        const double g = us > 0 ? b / (us * 1e-6) / 1e9 : 0.0;
        per_phase[name] = {{"us", us}, {"bytes", b}, {"gbs", g}, {"pct_copy", 100.0 * g / copy}};
      }
      const auto [mn, mx] = std::minmax_element(c.ms.begin(), c.ms.end());
      double mean = 0;
      for (double x : c.ms) mean += x / static_cast<double>(c.ms.size());
      cells.push_back(
          {{"batch", batch},
           {"context", ctx},
           {"steps", o.steps},
           {"ms_per_step", ms},
           {"ms_per_step_mean", mean},
           {"ms_per_step_min", *mn},
           {"ms_per_step_max", *mx},
           {"tok_s", batch / (ms * 1e-3)},
           {"ms_per_step_sampled", ms_smp},
           {"tok_s_sampled", batch / (ms_smp * 1e-3)},
           {"sampled_is_logits_argmax", o.temperature <= 0.0f ? json(c.sampled_is_argmax) : json(nullptr)},
           {"expected_distinct_experts_per_moe_layer", distinct},
           {"weight_bytes_per_step", wbytes},
           {"weight_bytes_per_step_if_no_expert_reuse", sb.fixed + batch * (sb.embed_row + k * sb.experts)},
           {"kv_bytes_per_step", kv},
           {"bytes_per_step", bytes},
           {"gbs", gbs},
           {"pct_copy", 100.0 * gbs / copy},
           {"phase_us_per_step", phases},
           {"phases", per_phase},
           {"kernels_per_step", kernels},
           {"ms_per_step_with_phase_timing", c.phase_pass_ms / o.steps},
           {"logits_fnv1a", fmt::format("{:016x}", c.hash)},
           {"logits_finite", c.finite}});
      if (o.progress) {
        std::fprintf(stderr, "%5d %7d %9.3f %9.1f %9.3f %8.0f %5.1f%% %9.1f%s\n", batch, ctx, ms,
                     batch / (ms * 1e-3), bytes / 1e9, gbs, 100.0 * gbs / copy, batch / (ms_smp * 1e-3),
                     c.finite ? "" : "  (non-finite logits!)");
        std::fprintf(stderr, "      %d kernels a replayed step; phases (a pass with a sync after each):\n",
                     kernels);
        for (const auto& el : per_phase.items())
          std::fprintf(stderr, "      %-28s %9.1f µs %9.1f MB %7.0f GB/s %5.1f%%\n", el.key().c_str(),
                       el.value()["us"].get<double>(), el.value()["bytes"].get<double>() / 1e6,
                       el.value()["gbs"].get<double>(), el.value()["pct_copy"].get<double>());
      }
    }
  add_batch1_ratios(cells);
  json prefill = json::array();
  if (!o.prefill.empty()) {
    GRIDQ_ASSIGN_OR_RETURN(prefill, run_prefill_cells(be, o, next_id));
  }
  json r;
  r["bench"] = o.batches.empty() ? "prefill" : "decode";
  r["date"] = bench::utc_now();
  r["commit"] = gridq::git_commit();
  r["gpu"] = info.name;
  r["sms"] = info.sm_count;
  r["l2_bytes"] = info.l2_bytes;
  r["cuda_driver_api"] = driver;
  r["cuda_runtime"] = runtime_v;
  r["cuda_driver"] = fmt::format("{}.{}", driver / 1000, driver % 1000 / 10);
  r["cuda_runtime_version"] = fmt::format("{}.{}", runtime_v / 1000, runtime_v % 1000 / 10);
  r["copy_gbs"] = copy;
  r["model"] = m.desc;
  r["options"] = {{"steps", o.steps},
                  {"warmup", o.warmup},
                  {"seed", o.seed},
                  {"batches", o.batches},
                  {"contexts", o.contexts},
                  {"max_model_len", dev.max_model_len},
                  {"gpu_memory_utilization", dev.gpu_memory_utilization},
                  {"pdl", o.pdl},
                  {"gemv_min_warp_bytes", gemv_min_warp_bytes()},
                  {"gemv_blocks_per_sm", gemv_blocks_per_sm()},
                  {"l2_ahead", detail::forward_l2_ahead()},
                  {"beside", detail::forward_beside()},
                  {"sampling", {{"temperature", o.temperature}, {"top_p", o.top_p}, {"top_k", o.top_k}}},
                  {"prefill", o.prefill},
                  {"prefill_repeats", o.prefill_repeats},
                  {"step_rows", detail::step_rows_for(o.max_num_batched_tokens)}};
  r["timing"] =
      "std::chrono around CudaBackend::forward (synchronous: the last row's logits are copied back); "
      "median over the timed steps. *_sampled: the same steps through CudaBackend::forward_sampled ("
      "options.sampling, greedy by default, on the device; only the tokens copied back, as serve runs a "
      "step)";
  r["bytes_model"] = kBytesModel;
  r["cells"] = cells;
  r["skipped"] = skipped;
  if (!o.prefill.empty()) r["prefill"] = prefill;
  return r;
}

}  // namespace gridq::cuda
