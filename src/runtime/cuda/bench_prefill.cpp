#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "runtime/cuda/bench_decode_util.h"
#include "runtime/cuda/bench_util.h"

namespace gridq::cuda::decode_bench {

using nlohmann::json;

Expected<json> run_prefill_cells(CudaBackend& be, const BenchDecodeOptions& o, runtime::SeqId& next_id) {
  json cells = json::array();
  std::mt19937_64 rng(o.seed ^ 0x9BEF111ull);
  std::uniform_int_distribution<int32_t> tok(0, be.spec().vocab_size - 1);
  if (o.progress) std::fprintf(stderr, "%7s %10s %10s %10s\n", "prompt", "ms", "tok/s", "TTFT ms");
  for (int L : o.prefill) {
    std::vector<int32_t> ids(static_cast<size_t>(L));
    for (auto& t : ids) t = tok(rng);
    std::vector<float> logits;
    auto once = [&]() -> Expected<double> {
      const runtime::SeqId id = next_id++;
      GRIDQ_RETURN_IF_ERROR(be.add_sequence(id));
      const runtime::BatchItem item{id, ids, runtime::LogitsMode::kLast};
      logits.clear();
      const auto t0 = std::chrono::steady_clock::now();
      Status st = be.forward({&item, 1}, logits);  // synchronous: the last row's logits come back
      const auto t1 = std::chrono::steady_clock::now();
      be.remove_sequence(id);
      GRIDQ_RETURN_IF_ERROR(st);
      return std::chrono::duration<double, std::milli>(t1 - t0).count();
    };
    GRIDQ_RETURN_IF_ERROR(once());
    std::vector<double> ms;
    for (int r = 0; r < o.prefill_repeats; ++r) {
      GRIDQ_ASSIGN_OR_RETURN(double t, once());
      ms.push_back(t);
    }
    const uint64_t hash = fnv1a(logits);
    const bool finite = std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
    (void)be.take_phase_ms();
    be.set_phase_timing(true);
    auto timed = once();
    be.set_phase_timing(false);
    GRIDQ_RETURN_IF_ERROR(timed);
    json phases = json::object();
    for (const auto& [name, pms] : be.take_phase_ms()) phases[name] = pms * 1e3;
    const double med = bench::median(ms);
    cells.push_back({{"prompt_tokens", L},
                     {"repeats", o.prefill_repeats},
                     {"ms", med},
                     {"ms_all", ms},
                     {"tok_s", L / (med * 1e-3)},
                     {"ttft_ms", med},
                     {"phase_us_total", phases},
                     {"ms_with_phase_timing", *timed},
                     {"logits_fnv1a", fmt::format("{:016x}", hash)},
                     {"logits_finite", finite}});
    if (o.progress) {
      std::fprintf(stderr, "%7d %10.2f %10.1f %10.2f%s\n", L, med, L / (med * 1e-3), med,
                   finite ? "" : "  (non-finite logits!)");
      std::string ph;
      for (const auto& el : phases.items())
        ph += fmt::format("  {} {:.0f}", el.key(), el.value().get<double>());
      if (!ph.empty()) std::fprintf(stderr, "      µs total:%s\n", ph.c_str());
    }
  }
  return cells;
}

}  // namespace gridq::cuda::decode_bench
