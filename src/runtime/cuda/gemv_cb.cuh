// NVFP4-CB GEMV instantiation helper shared by gemv_cb_k*.cu.
#pragma once

#include "runtime/cuda/chain_launch.cuh"
#include "runtime/cuda/launch.cuh"

namespace gridq::cuda::detail {

template <int K, int V>
cudaError_t cb_kv(int mode, int nt, const KParams& p, long long units, cudaStream_t s, bool pdl,
                  long long mwb) {
  if (mode == kStore) return launch_nt<DecCB<K, V>, kStore>(nt, p, units, s, pdl, mwb);
  if constexpr (K == 16 && V == 2) {
    if (mode == kSwiglu) return launch_nt<DecCB<K, V>, kSwiglu>(nt, p, units, s, pdl, mwb);
    if (mode == kMoeDown) return launch_nt<DecCB<K, V>, kMoeDown>(nt, p, units, s, pdl, mwb);
  }
  return cudaErrorNotSupported;
}

template <int K>
cudaError_t cb_k(int v, int mode, int nt, const KParams& p, long long units, cudaStream_t s, bool pdl,
                 long long mwb);

template <int K, int V>
cudaError_t cb_chain_kv(int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb) {
  if (mode == kStore) return launch_chain_nt<DecCB<K, V>, kStore>(nt, c, s, mwb);
  if constexpr (K == 16 && V == 2) {
    if (mode == kSwiglu) return launch_chain_nt<DecCB<K, V>, kSwiglu>(nt, c, s, mwb);
  }
  return cudaErrorNotSupported;
}

template <int K>
cudaError_t cb_chain_k(int v, int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb);

// The GEMV grid (gemv_grid) of a K16 matrix, from the TU that instantiates its GEMV kernels (gemv_cb_k16.cu):
// a kernel template instantiated in two translation units would be two device functions behind one host
// stub.
cudaError_t cb16_grid(int v, int mode, long long units, long long mwb, long long& blocks);

}  // namespace gridq::cuda::detail
