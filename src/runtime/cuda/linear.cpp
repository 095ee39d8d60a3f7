#include "runtime/cuda/linear.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda {

namespace {

Status add_rows(float* res, const float* y, long long ld_y, int T, int H, cudaStream_t s) {
  return cuda_status(detail::raw_add(res, y, false, ld_y, T, H, s), "residual add", __FILE__, __LINE__);
}

// y = L(x), or with res: res [T, H] += L(x) (y the scratch of the unfused path).
Status run_linear(const DevLinear& L, const uint16_t* x, int T, float* y, float* res, int H,
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
    return res ? add_rows(res, y, L.rows, T, H, s) : Status{};
  }
  if (L.path != DevLinear::Path::kTiled) return err("linear: matrix was not uploaded");
  GemvArgs g;
  g.w = &L.tiled.m;
  g.M = T;
  g.y = y;
  g.out = OutType::F32;
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
  return res ? gemv_residual(g, res, H, ws, s) : gemv(g, ws, s, detail::forward_pdl());
}

}  // namespace

Status gemv_residual(GemvArgs g, float* res, int H, const Workspace& ws, cudaStream_t s) {
  if (g.w == nullptr || g.y == nullptr) return err("gemv_residual: no matrix or no scratch output");
  g.out = OutType::F32;
  if (g.w->rows == H) {
    g.y = res;
    g.accumulate = true;
    return gemv(g, ws, s, detail::forward_pdl());
  }
  GRIDQ_RETURN_IF_ERROR(gemv(g, ws, s, detail::forward_pdl()));
  return add_rows(res, static_cast<const float*>(g.y), g.w->rows, g.M, H, s);
}

Status apply_linear(const DevLinear& L, const uint16_t* x, int T, float* y, const LinearScratch& sc,
                    const Workspace& ws, cudaStream_t s) {
  return run_linear(L, x, T, y, nullptr, 0, sc, ws, s);
}

Status apply_linear_residual(const DevLinear& L, const uint16_t* x, int T, float* res, int H, float* y,
                             const LinearScratch& sc, const Workspace& ws, cudaStream_t s) {
  return run_linear(L, x, T, y, res, H, sc, ws, s);
}

}  // namespace gridq::cuda
