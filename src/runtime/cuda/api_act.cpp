// Host side of the kernel API's activation kernels (kernels.h): FP8 per-token quantization, FP4 QDQ,
// RMSNorm and routing, with the argument checks of api.cpp.
#include "runtime/cuda/api_launched.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda {

using namespace detail;

Status quantize_fp8_tokens(const uint16_t* x, int M, int K, uint8_t* q, float* s, cudaStream_t stream,
                           bool pdl) {
  GRIDQ_RETURN_IF_ERROR(check_rows(M, "quantize_fp8_tokens"));
  if (!x || !q || !s || K <= 0) return err("quantize_fp8_tokens: null argument or K {} <= 0", K);
  GRIDQ_LAUNCHED(raw_quantize_fp8(x, M, K, q, s, stream, pdl), "quantize_fp8_tokens");
  return {};
}

Status qdq_fp4(const uint16_t* x, int M, int K, uint16_t* y, cudaStream_t stream, bool pdl) {
  if (M < 1) return err("qdq_fp4: M = {} < 1", M);
  if (K <= 0 || K % 16) return err("qdq_fp4: row length {} is not a positive multiple of 16", K);
  if (!x || !y) return err("qdq_fp4: null argument");
  GRIDQ_LAUNCHED(raw_qdq_fp4(x, M, K, y, stream, pdl), "qdq_fp4");
  return {};
}

Status rmsnorm(const RmsNormArgs& a, cudaStream_t stream, bool pdl) {
  if (a.M < 1) return err("rmsnorm: M = {} < 1", a.M);
  if (a.H <= 0 || a.H > 96 * 1024) return err("rmsnorm: H = {} outside 1..98304", a.H);
  if (!a.x || !a.w) return err("rmsnorm: null input or weight");
  if (a.y_fp4 && a.H % 16) return err("rmsnorm: FP4 output needs H % 16 == 0 (H = {})", a.H);
  if ((a.y_q == nullptr) != (a.y_s == nullptr)) return err("rmsnorm: FP8 output needs both codes and scales");
  GRIDQ_LAUNCHED(raw_rmsnorm(a.x, a.w, a.M, a.H, a.eps, a.y, a.y_fp4, a.y_q, a.y_s, stream, pdl), "rmsnorm");
  return {};
}

Status route(const RouteArgs& a, cudaStream_t stream, bool pdl) {
  GRIDQ_RETURN_IF_ERROR(check_m(a.M, "route"));
  if (a.E < 1 || a.E > 512) return err("route: E = {} outside 1..512", a.E);
  if (a.topk < 1 || a.topk > 16 || a.topk > a.E) return err("route: top-k {} outside 1..min(16, E)", a.topk);
  if (!a.logits || !a.bias || !a.nslots || !a.slot_expert || !a.slot_weight)
    return err("route: null argument");
  GRIDQ_LAUNCHED(raw_route(a.logits, a.bias, a.M, a.E, a.topk, a.nslots, a.slot_expert, a.slot_weight,
                           a.topk_ids, a.topk_w, stream, pdl),
                 "route");
  return {};
}

}  // namespace gridq::cuda
