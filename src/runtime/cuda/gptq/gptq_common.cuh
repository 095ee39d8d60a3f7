// Device pieces shared by the CB-GPTQ kernels: the moment expressions of quant/scale_search_v2.cpp, the warp
// argmin with the CPU's tie rule, and the E4M3 rounding of the pilot. Compiled with -fmad=false: every
// `a += b * c` below is a multiply and an add, each rounded, as on the CPU.
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <type_traits>

#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda::gptq {

// Threads of a CTA whose threads loop over a sub-table's K entries: K itself up to a CTA's 1024 (K20), at
// least a warp; K24's 4096 entries take four rounds.
inline int entry_threads(int K) { return K < 32 ? 32 : K > 1024 ? 1024 : K; }

// f(std::integral_constant<int, K>{}) for the sub-table sizes the kernels are built for (K12, K16, K20, K24).
template <class F>
cudaError_t with_k(int K, F f) {
  switch (K) {
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 256:
      return f(std::integral_constant<int, 256>{});
    case 1024:
      return f(std::integral_constant<int, 1024>{});
    case 4096:
      return f(std::integral_constant<int, 4096>{});
    default:
      return cudaErrorNotSupported;
  }
}

// Opts a kernel into `bytes` of dynamic shared memory (past the 48 KB default) and launches it.
template <class Kern, class... Args>
cudaError_t launch_smem(Kern kern, unsigned grid, int threads, size_t bytes, cudaStream_t s, Args... args) {
  cudaError_t e =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  kern<<<grid, threads, bytes, s>>>(args...);
  return cudaGetLastError();
}

// Entry k of sub-table `sub`: book [2, K, 4].
__device__ __forceinline__ const double* entry(const double* book, int K, int sub, int k) {
  return book + (static_cast<long long>(sub) * K + k) * kSubDim;
}

// A_k = Σ_j q_j t_kj² and B_k = Σ_j q_j w_j t_kj in column order (scale_search_v2.cpp `moments`).
__device__ __forceinline__ void moments(const double* t, const double* w, const double* q, double& A,
                                        double& B) {
  double a = 0.0, b = 0.0;
#pragma unroll
  for (int j = 0; j < kSubDim; ++j) {
    a += q[j] * t[j] * t[j];
    b += q[j] * w[j] * t[j];
  }
  A = a;
  B = b;
}

// Σ_j q_j w_j² of one sub-vector (`sub_c`).
__device__ __forceinline__ double sub_c(const double* w, const double* q) {
  double c = 0.0;
#pragma unroll
  for (int j = 0; j < kSubDim; ++j) c += q[j] * w[j] * w[j];
  return c;
}

// The warp's lexicographic minimum of (v, k): the value every lane holds, and the lowest k among equal
// minima — a sequential scan's "first minimum in ascending k" when each lane scanned its own k ascending.
__device__ __forceinline__ void warp_argmin(double& v, int& k) {
#pragma unroll
  for (int off = 16; off; off >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int ok = __shfl_xor_sync(0xffffffffu, k, off);
    if (ov < v || (ov == v && ok < k)) {
      v = ov;
      k = ok;
    }
  }
}

// argmin_k (s²·A_k − 2s·B_k) over every entry of sub-table `sub` for the sub-vector (w, q), A and B computed
// on the fly; the result is warp-uniform. (The CPU's pruned search returns the same entry: it skips only
// entries that cannot reach the minimum.)
__device__ __forceinline__ int best_entry_k(const double* book, int K, int sub, const double* w,
                                            const double* q, double s, int lane) {
  const double s2 = s * s, ts = 2.0 * s;
  double best = INFINITY;
  int bk = K;
  for (int k = lane; k < K; k += 32) {
    double A, B;
    moments(entry(book, K, sub, k), w, q, A, B);
    const double v = s2 * A - ts * B;
    if (v < best) {
      best = v;
      bk = k;
    }
  }
  warp_argmin(best, bk);
  return bk;
}

// core/numerics.h bf16_round: one RNE rounding of an fp32 value to BF16.
__device__ __forceinline__ float bf16_round(float f) {
  const unsigned b = __float_as_uint(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float(((b >> 16) | 0x0040u) << 16);
  const unsigned bias = 0x7FFFu + ((b >> 16) & 1u);
  return __uint_as_float(((b + bias) >> 16) << 16);
}

// A decoded weight: bf16_rn(fl32(t)·s), as cb_gptq.cpp decode_fp4 and the gridbook reader produce it.
__device__ __forceinline__ double decoded(double t, float s) {
  return static_cast<double>(bf16_round(static_cast<float>(t) * s));
}

// fp32 → E4M3 (RNE, satfinite) → value, of fl32(v): scale_search_v2.cpp `e4m3_round`.
__device__ __forceinline__ double e4m3_round(double v, const float* e4m3) {
  const float f = static_cast<float>(v);
  return e4m3[static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3))];
}

__device__ __forceinline__ int floor_log2(double x) {
  int e = 0;
  frexp(x, &e);
  return e - 1;
}
__device__ __forceinline__ int ceil_log2(double x) {
  int e = 0;
  const double m = frexp(x, &e);
  return m == 0.5 ? e - 1 : e;
}

}  // namespace gridq::cuda::gptq
