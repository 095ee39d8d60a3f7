// GEMM instantiations (gemm_impl.cuh): BF16 (store, SwiGLU), FP8 W8A8 (store) and NVFP4-CB K16 v2 (store,
// SwiGLU). Other formats answer cudaErrorNotSupported and run as 16-row GEMV slices (the same bits).
#include "runtime/cuda/gemm_impl.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

namespace {

template <class Dec, int MODE, int MINB>
cudaError_t launch_gemm_minb(int fmt, int k, int v, const KParams& p, cudaStream_t s, bool pdl, long long mwb) {
  constexpr int NB = 8 * gemm_nt<MODE>();
  constexpr int kSmem = gemm_smem_bytes<Dec, MODE>();
  static const cudaError_t attr =
      cudaFuncSetAttribute(gemm_kernel<Dec, MODE, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  long long blocks = 0;
  // The GEMV's grid comes from the GEMV's own translation unit (gemv_cb.cuh: one device function per kernel).
  const cudaError_t ge = raw_gemv_grid(fmt, k, v, MODE, static_cast<long long>(p.R) * p.S, mwb, blocks);
  if (ge != cudaSuccess) return ge;
  GemmParams gp;
  gp.kp = p;
  gp.kp.trace = nullptr;
  gp.gemv_warps = static_cast<unsigned>(blocks * kWarpsPerBlock);
  gp.tile_groups = (p.R + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const long long grid = static_cast<long long>(gp.tile_groups) * ((p.M + NB - 1) / NB);
  if (grid > 0x7FFFFFFFLL) return cudaErrorInvalidValue;
  return launch_pdl(pdl, gemm_kernel<Dec, MODE, MINB>, dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                    static_cast<size_t>(kSmem), s, gp);
}

// Two CTAs an SM for the dense formats past a decode step's rows (gemm_impl.cuh).
constexpr int kDecodeRows = 64;
template <class Dec, int MODE>
cudaError_t launch_gemm(int fmt, int k, int v, const KParams& p, cudaStream_t s, bool pdl, long long mwb) {
  if constexpr (Dec::kUnitK != 256) {
    if (p.M > kDecodeRows) return launch_gemm_minb<Dec, MODE, 2>(fmt, k, v, p, s, pdl, mwb);
  }
  return launch_gemm_minb<Dec, MODE, 1>(fmt, k, v, p, s, pdl, mwb);
}

}  // namespace

cudaError_t raw_gemm(int fmt, int k, int v, int mode, const KParams& p, cudaStream_t s, bool pdl,
                     long long mwb) {
  if (fmt == kFmtBF16) {
    if (mode == kStore) return launch_gemm<DecBF16, kStore>(fmt, k, v, p, s, pdl, mwb);
    if (mode == kSwiglu) return launch_gemm<DecBF16, kSwiglu>(fmt, k, v, p, s, pdl, mwb);
  } else if (fmt == kFmtFP8) {
    if (mode == kStore) return launch_gemm<DecFP8, kStore>(fmt, k, v, p, s, pdl, mwb);
  } else if (fmt == kFmtCB && k == 16 && v == 2) {
    if (mode == kStore) return launch_gemm<DecCB<16, 2>, kStore>(fmt, k, v, p, s, pdl, mwb);
    if (mode == kSwiglu) return launch_gemm<DecCB<16, 2>, kSwiglu>(fmt, k, v, p, s, pdl, mwb);
  }
  return cudaErrorNotSupported;
}

}  // namespace gridq::cuda::detail
