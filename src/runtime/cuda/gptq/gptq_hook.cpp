// runtime::CudaBackendHooks::cb_fp4 (runtime/device.h): one matrix from host memory through the batched
// encoders of gptq.h, on a stream of its own.
#include "runtime/cuda/gptq/gptq_hook.h"

#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda {

static_assert(runtime::CbFp4Reply::kPlaneBytes == gptq::kPlaneBytes, "one plane layout on both sides");

CbGptqBook gptq_book(const runtime::CbFp4Settings& s) {
  CbGptqBook book;
  book.K = s.K;
  book.t.assign(s.book, s.book + size_t(2) * s.K * 4);
  return book;
}

CbGptqSettings gptq_settings(const runtime::CbFp4Settings& s) {
  CbGptqSettings o;
  o.damp = s.damp;
  o.max_retries = s.max_retries;
  o.pilot_rows = s.pilot_rows;
  o.refits = s.refits;
  o.refine_passes = s.refine_passes;
  o.refine_scales = s.refine_scales;
  return o;
}

runtime::CbFp4Reply reply_of(const CbGptqResult& g, int m, int h, int R, int C, bool refine) {
  const size_t ni = size_t(R) * (C / gptq::kSubDim), np = size_t(R) * (C / gptq::kSB) * gptq::kPlaneBytes;
  auto slice = [m](const auto& v, size_t n) {
    return std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin() + m * n,
                                                                       v.begin() + (m + 1) * n);
  };
  runtime::CbFp4Reply out;
  out.sub_idx = slice(g.sub_idx, ni);
  out.planes = slice(g.planes, np);
  out.identity = g.identity[size_t(h)] != 0;
  out.damp_used = g.damp_used[size_t(h)];
  out.refined = refine && !g.refine_skipped[size_t(m)];
  if (out.refined) {
    out.refined_sub_idx = slice(g.refined_sub_idx, ni);
    out.refined_planes = slice(g.refined_planes, np);
    out.f_before = g.refine_f_before[size_t(m)];
    out.f_after = g.refine_f_after[size_t(m)];
    out.rounds = g.refine_rounds[size_t(m)];
    out.codes_changed = g.refine_codes[size_t(m)];
    out.scales_changed = g.refine_scales[size_t(m)];
  }
  return out;
}

Expected<runtime::CbFp4Reply> cb_fp4_host(const runtime::CbFp4Request& r) {
  if (!r.W || !r.q || !r.s.book || r.R <= 0 || r.C <= 0 || r.s.K <= 0)
    return err("gpu cb encode: W, q and the book are required, R, C, K > 0 (got [{}, {}], K {})", r.R, r.C,
               r.s.K);
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  const size_t RC = size_t(r.R) * r.C, CC = size_t(r.C) * r.C;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer W, DeviceBuffer::alloc(RC * 4, "gpu cb encode weights"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer q, DeviceBuffer::alloc(size_t(r.C) * 4, "gpu cb encode importances"));
  GRIDQ_RETURN_IF_ERROR(W.upload(r.W, RC * 4));
  GRIDQ_RETURN_IF_ERROR(q.upload(r.q, size_t(r.C) * 4));
  DeviceBuffer H;
  if (r.H) {
    GRIDQ_ASSIGN_OR_RETURN(H, DeviceBuffer::alloc(CC * 4, "gpu cb encode Hessian"));
    GRIDQ_RETURN_IF_ERROR(H.upload(r.H, CC * 4));
  }
  const CbGptqBatch job =
      CbGptqBatch::one(r.R, r.C, W.as<float>(), r.H ? H.as<float>() : nullptr, q.as<float>(), r.n_tokens);
  const CbGptqBook book = gptq_book(r.s);
  CbGptqSettings o = gptq_settings(r.s);
  if (!r.H) o.refine_passes = 0;
  GRIDQ_ASSIGN_OR_RETURN(CbGptqResult res, r.H ? cb_gptq_fp4(job, book, o, stream.get())
                                               : cb_rtn_fp4(job, book, o, stream.get()));
  runtime::CbFp4Reply out = reply_of(res, 0, 0, r.R, r.C, o.refine_passes > 0);
  if (!r.H) out.identity = false;  // RTN: no factorization (the batch result marks every input identity)
  return out;
}

Expected<double> half_trace_host(const float* W, const float* W_hat, int R, int C, const float* H) {
  if (!W || !W_hat || !H || R <= 0 || C <= 0)
    return err("gpu output proxy: W, W_hat and H are required, R, C > 0 (got [{}, {}])", R, C);
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  const size_t RC = size_t(R) * C, CC = size_t(C) * C;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::alloc(RC * 4, "gpu output proxy W"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer wh, DeviceBuffer::alloc(RC * 4, "gpu output proxy W_hat"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer h, DeviceBuffer::alloc(CC * 4, "gpu output proxy H"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer v, DeviceBuffer::alloc(RC * 8, "gpu output proxy rows"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer half,
                         DeviceBuffer::alloc((size_t(R) + 1) * 8, "gpu output proxy sums"));
  GRIDQ_RETURN_IF_ERROR(w.upload(W, RC * 4));
  GRIDQ_RETURN_IF_ERROR(wh.upload(W_hat, RC * 4));
  GRIDQ_RETURN_IF_ERROR(h.upload(H, CC * 4));
  double* sums = half.as<double>();
  GRIDQ_CUDA(gptq::raw_output_half_trace(w.as<float>(), wh.as<float>(), h.as<float>(), R, C, v.as<double>(),
                                         sums, sums + R, stream.get()));
  GRIDQ_CUDA(cudaStreamSynchronize(stream.get()));
  double total = 0.0;
  GRIDQ_RETURN_IF_ERROR(half.download(&total, 8, size_t(R) * 8));
  return total;
}

}  // namespace gridq::cuda
