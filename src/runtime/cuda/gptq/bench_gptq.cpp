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

namespace gridq::cuda {
namespace {

struct Shape {
  int hidden, inter, layers_moe;
};

Expected<Shape> shape_of(const std::string& name) {
  if (name == "laguna-s-2.1") return Shape{3072, 1024, 47};
  if (name == "laguna-xs-2.1") return Shape{2048, 512, 39};
  if (name == "laguna-tiny-code") return Shape{512, 256, 3};
  return err("bench quantize --shape '{}': expected laguna-s-2.1, laguna-xs-2.1 or laguna-tiny-code", name);
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
  if (o.experts < 1 || o.chunk < 1 || o.rows < 1)
    return err("bench quantize: --experts {}, --chunk {}, --rows {} must be >= 1", o.experts, o.chunk,
               o.rows);
  GRIDQ_ASSIGN_OR_RETURN(DeviceInfo dev, device_info());
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  Timing gu, dn;
  size_t peak = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int e0 = 0; e0 < o.experts; e0 += o.chunk) {
    const int ne = std::min(o.chunk, o.experts - e0);
    if (o.progress) o.progress(e0, o.experts);
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
  const double scale = 256.0 / o.experts;  // a layer has 256 experts
  nlohmann::json j = {{"bench", "quantize"},
                      {"shape", o.shape},
                      {"experts", o.experts},
                      {"chunk", o.chunk},
                      {"rows_per_expert", o.rows},
                      {"device", dev.name},
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
                      {"peak_device_bytes", peak}};
  return j;
}

}  // namespace gridq::cuda
