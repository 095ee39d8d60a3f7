// GEMM instantiations (gemm_impl.cuh): BF16 (store, SwiGLU), FP8 W8A8 (store) and NVFP4-CB K16 v2 (store,
// SwiGLU). Other formats answer cudaErrorNotSupported and run as 16-row GEMV slices (the same bits).
#include <algorithm>

#include "runtime/cuda/gemm_impl.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

namespace {

// CTAs an SM a split launch is built for (gemm_kernel's MINB): two for the dense formats, one for CB, whose
// decoder tables and stages fill an SM's shared memory.
template <class Dec>
constexpr int split_minb() {
  return Dec::kUnitK == 256 ? 1 : 2;
}

// The launch's shape: the GEMV's split of the matrix and, where it pays and fits, the split over K.
template <class Dec, int MODE>
cudaError_t plan_gemm(int fmt, int k, int v, const KParams& p, long long mwb, GemmParams& gp) {
  constexpr int NB = 8 * gemm_nt<MODE>();
  long long blocks = 0;
  // The GEMV's grid comes from the GEMV's own translation unit (gemv_cb.cuh: one device function per kernel),
  // tile-aligned as the GEMV launcher does (launch.cuh).
  const cudaError_t ge = raw_gemv_grid(fmt, k, v, MODE, static_cast<long long>(p.R) * p.S, mwb, blocks);
  if (ge != cudaSuccess) return ge;
  blocks = tile_aligned_blocks(blocks, p.R);
  gp.kp = p;
  gp.kp.trace = nullptr;
  gp.gemv_warps = static_cast<unsigned>(blocks * kWarpsPerBlock);
  gp.tile_groups = (p.R + kWarpsPerBlock - 1) / kWarpsPerBlock;
  gp.token_blocks = (p.M + NB - 1) / NB;
  gp.parts = 1;
  gp.per = 1;
  // Split-K where the unsplit grid would leave SMs idle, the ranges are tile-aligned with at least one unit a
  // part, and the workspace holds every token block's parts and counters.
  const long long T = gp.gemv_warps, tb = gp.token_blocks;
  const long long P = T % p.R == 0 ? T / p.R : 1;
  if (P >= 2 && P <= p.S && gp.tile_groups * tb < 2LL * device_sm_count(0) &&
      tb * gemm_split_floats<MODE>(T) <= kMaxPartialFloats && tb * p.R <= kMaxCounters)
    gp.parts = static_cast<int>(P);
  // Parts a SwiGLU CTA takes: the fewest that fit every CTA in one wave (any count gives the same bits).
  const long long slots = static_cast<long long>(split_minb<Dec>()) * device_sm_count(0);
  const long long ctas = static_cast<long long>(gp.tile_groups) * tb * gp.parts;
  if (MODE == kSwiglu && gp.parts > 1 && slots > 0 && ctas > slots)
    gp.per = static_cast<int>(std::min<long long>(gp.parts, (ctas + slots - 1) / slots));
  return cudaSuccess;
}

template <class Dec, int MODE, int MINB, bool SPLIT>
cudaError_t launch_gemm_kernel(const GemmParams& gp, cudaStream_t s, bool pdl) {
  constexpr int kSmem = gemm_smem_bytes<Dec, MODE>();
  static const cudaError_t attr = cudaFuncSetAttribute(gemm_kernel<Dec, MODE, MINB, SPLIT>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const long long grid =
      static_cast<long long>(gp.tile_groups) * gp.token_blocks * ((gp.parts + gp.per - 1) / gp.per);
  if (grid > 0x7FFFFFFFLL) return cudaErrorInvalidValue;
  return launch_pdl(pdl, gemm_kernel<Dec, MODE, MINB, SPLIT>, dim3(static_cast<unsigned>(grid)),
                    dim3(kThreads), static_cast<size_t>(kSmem), s, gp);
}

// Two CTAs an SM for the dense formats past a decode step's rows (gemm_impl.cuh).
constexpr int kDecodeRows = 64;

template <class Dec, int MODE>
cudaError_t launch_gemm(int fmt, int k, int v, const KParams& p, long long mwb, cudaStream_t s, bool pdl) {
  GemmParams gp;
  const cudaError_t e = plan_gemm<Dec, MODE>(fmt, k, v, p, mwb, gp);
  if (e != cudaSuccess) return e;
  // The split grid is the GEMV's (T / 8 CTAs, sized to its occupancy: two an SM for FP8 and BF16) per token
  // block: split_minb CTAs an SM keep one token block in one wave.
  if (gp.parts > 1) return launch_gemm_kernel<Dec, MODE, split_minb<Dec>(), true>(gp, s, pdl);
  if constexpr (Dec::kUnitK != 256) {
    if (p.M > kDecodeRows) return launch_gemm_kernel<Dec, MODE, 2, false>(gp, s, pdl);
  }
  return launch_gemm_kernel<Dec, MODE, 1, false>(gp, s, pdl);
}

// f.template operator()<Dec, MODE>() for the (format, mode) pairs that have a GEMM.
template <class F>
cudaError_t with_gemm(int fmt, int k, int v, int mode, F&& f) {
  if (fmt == kFmtBF16) {
    if (mode == kStore) return f.template operator()<DecBF16, kStore>();
    if (mode == kSwiglu) return f.template operator()<DecBF16, kSwiglu>();
  } else if (fmt == kFmtFP8) {
    if (mode == kStore) return f.template operator()<DecFP8, kStore>();
  } else if (fmt == kFmtCB && k == 16 && v == 2) {
    if (mode == kStore) return f.template operator()<DecCB<16, 2>, kStore>();
    if (mode == kSwiglu) return f.template operator()<DecCB<16, 2>, kSwiglu>();
  }
  return cudaErrorNotSupported;
}

}  // namespace

cudaError_t raw_gemm(int fmt, int k, int v, int mode, const KParams& p, cudaStream_t s, bool pdl,
                     long long mwb) {
  return with_gemm(fmt, k, v, mode,
                   [&]<class Dec, int MODE>() { return launch_gemm<Dec, MODE>(fmt, k, v, p, mwb, s, pdl); });
}

cudaError_t raw_gemm_parts(int fmt, int k, int v, int mode, const KParams& p, long long mwb, int& parts) {
  return with_gemm(fmt, k, v, mode, [&]<class Dec, int MODE>() {
    GemmParams gp;
    const cudaError_t e = plan_gemm<Dec, MODE>(fmt, k, v, p, mwb, gp);
    parts = gp.parts;
    return e;
  });
}

}  // namespace gridq::cuda::detail
