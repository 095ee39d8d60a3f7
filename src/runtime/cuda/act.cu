// Activation kernels: FP8 per-token quantization, FP4 group-16 QDQ and RMSNorm with both contracts fused
// into its output (format.md §14). One block per token row.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/block_reduce.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kActThreads = 256;

// Fixed-order sum (deterministic): per-thread strided partials, warp tree, then warps in order.
__device__ float block_sum(float v, float* red) {
  for (int m = 16; m; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0.0f;
  for (int i = 0; i < kActThreads / 32; ++i) v += red[i];
  __syncthreads();
  return v;
}

// FP8 per-token (codes, scale) of a BF16 row held as FP32 values produced on the fly by `val(k)`.
template <typename F>
__device__ void fp8_row(F val, int K, uint8_t* q, float* s_out, float* red) {
  float a = 0.0f;
  int nan = 0;
  for (int k = threadIdx.x; k < K; k += kActThreads) {
    float x = val(k);
    nan |= isnan(x);
    a = fmaxf(a, fabsf(x));
  }
  block_max_nan(a, nan, red, kActThreads / 32);
  const float s = nan ? __int_as_float(0x7FC00000) : fp8_token_scale(a);
  for (int k = threadIdx.x; k < K; k += kActThreads) q[k] = nan ? uint8_t{0x7F} : fp8_quant_elem(val(k), s);
  if (threadIdx.x == 0) *s_out = s;
}

// FP4 QDQ of a row: one thread per group of 16.
template <typename F>
__device__ void fp4_row(F val, int K, uint16_t* y) {
  for (int gidx = threadIdx.x; gidx < K / 16; gidx += kActThreads) {
    float x[16];
    float a = 0.0f;
    int nan = 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      x[j] = val(gidx * 16 + j);
      nan |= isnan(x[j]);
      a = fmaxf(a, fabsf(x[j]));
    }
    const float s = fp4_group_scale(a);
#pragma unroll
    for (int j = 0; j < 16; ++j) y[gidx * 16 + j] = nan ? uint16_t{0x7FC0} : fp4_qdq_elem(x[j], s);
  }
}

__global__ void __launch_bounds__(kActThreads)
    quantize_fp8_kernel(const uint16_t* x, int K, uint8_t* q, float* s) {
  __shared__ float red[kActThreads / 32];
  pdl_launch_dependents();
  pdl_wait();
  const long long m = blockIdx.x;
  const uint16_t* xr = x + m * K;
  fp8_row([&](int k) { return bf16_bits_to_f32(xr[k]); }, K, q + m * K, s + m, red);
}

__global__ void __launch_bounds__(kActThreads) qdq_fp4_kernel(const uint16_t* x, int K, uint16_t* y) {
  pdl_launch_dependents();
  pdl_wait();
  const long long m = blockIdx.x;
  const uint16_t* xr = x + m * K;
  fp4_row([&](int k) { return bf16_bits_to_f32(xr[k]); }, K, y + m * K);
}

// y = bf16(w·(x·r)) with r = 1/sqrt(mean(x²) + eps) (the CPU backend's order); the BF16 row is staged in
// shared memory so that the fused FP4 / FP8 contracts read exactly the values written to y.
__global__ void __launch_bounds__(kActThreads)
    rmsnorm_kernel(const uint16_t* x, const uint16_t* w, int H, float eps, uint16_t* y, uint16_t* y_fp4,
                   uint8_t* y_q, float* y_s) {
  extern __shared__ uint16_t row[];
  __shared__ float red[kActThreads / 32];
  pdl_launch_dependents();
  pdl_wait();
  const long long m = blockIdx.x;
  const uint16_t* xr = x + m * H;
  float ss = 0.0f;
  for (int k = threadIdx.x; k < H; k += kActThreads) {
    const float v = bf16_bits_to_f32(xr[k]);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, red);
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(H)), eps)));
  for (int k = threadIdx.x; k < H; k += kActThreads) {
    const uint16_t o =
        f32_to_bf16_bits(__fmul_rn(bf16_bits_to_f32(w[k]), __fmul_rn(bf16_bits_to_f32(xr[k]), r)));
    row[k] = o;
    if (y) y[m * H + k] = o;
  }
  __syncthreads();
  if (y_fp4) fp4_row([&](int k) { return bf16_bits_to_f32(row[k]); }, H, y_fp4 + m * H);
  if (y_q) fp8_row([&](int k) { return bf16_bits_to_f32(row[k]); }, H, y_q + m * H, y_s + m, red);
}

