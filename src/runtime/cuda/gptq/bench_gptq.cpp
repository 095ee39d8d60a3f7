// `gridq bench quantize`: the GPU CB-GPTQ encoder over one MoE layer's routed experts at a model's real
// shapes (bench_gptq.h). Inputs are built on the device: weights uniform with std 0.02, each expert's
// Hessian from its own random rows (the calibration's average routed count), the imatrix from diag(H).
#include "runtime/cuda/gptq/bench_gptq.h"

#include <algorithm>
#include <chrono>

#include "core/version.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/cuda/gptq/gptq_kernels.h"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/synthetic_model.h"

namespace gridq::cuda {
namespace {

// A model's MoE shapes, from the synthetic model's spec (synthetic_model.h): the same names and numbers.
struct Shape {
  int hidden = 0, inter = 0, experts = 0, layers_moe = 0;
};

Expected<Shape> shape_of(const std::string& name) {
  GRIDQ_ASSIGN_OR_RETURN(model::ModelSpec spec, synthetic_spec(name));
  Shape sh{spec.hidden_size, spec.moe.expert_intermediate, spec.moe.n_experts, 0};
  for (const model::LayerSpec& l : spec.layers) sh.layers_moe += l.mlp == model::MlpKind::kMoe ? 1 : 0;
  if (sh.layers_moe == 0) return err("bench quantize --shape '{}': the model has no MoE layer", name);
  return sh;
}

// One batch of `experts` experts' matrices [R, C] (`per` matrices per expert sharing its Hessian).
struct Timing {
  double factor = 0, encode = 0, refine = 0, rtn = 0, inputs = 0;
};

Status run_batch(int experts, int per, int R, int C, int64_t rows, uint64_t seed, const CbGptqBook& book,
                 const CbGptqBenchOptions& o, cudaStream_t s, Timing& t, size_t& peak) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t M = size_t(experts) * per, RC = size_t(R) * C, CC = size_t(C) * C;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer W, DeviceBuffer::alloc(M * RC * 4, "bench weights"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer H, DeviceBuffer::alloc(size_t(experts) * CC * 4, "bench Hessians"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer q, DeviceBuffer::alloc(size_t(experts) * C * 4, "bench importances"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer X, DeviceBuffer::alloc(size_t(rows) * C * 4, "bench rows"));
  const float a = 0.02f * 1.7320508f;  // uniform [-a, a]: std 0.02
  GRIDQ_CUDA(detail::raw_fill_f32(W.as<float>(), M * RC, -a, a, seed, s));
  GRIDQ_CUDA(cudaMemsetAsync(H.as<float>(), 0, size_t(experts) * CC * 4, s));
  for (int e = 0; e < experts; ++e) {
    GRIDQ_CUDA(detail::raw_fill_f32(X.as<float>(), size_t(rows) * C, -1.0f, 1.0f, seed * 7919 + e, s));
    GRIDQ_CUDA(detail::raw_hessian_tiles(X.as<float>(), rows, C, H.as<float>() + e * CC, s));
  }
  std::vector<long long> n(size_t(experts), rows);
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer nd, DeviceBuffer::alloc(n.size() * 8, "bench counts"));
  GRIDQ_RETURN_IF_ERROR(nd.upload(n.data(), n.size() * 8));
  GRIDQ_CUDA(gptq::raw_mirror_imatrix(H.as<float>(), experts, C, nd.as<long long>(), q.as<float>(), s));
  GRIDQ_CUDA(cudaStreamSynchronize(s));
  t.inputs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CbGptqBatch job;
  job.R = R;
  job.C = C;
  job.M = static_cast<int>(M);
  job.nH = experts;
  job.W = W.as<float>();
  job.H = H.as<float>();
  job.q = q.as<float>();
  for (size_t m = 0; m < M; ++m) job.h_of.push_back(static_cast<int>(m / per));
  job.n_tokens.assign(size_t(experts), rows);
  CbGptqSettings set;
  set.refine_passes = o.refine_passes;
  set.refine_scales = true;
  GRIDQ_ASSIGN_OR_RETURN(CbGptqResult r, cb_gptq_fp4(job, book, set, s));
  t.factor += r.seconds_factor;
  t.encode += r.seconds_encode;
  t.refine += r.seconds_refine;
  peak = std::max(peak, r.device_bytes_peak);
  if (o.rtn) {
    GRIDQ_ASSIGN_OR_RETURN(CbGptqResult rr, cb_rtn_fp4(job, book, CbGptqSettings{}, s));
    t.rtn += rr.seconds_encode;
  }
  return {};
}

}  // namespace

Expected<nlohmann::json> bench_cb_gptq(const CbGptqBenchOptions& o, const CbGptqBook& book) {
  GRIDQ_ASSIGN_OR_RETURN(Shape sh, shape_of(o.shape));
  const int experts = o.experts > 0 ? o.experts : sh.experts;
  if (experts > sh.experts || o.chunk < 1 || o.rows < 1)
    return err("bench quantize: --experts {} (0..{}, 0 = all), --chunk {}, --rows {} (>= 1)", o.experts,
               sh.experts, o.chunk, o.rows);
  GRIDQ_ASSIGN_OR_RETURN(DeviceInfo dev, device_info());
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  int driver = 0;
  GRIDQ_CUDA(cudaDriverGetVersion(&driver));
  // The copy ceiling of this run (hopper.md §10); the encoder is float64-bound, not memory-bound, but every
  // GPU number is reported beside it.
  GRIDQ_ASSIGN_OR_RETURN(double copy_gbps, bench::copy_bandwidth(stream.get(), 10));
  Timing gu, dn;
  size_t peak = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int e0 = 0; e0 < experts; e0 += o.chunk) {
    const int ne = std::min(o.chunk, experts - e0);
    if (o.progress) o.progress(e0, experts);
    // gate and up [I, d] share H_e [d, d]; down [d, I] has M_e [I, I].
    GRIDQ_RETURN_IF_ERROR(
        run_batch(ne, 2, sh.inter, sh.hidden, o.rows, o.seed + e0, book, o, stream.get(), gu, peak));
    GRIDQ_RETURN_IF_ERROR(
        run_batch(ne, 1, sh.hidden, sh.inter, o.rows, o.seed + 100003 + e0, book, o, stream.get(), dn, peak));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto part = [](const Timing& t) {
    return nlohmann::json{
        {"factor_s", t.factor}, {"encode_s", t.encode}, {"refine_s", t.refine}, {"rtn_s", t.rtn}};
  };
  const double layer = gu.factor + gu.encode + gu.refine + dn.factor + dn.encode + dn.refine;
  const double scale = static_cast<double>(sh.experts) / experts;  // to a whole layer's experts
  nlohmann::json j = {
      {"bench", "quantize"},
      {"shape", o.shape},
      {"experts", experts},
      {"chunk", o.chunk},
      {"rows_per_expert", o.rows},
      {"device", dev.name},
      {"cuda_driver", std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10)},
      {"copy_gbps", copy_gbps},
      {"commit", gridq::git_commit()},
      {"date", bench::utc_now()},
      {"refine_passes", o.refine_passes},
      {"gate_up", part(gu)},
      {"down", part(dn)},
      {"inputs_s", gu.inputs + dn.inputs},
      {"wall_s", wall},
      {"cb_gptq_s_per_layer", layer * scale},
      {"cb_gptq_s_model", layer * scale * sh.layers_moe},
      {"moe_layers", sh.layers_moe},
      {"layer_experts", sh.experts},
      {"peak_device_bytes", peak}};
  return j;
}

}  // namespace gridq::cuda
