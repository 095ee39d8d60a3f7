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

}  // namespace gridq::cuda::detail
