#include "runtime/cuda/bench_decode_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kernels.h"

namespace gridq::cuda::decode_bench {

StreamBytes stream_bytes(const model::ModelSpec& spec, const DeviceModel& dm) {
  StreamBytes b;
  for (const auto& [name, count] : kernel_counts(dm)) b.kernels[name] = count;
  b.embed_row = static_cast<double>(spec.hidden_size) * 2.0;
  b.fixed = static_cast<double>(dm.final_norm.bytes() + dm.lm_head.resident_bytes());
  b.phase_weights["final norm+lm_head+logits"] = b.fixed;
  auto in = [&](const char* phase, std::initializer_list<const DevLinear*> ls) {
    for (const DevLinear* l : ls) {
      const auto n = static_cast<double>(l->resident_bytes());
      b.fixed += n;
      if (n > 0) b.phase_weights[phase] += n;
    }
  };
  for (const DevLayer& dl : dm.layers) {
    in("attn norm+qkv+g", {&dl.qkv, &dl.q, &dl.k, &dl.v, &dl.g});
    in("attn gate+o_proj", {&dl.o});
    in("dense mlp", {&dl.mlp.gate_up, &dl.mlp.down});
    in("moe norm+router", {&dl.router});
    in("moe shared", {&dl.shared.gate_up, &dl.shared.down});
    b.fixed += static_cast<double>(dl.vecs.bytes());
    const size_t ex = dl.experts.resident_bytes();
    if (ex == 0) continue;
    ++b.moe_layers;
    const double E = std::max(1, spec.moe.n_experts);
    if (dl.experts.fused) {
      ++b.fused_moe_layers;
      const double one =
          static_cast<double>(dl.experts.gate_up.m.expert_stride + dl.experts.down.m.expert_stride);
      b.experts += one;
      b.fixed += static_cast<double>(ex) - E * one;  // codebooks and slack
    } else {
      b.experts += static_cast<double>(ex) / E;
    }
  }
  return b;
}

std::map<std::string, double> phase_bytes(const StreamBytes& sb, int batch, double distinct, double kv) {
  std::map<std::string, double> m = sb.phase_weights;
  if (sb.moe_layers > 0) m["moe routed"] += distinct * sb.experts;
  m["attn core"] += kv;
  m["embed"] += batch * sb.embed_row;
  return m;
}

double kv_bytes_at(const model::ModelSpec& spec, int64_t p) {
  double n = 0;
  for (const auto& L : spec.layers) {
    const int64_t keys =
        L.attn == model::AttnKind::kSliding && L.window > 0 ? std::min<int64_t>(p + 1, L.window) : p + 1;
    n += static_cast<double>(keys) * L.n_kv_heads * L.head_dim * 2.0 * 2.0;
  }
  return n;
}

void add_batch1_ratios(nlohmann::json& cells) {
  for (auto& c : cells) {
    const int ctx = c["context"].get<int>();
    for (const auto& b1 : cells) {
      if (b1["batch"].get<int>() != 1 || b1["context"].get<int>() != ctx) continue;
      const double scale = c["bytes_per_step"].get<double>() / b1["bytes_per_step"].get<double>();
      c["vs_batch1_bytes_scaled"] =
          c["ms_per_step"].get<double>() / (scale * b1["ms_per_step"].get<double>());
      break;
    }
  }
}

uint64_t fnv1a(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gridq::cuda::decode_bench

namespace gridq::cuda {

std::string format_bench_decode_table(const nlohmann::json& r) {
  std::string s = fmt::format("gridq bench decode — {} — {} — {} — copy {:.0f} GB/s\n",
                              r["date"].get<std::string>(), r["gpu"].get<std::string>(),
                              r["model"]["name"].get<std::string>(), r["copy_gbs"].get<double>());
  s += fmt::format("{:>5} {:>7} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9} {:>7}\n", "batch", "context", "ms/step",
                   "tok/s", "GB/step", "GB/s", "%copy", "tok/s smp", "vs b1");
  for (const auto& c : r["cells"])
    s += fmt::format("{:>5} {:>7} {:>9.3f} {:>9.1f} {:>9.3f} {:>8.0f} {:>6.1f}% {:>9.1f} {:>7}\n",
                     c["batch"].get<int>(), c["context"].get<int>(), c["ms_per_step"].get<double>(),
                     c["tok_s"].get<double>(), c["bytes_per_step"].get<double>() / 1e9,
                     c["gbs"].get<double>(), c["pct_copy"].get<double>(), c.value("tok_s_sampled", 0.0),
                     c.contains("vs_batch1_bytes_scaled")
                         ? fmt::format("{:.3f}", c["vs_batch1_bytes_scaled"].get<double>())
                         : std::string("-"));
  if (r.contains("prefill")) {
    s += fmt::format("{:>7} {:>10} {:>10} {:>10}\n", "prompt", "ms", "tok/s", "TTFT ms");
    for (const auto& c : r["prefill"])
      s += fmt::format("{:>7} {:>10.2f} {:>10.1f} {:>10.2f}\n", c["prompt_tokens"].get<int>(),
                       c["ms"].get<double>(), c["tok_s"].get<double>(), c["ttft_ms"].get<double>());
  }
  return s;
}

}  // namespace gridq::cuda
