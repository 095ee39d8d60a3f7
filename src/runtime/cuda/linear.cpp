#include "runtime/cuda/linear.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda {

namespace {

Status run_linear(const DevLinear& L, const uint16_t* x, int T, float* y, bool accumulate,
                  const LinearScratch& sc, const Workspace& ws, cudaStream_t s) {
  if (T < 1) return err("linear ({}): {} rows", L.kernel, T);
  if (L.path == DevLinear::Path::kRef) {
    detail::RefArgs a;
    a.w = L.ref;
    a.P = T;
    a.x = x;
    a.y = y;
    a.ld_y = L.rows;
    GRIDQ_RETURN_IF_ERROR(cuda_status(detail::raw_ref_matvec(a, s), "reference matvec", __FILE__, __LINE__));
    return {};
  }
  if (L.path != DevLinear::Path::kTiled) return err("linear: matrix was not uploaded");
  GemvArgs g;
  g.w = &L.tiled.m;
  g.M = T;
  g.y = y;
  g.out = OutType::F32;
  g.accumulate = accumulate;
  if (L.tiled.m.format == WeightFormat::FP8) {
    if (sc.cache == nullptr || sc.cache->fp8_of != x)
      GRIDQ_RETURN_IF_ERROR(quantize_fp8_tokens(x, T, L.cols, sc.xq, sc.xs, s, detail::forward_pdl()));
    if (sc.cache) sc.cache->fp8_of = x;
    g.x = sc.xq;
    g.xscale = sc.xs;
  } else if (L.act_bits == 4) {
    if (sc.cache == nullptr || sc.cache->fp4_of != x)
      GRIDQ_RETURN_IF_ERROR(qdq_fp4(x, T, L.cols, sc.xin, s, detail::forward_pdl()));
    if (sc.cache) sc.cache->fp4_of = x;
    g.x = sc.xin;
  } else {
    g.x = x;
  }
  // Any row count: above kMaxTokens the GEMM (or GEMV slices) gives every row a GEMV launch's bits.
  return gemv(g, ws, s, detail::forward_pdl());
}

}  // namespace

Status apply_linear(const DevLinear& L, const uint16_t* x, int T, float* y, const LinearScratch& sc,
                    const Workspace& ws, cudaStream_t s) {
  return run_linear(L, x, T, y, false, sc, ws, s);
}

Status apply_linear_residual(const DevLinear& L, const uint16_t* x, int T, float* res, int H, float* y,
                             const LinearScratch& sc, const Workspace& ws, cudaStream_t s) {
  if (L.path == DevLinear::Path::kTiled && L.out_rows() == H) return run_linear(L, x, T, res, true, sc, ws, s);
  GRIDQ_RETURN_IF_ERROR(run_linear(L, x, T, y, false, sc, ws, s));
  return cuda_status(detail::raw_add(res, y, false, L.out_rows(), T, H, s), "residual add", __FILE__, __LINE__);
}

}  // namespace gridq::cuda