// RMSNorm of FP32 residual rows, a block of kNormThreads per row, thread i holding elements i +
// kNormThreads·j: the sum of squares in FP64 like the CPU reference (rmsnorm_rows; per-thread partials, then
// fixed shuffle trees), y = bf16(w ⊙ (x · r)). The contract copies of the next matrices' input are made from
// the BF16 values in registers, each FP4 group of 16 by 16 consecutive lanes and the FP8 row max by the
// block: bit for bit what qdq_fp4 / quantize_fp8 make of y (the same element functions; max is exact in any
// order), without their launches or a serial loop per group (one 256-thread block with them took 11–14 µs per
// row).
constexpr int kNormThreads = 1024, kNormPer = 16;  // H ≤ 16384
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_f32_kernel(const float* x, const float* w, int H, float eps, uint16_t* y, float* y32,
                       uint16_t* y_fp4, uint8_t* y_q, float* y_s) {
  __shared__ double dred[kNormThreads / 32];
  __shared__ float red[kNormThreads / 32];
  const long long t = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % 32;
  float xv[kNormPer], wv[kNormPer];
#pragma unroll
  for (int j = 0; j < kNormPer; ++j) {  // the weights are the model's: loaded before the wait
    const int i = tid + kNormThreads * j;
    wv[j] = i < H ? w[i] : 0.0f;
  }
  pdl_entry();
  const float* v = x + t * H;
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < kNormPer; ++j) {
    const int i = tid + kNormThreads * j;
    xv[j] = i < H ? v[i] : 0.0f;
    ss += static_cast<double>(xv[j]) * xv[j];
  }
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) dred[tid / 32] = ss;
  __syncthreads();
  if (tid < 32) {
    double p = dred[tid];
    for (int o = 16; o; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
    if (tid == 0) dred[0] = p;
  }
  __syncthreads();
  const float var = static_cast<float>(dred[0] / static_cast<double>(H));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
  float amax = 0.0f;
  int nan = 0;
#pragma unroll
  for (int j = 0; j < kNormPer; ++j) {
    const int i = tid + kNormThreads * j;
    if (i >= H) break;
    const float o = __fmul_rn(wv[j], __fmul_rn(xv[j], inv));
    const uint16_t b = f32_to_bf16_bits(o);
    y[t * H + i] = b;
    if (y32) y32[t * H + i] = o;
    const float yb = bf16_bits_to_f32(b);
    xv[j] = yb;  // from here on: the BF16 value the contracts read
    amax = fmaxf(amax, fabsf(yb));
    nan |= isnan(yb);
  }
  if (y_fp4) {  // group g = elements 16g…16g+15 = lanes (lane & ~15) … + 15 of one warp, for every j
#pragma unroll
    for (int j = 0; j < kNormPer; ++j) {
      const int i = tid + kNormThreads * j;
      if (kNormThreads * j >= H) break;  // uniform over the block: the shuffles below need every lane
      float a = i < H ? fabsf(xv[j]) : 0.0f;
      int gn = i < H ? isnan(xv[j]) : 0;
      for (int o = 8; o; o >>= 1) {
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        gn |= __shfl_xor_sync(0xffffffffu, gn, o);
      }
      if (i < H) y_fp4[t * H + i] = gn ? uint16_t{0x7FC0} : fp4_qdq_elem(xv[j], fp4_group_scale(a));
    }
  }
  if (y_q) fp8_row_from_regs(xv, amax, nan, H, y_q + t * H, y_s + t, red);
}

template <typename Kern, typename... Args>
cudaError_t launch_rows(Kern kern, int M, size_t smem, cudaStream_t st, bool pdl, Args... args) {
  return launch_pdl(pdl, kern, dim3(static_cast<unsigned>(M)), dim3(kActThreads), smem, st, args...);
}

}  // namespace

cudaError_t raw_quantize_fp8(const uint16_t* x, int M, int K, uint8_t* q, float* s, cudaStream_t st,
                             bool pdl) {
  return launch_rows(quantize_fp8_kernel, M, 0, st, pdl, x, K, q, s);
}
cudaError_t raw_qdq_fp4(const uint16_t* x, int M, int K, uint16_t* y, cudaStream_t st, bool pdl) {
  return launch_rows(qdq_fp4_kernel, M, 0, st, pdl, x, K, y);
}
cudaError_t raw_rmsnorm_f32_contracts(const float* x, const float* w, int T, int H, float eps, uint16_t* y,
                                      float* y32, uint16_t* y_fp4, uint8_t* y_q, float* y_s, cudaStream_t s) {
  if (H < 1 || H > kNormThreads * kNormPer || (y_fp4 && H % 16)) return cudaErrorInvalidValue;
  return launch_pdl(forward_pdl(), rmsnorm_f32_kernel, dim3(static_cast<unsigned>(T)), dim3(kNormThreads), 0,
                    s, x, w, H, eps, y, y32, y_fp4, y_q, y_s);
}
cudaError_t raw_rmsnorm_f32(const float* x, const float* w, int T, int H, float eps, uint16_t* y, float* y32,
                            cudaStream_t s) {
  return raw_rmsnorm_f32_contracts(x, w, T, H, eps, y, y32, nullptr, nullptr, nullptr, s);
}
cudaError_t raw_rmsnorm(const uint16_t* x, const uint16_t* w, int M, int H, float eps, uint16_t* y,
                        uint16_t* y_fp4, uint8_t* y_q, float* y_s, cudaStream_t st, bool pdl) {
  const size_t smem = static_cast<size_t>(H) * 2;
  if (const cudaError_t e = opt_in_smem(rmsnorm_kernel, smem); e != cudaSuccess) return e;
  return launch_rows(rmsnorm_kernel, M, smem, st, pdl, x, w, H, eps, y, y_fp4, y_q, y_s);
}

}  // namespace gridq::cuda::detail
