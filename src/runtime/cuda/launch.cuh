// Kernel-side launch of one gemv_kernel instantiation: single-wave grid from the occupancy calculator,
// dynamic shared memory opt-in, optional programmatic dependent launch.
#pragma once

#include <algorithm>

#include "runtime/cuda/gemv_impl.cuh"

namespace gridq::cuda::detail {

struct KernelShape {
  cudaError_t status = cudaSuccess;
  int blocks_per_sm = 0;
  int sms = 0;
};

// Occupancy and SM count of `kern` at `threads` per block and `smem` bytes of dynamic shared memory (the
// opt-in set first, opt_in_smem); an error status when it cannot run at all.
template <class Kernel>
KernelShape query_kernel_shape(Kernel kern, int threads, int smem) {
  KernelShape s;
  s.status = opt_in_smem(kern, static_cast<size_t>(smem));
  if (s.status != cudaSuccess) return s;
  s.status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.blocks_per_sm, kern, threads, smem);
  if (s.status != cudaSuccess) return s;
  int dev = 0;
  s.status = cudaGetDevice(&dev);
  if (s.status != cudaSuccess) return s;
  s.status = cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev);
  if (s.status == cudaSuccess && s.blocks_per_sm < 1) s.status = cudaErrorInvalidConfiguration;
  return s;
}

// A whole-device grid of `kern` (every CTA resident at once) whose shared memory depends on a launch value
// (the grouped experts' offset tables on E): queried again only when `key` changes. `cache` belongs to the
// caller's kernel: {key, blocks}.
template <class Kernel>
cudaError_t resident_grid(Kernel kern, int threads, int smem, int key, int (&cache)[2], int& blocks) {
  if (cache[0] != key || cache[1] == 0) {
    const KernelShape sh = query_kernel_shape(kern, threads, smem);
    if (sh.status != cudaSuccess) return sh.status;
    cache[0] = key, cache[1] = sh.blocks_per_sm * sh.sms;
  }
  blocks = cache[1];
  return cudaSuccess;
}

template <class Dec, int NT, int MODE>
const KernelShape& kernel_shape() {
  static const KernelShape shape =
      query_kernel_shape(gemv_kernel<Dec, NT, MODE>, kThreads, kernel_smem_bytes<Dec, MODE>());
  return shape;
}

// Blocks per SM a GEMV grid may use: 0 = all that fit (measured faster than leaving room for the next
// kernel of a stack, see docs/kernels.md); n > 0 caps it.
inline int g_blocks_per_sm_cap = 0;
inline bool g_l2_prefetch = false;  // measured slower than the cp.async ring alone (docs/kernels.md)
inline unsigned long long* g_trace_base = nullptr;  // diagnostics only (raw_set_trace)
inline long long g_trace_cap = 0, g_trace_used = 0;

// Blocks of a GEMV launch over a matrix of `max_units` units; the split of the matrix among warps
// (gemv_impl.cuh) is a function of this count alone. It comes from the NT = 1 instantiation's occupancy
// and the NT = 2 partial-buffer cap whatever NT is, so a row's bits do not depend on how many rows the
// launch has (an NT = 2 launch that fits fewer blocks per SM runs its extra blocks as a second wave), and
// the GEMM (gemm_impl.cuh) reproduces the same split for wider steps.
template <class Dec, int MODE>
cudaError_t gemv_grid(long long max_units, long long min_warp_bytes, long long& blocks) {
  const KernelShape& s = kernel_shape<Dec, 1, MODE>();
  if (s.status != cudaSuccess) return s.status;
  constexpr int NP = MODE == kSwiglu ? 2 : 1;
  constexpr int NO = MODE == kMoeDown ? 2 * 4 : NP * 2 * 4;  // NT = 2's accumulator floats per lane
  const long long unit_bytes = static_cast<long long>(Dec::kUnitBytes) * NP;
  const long long min_units = std::max<long long>(1, min_warp_bytes / unit_bytes);
  const int bps = g_blocks_per_sm_cap > 0 ? std::min(g_blocks_per_sm_cap, s.blocks_per_sm) : s.blocks_per_sm;
  blocks = static_cast<long long>(bps) * s.sms;
  blocks = std::min(blocks, (max_units + kWarpsPerBlock * min_units - 1) / (kWarpsPerBlock * min_units));
  blocks = std::min(blocks, kMaxPartialFloats / (kWarpsPerBlock * 2LL * NO * 32));
  // The kernel's partition math is 32-bit: units · warps must stay below 2^32.
  blocks = std::min(blocks, 0xFFFFFFFFLL / (std::max<long long>(max_units, 1) * kWarpsPerBlock));
  blocks = std::max<long long>(blocks, 1);
  return cudaSuccess;
}

template <class Dec, int NT, int MODE>
cudaError_t launch_gemv_kernel(const KParams& p, long long max_units, cudaStream_t stream, bool pdl,
                               long long min_warp_bytes) {
  if (kernel_shape<Dec, NT, MODE>().status != cudaSuccess) return kernel_shape<Dec, NT, MODE>().status;
  long long blocks = 0;
  const cudaError_t ge = gemv_grid<Dec, MODE>(max_units, min_warp_bytes, blocks);
  if (ge != cudaSuccess) return ge;
  // A dense matrix (not an expert stack): tile-aligned ranges, as the GEMM's launcher (gemm.cu) computes.
  if (MODE != kMoeDown && p.slot_expert == nullptr) blocks = tile_aligned_blocks(blocks, p.R);

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kernel_smem_bytes<Dec, MODE>();
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  KParams q = p;
  q.l2_prefetch = g_l2_prefetch ? 1 : 0;
  q.trace = nullptr;
  if (g_trace_base != nullptr && g_trace_used + blocks * 4 <= g_trace_cap) {
    q.trace = g_trace_base + g_trace_used;
    g_trace_used += blocks * 4;
  }
  cudaError_t e = cudaLaunchKernelEx(&cfg, gemv_kernel<Dec, NT, MODE>, q);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template <class Dec, int MODE>
cudaError_t launch_nt(int nt, const KParams& p, long long units, cudaStream_t s, bool pdl, long long mwb) {
  return nt == 2 ? launch_gemv_kernel<Dec, 2, MODE>(p, units, s, pdl, mwb)
                 : launch_gemv_kernel<Dec, 1, MODE>(p, units, s, pdl, mwb);
}

// Per translation unit entry points (gemv_dense.cu, gemv_cb.cu).
cudaError_t raw_gemv_dense(int fmt, int mode, int nt, const KParams& p, long long units, cudaStream_t s,
                           bool pdl, long long mwb);
cudaError_t raw_gemv_cb(int k, int v, int mode, int nt, const KParams& p, long long units, cudaStream_t s,
                        bool pdl, long long mwb);

}  // namespace gridq::cuda::detail
