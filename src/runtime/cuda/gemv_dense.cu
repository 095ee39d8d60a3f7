// BF16 and FP8 W8A8 GEMV and persistent-chain instantiations, and the format dispatch.
#include "runtime/cuda/chain_launch.cuh"
#include "runtime/cuda/gemv_cb.cuh"
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

cudaError_t raw_chain_dense(int fmt, int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb) {
  if (fmt == kFmtBF16) {
    if (mode == kStore) return launch_chain_nt<DecBF16, kStore>(nt, c, s, mwb);
    if (mode == kSwiglu) return launch_chain_nt<DecBF16, kSwiglu>(nt, c, s, mwb);
  }
  if (fmt == kFmtFP8 && mode == kStore) return launch_chain_nt<DecFP8, kStore>(nt, c, s, mwb);
  return cudaErrorNotSupported;
}

cudaError_t raw_gemv_chain(int fmt, int k, int v, int mode, int nt, ChainParams& c, cudaStream_t s,
                           long long min_warp_bytes) {
  if (fmt == kFmtCB) return raw_chain_cb(k, v, mode, nt, c, s, min_warp_bytes);
  return raw_chain_dense(fmt, mode, nt, c, s, min_warp_bytes);
}

void raw_set_chain_trace(unsigned long long* base) { g_chain_trace = base; }
void raw_set_chain_bulk(bool on) { g_chain_bulk = on; }
bool raw_chain_bulk() { return g_chain_bulk; }

void raw_set_blocks_per_sm(int n) { g_blocks_per_sm_cap = n; }
int raw_blocks_per_sm() { return g_blocks_per_sm_cap; }
void raw_set_l2_prefetch(bool on) { g_l2_prefetch = on; }
void raw_set_trace(unsigned long long* base, long long capacity) {
  g_trace_base = base;
  g_trace_cap = capacity;
  g_trace_used = 0;
}
long long raw_trace_used() { return g_trace_used; }

cudaError_t raw_gemv(int fmt, int k, int v, int mode, int nt, const KParams& p, long long max_units,
                     cudaStream_t s, bool pdl, long long min_warp_bytes) {
  if (fmt == kFmtCB) return raw_gemv_cb(k, v, mode, nt, p, max_units, s, pdl, min_warp_bytes);
  return raw_gemv_dense(fmt, mode, nt, p, max_units, s, pdl, min_warp_bytes);
}

cudaError_t raw_gemv_grid(int fmt, int k, int v, int mode, long long units, long long mwb,
                          long long& blocks) {
  if (fmt == kFmtBF16 && mode == kStore) return gemv_grid<DecBF16, kStore>(units, mwb, blocks);
  if (fmt == kFmtBF16 && mode == kSwiglu) return gemv_grid<DecBF16, kSwiglu>(units, mwb, blocks);
  if (fmt == kFmtFP8 && mode == kStore) return gemv_grid<DecFP8, kStore>(units, mwb, blocks);
  if (fmt == kFmtCB && k == 16) return cb16_grid(v, mode, units, mwb, blocks);
  return cudaErrorNotSupported;
}

}  // namespace gridq::cuda::detail
