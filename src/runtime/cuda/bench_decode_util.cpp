#include "runtime/cuda/bench_decode_util.h"

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

uint64_t fnv1a(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gridq::cuda::decode_bench
