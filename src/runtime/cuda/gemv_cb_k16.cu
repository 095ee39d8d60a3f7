// NVFP4_CB_K16 GEMV and persistent-chain instantiations (v1 and v2).
#include "runtime/cuda/gemv_cb.cuh"

namespace gridq::cuda::detail {

template <>
cudaError_t cb_k<16>(int v, int mode, int nt, const KParams& p, long long units, cudaStream_t s, bool pdl,
                     long long mwb) {
  return v == 2 ? cb_kv<16, 2>(mode, nt, p, units, s, pdl, mwb)
                : cb_kv<16, 1>(mode, nt, p, units, s, pdl, mwb);
}

template <>
cudaError_t cb_chain_k<16>(int v, int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb) {
  return v == 2 ? cb_chain_kv<16, 2>(mode, nt, c, s, mwb) : cb_chain_kv<16, 1>(mode, nt, c, s, mwb);
}

cudaError_t cb16_grid(int v, int mode, long long units, long long mwb, long long& blocks) {
  if (v == 2 && mode == kStore) return gemv_grid<DecCB<16, 2>, kStore>(units, mwb, blocks);
  if (v == 2 && mode == kSwiglu) return gemv_grid<DecCB<16, 2>, kSwiglu>(units, mwb, blocks);
  return cudaErrorNotSupported;
}

}  // namespace gridq::cuda::detail
