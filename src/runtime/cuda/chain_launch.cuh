// Kernel-side launch of one chain_kernel instantiation: one block per SM (all resident: the grid barrier
// needs it), the per-phase warp counts, dynamic shared memory opt-in, optional programmatic dependent launch.
#pragma once

#include <algorithm>

#include "runtime/cuda/chain_impl.cuh"
#include "runtime/cuda/launch.cuh"

namespace gridq::cuda::detail {

inline unsigned long long* g_chain_trace = nullptr;  // diagnostics only (raw_set_chain_trace)
// Ring filled by per-lane cp.async (default) or copy-engine bulk copies (raw_set_chain_bulk): measured equal
// for CB and 1–10 % slower for FP8/BF16 with the copy engine (bench/results/2026-11-30-h200-kernels-v2.md).
inline bool g_chain_bulk = false;

template <class Dec, int NT, int MODE>
const KernelShape& chain_shape() {
  static const KernelShape shape = query_kernel_shape(
      chain_kernel<Dec, NT, MODE>, chain_warps<Dec, NT>() * 32, chain_smem_bytes<Dec, NT, MODE>());
  return shape;
}

template <class Dec, int NT, int MODE>
cudaError_t launch_chain_kernel(ChainParams& c, cudaStream_t stream, long long min_warp_bytes) {
  const KernelShape& s = chain_shape<Dec, NT, MODE>();
  if (s.status != cudaSuccess) return s.status;
  if (c.n < 1 || c.n > kMaxChainPhases) return cudaErrorInvalidValue;
  constexpr int NP = MODE == kSwiglu ? 2 : 1;
  constexpr int NO = NP * NT * 4;
  // One block per SM: every block must be resident for the grid barrier, and more would not fit anyway.
  const long long blocks = s.sms;
  const long long Ttot = blocks * chain_warps<Dec, NT>();
  if (Ttot * 2 * NO * 32 > kMaxPartialFloats) return cudaErrorInvalidConfiguration;
  const long long unit_bytes = static_cast<long long>(Dec::kUnitBytes) * NP;
  const long long min_units = std::max<long long>(1, min_warp_bytes / unit_bytes);
  for (int i = 0; i < c.n; ++i) {
    KParams& p = c.ph[i];
    const long long U = static_cast<long long>(p.R) * p.S;
    long long T = std::min(Ttot, std::max<long long>(1, (U + min_units - 1) / min_units));
    // 32-bit partition math in the kernel: U · T < 2^32.
    T = std::min(T, 0xFFFFFFFFLL / std::max<long long>(U, 1));
    p.warps = static_cast<int>(std::max<long long>(T, 1));
    p.trace = nullptr;
    p.l2_prefetch = 0;
  }
  c.trace = g_chain_trace;
  c.bulk = g_chain_bulk ? 1 : 0;

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(chain_warps<Dec, NT>() * 32);
  cfg.dynamicSmemBytes = chain_smem_bytes<Dec, NT, MODE>();
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = c.pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, chain_kernel<Dec, NT, MODE>, c);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template <class Dec, int MODE>
cudaError_t launch_chain_nt(int nt, ChainParams& c, cudaStream_t s, long long mwb) {
  return nt == 2 ? launch_chain_kernel<Dec, 2, MODE>(c, s, mwb)
                 : launch_chain_kernel<Dec, 1, MODE>(c, s, mwb);
}

// Per translation unit entry points (gemv_dense.cu, gemv_cb*.cu).
cudaError_t raw_chain_dense(int fmt, int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb);
cudaError_t raw_chain_cb(int k, int v, int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb);

}  // namespace gridq::cuda::detail
