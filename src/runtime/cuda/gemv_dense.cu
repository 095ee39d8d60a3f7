// BF16 and FP8 W8A8 GEMV instantiations and the format dispatch.
#include "runtime/cuda/launch.cuh"

namespace gridq::cuda::detail {

cudaError_t raw_gemv_dense(int fmt, int mode, int nt, const KParams& p, long long units, cudaStream_t s,
                           bool pdl, long long mwb) {
  if (fmt == kFmtBF16) {
    if (mode == kStore) return launch_nt<DecBF16, kStore>(nt, p, units, s, pdl, mwb);
    if (mode == kSwiglu) return launch_nt<DecBF16, kSwiglu>(nt, p, units, s, pdl, mwb);
  }
  if (fmt == kFmtFP8 && mode == kStore) return launch_nt<DecFP8, kStore>(nt, p, units, s, pdl, mwb);
  return cudaErrorNotSupported;
}

void raw_set_blocks_per_sm(int n) { g_blocks_per_sm_cap = n; }
int raw_blocks_per_sm() { return g_blocks_per_sm_cap; }
void raw_set_l2_prefetch(bool on) { g_l2_prefetch = on; }

cudaError_t raw_gemv(int fmt, int k, int v, int mode, int nt, const KParams& p, long long max_units,
                     cudaStream_t s, bool pdl, long long min_warp_bytes) {
  if (fmt == kFmtCB) return raw_gemv_cb(k, v, mode, nt, p, max_units, s, pdl, min_warp_bytes);
  return raw_gemv_dense(fmt, mode, nt, p, max_units, s, pdl, min_warp_bytes);
}

}  // namespace gridq::cuda::detail
