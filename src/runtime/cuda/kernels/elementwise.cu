// The forward's small row kernels: embedding, residual adds, SwiGLU, the softplus output gate and the MoE
// combine (RMSNorm from the FP32 residual is in act.cu, beside the contracts it fuses). Bound: latency (a
// few KB per row). A grid of (column chunks of kThreads, rows), so that a one-row decode step spreads its
// loads over many SMs instead of one block's serial loop. Fixed summation orders: a row's result never
// depends on the other rows of the step.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/block_reduce.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    embed_kernel(const uint16_t* table, const int* ids, int H, float* x) {
  pdl_entry();
  const int t = blockIdx.y, i = blockIdx.x * kThreads + threadIdx.x;
  if (i < H)
    x[static_cast<long long>(t) * H + i] = bf16_bits_to_f32(table[static_cast<long long>(ids[t]) * H + i]);
}

__global__ void add_kernel(float* x, const void* y, int y_bf16, long long ld_y, int H, long long n) {
  pdl_entry();
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long yi = i / H * ld_y + i % H;
    const float v =
        y_bf16 ? bf16_bits_to_f32(static_cast<const uint16_t*>(y)[yi]) : static_cast<const float*>(y)[yi];
    x[i] = __fadd_rn(x[i], v);
  }
}

__global__ void __launch_bounds__(kThreads)
    swiglu_kernel(const float* gu, long long ld, long long up_off, int I, uint16_t* h) {
  pdl_entry();
  const long long t = blockIdx.y;
  const int i = blockIdx.x * kThreads + threadIdx.x;
  const float* g = gu + t * ld;
  if (i < I) h[t * I + i] = f32_to_bf16_bits(__fmul_rn(silu_f32(g[i]), g[up_off + i]));
}

// torch.nn.functional.softplus (beta 1, threshold 20) in FP32, as the CPU reference.
__device__ __forceinline__ float softplus_f32(float g) { return g > 20.0f ? g : log1pf(expf(g)); }

__global__ void __launch_bounds__(kThreads)
    gate_kernel(const float* o, const float* g, long long ld_g, int mode, int nh, int d, uint16_t* out) {
  pdl_entry();
  const long long t = blockIdx.y;
  const int n = nh * d;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    float v = o[t * n + i];
    if (mode == 1) v = __fmul_rn(v, softplus_f32(g[t * ld_g + i / d]));
    if (mode == 2) v = __fmul_rn(v, softplus_f32(g[t * ld_g + i]));
    out[t * n + i] = f32_to_bf16_bits(v);
  }
}

// The gate with o_proj's FP8 contract fused: a block of kRowThreads per row, the gated BF16 values in
// registers, the row max by the block; out, q and s are bit for bit gate_kernel then quantize_fp8 (one
// launch instead of two; the quantize alone was a 7 µs one-block kernel at batch 1).
constexpr int kRowThreads = 1024, kRowPer = 16;  // nh·d ≤ 16384
template <int kMode>  // 0: no gate, 1: per head, 2: per element (the layer's GateMode)
__global__ void __launch_bounds__(kRowThreads)
    gate_fp8_kernel(const float* o, const float* g, long long ld_g, int nh, int d, uint16_t* out, uint8_t* q,
                    float* s) {
  __shared__ float red[kRowThreads / 32];
  __shared__ float head_gate[kRowThreads];  // mode 1: softplus of each head's gate, once per head
  pdl_entry();
  const long long t = blockIdx.x;
  const int n = nh * d, tid = threadIdx.x;
  // All of the row's loads first, then the stores: interleaved, each load waited for the previous store
  // (the compiler cannot move a load above a store that may alias it), one L2 round trip per element. The
  // head gates' loads go out with them.
  float v[kRowPer], gv[kMode == 2 ? kRowPer : 1];
#pragma unroll
  for (int j = 0; j < kRowPer; ++j) {
    const int i = tid + kRowThreads * j;
    v[j] = i < n ? o[t * n + i] : 0.0f;
    if constexpr (kMode == 2) gv[j] = i < n ? g[t * ld_g + i] : 0.0f;
  }
  if constexpr (kMode == 1) {
    for (int h = tid; h < nh; h += kRowThreads) head_gate[h] = softplus_f32(g[t * ld_g + h]);
    __syncthreads();
  }
  float amax = 0.0f;
  int nan = 0;
#pragma unroll
  for (int j = 0; j < kRowPer; ++j) {
    const int i = tid + kRowThreads * j;
    if (i >= n) break;
    float x = v[j];
    if constexpr (kMode == 1) x = __fmul_rn(x, head_gate[i / d]);
    if constexpr (kMode == 2) x = __fmul_rn(x, softplus_f32(gv[j]));
    const uint16_t b = f32_to_bf16_bits(x);
    out[t * n + i] = b;
    v[j] = bf16_bits_to_f32(b);
    amax = fmaxf(amax, fabsf(v[j]));
    nan |= isnan(v[j]);
  }
  fp8_row_from_regs(v, amax, nan, n, q + t * n, s + t, red);
}

// The CPU reference accumulates routed[t] += y·w expert by expert (ascending id), then scale·routed + shared,
// then the residual add (accumulate: out is the residual stream).
__global__ void __launch_bounds__(kThreads)
    combine_kernel(const float* y, const float* w, int k, int H, float scale, const float* add,
                   long long ld_add, int accumulate, float* out) {
  pdl_entry();
  const long long t = blockIdx.y;
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= H) return;
  float r = 0.0f;
  for (int j = 0; j < k; ++j) r = __fadd_rn(r, __fmul_rn(y[(t * k + j) * H + c], w[t * k + j]));
  float o = scale == 1.0f && !add ? r : __fmul_rn(r, scale);
  if (add) o = __fadd_rn(o, add[t * ld_add + c]);
  out[t * H + c] = accumulate ? __fadd_rn(out[t * H + c], o) : o;
}

bool g_forward_pdl = true;
int g_forward_l2_ahead = kL2AheadAuto;
int g_forward_beside = kBesideAll;

// (column chunks of kThreads, rows).
dim3 cols_grid(long long cols, int rows) {
  return dim3(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
}

}  // namespace

bool forward_pdl() { return g_forward_pdl; }
void set_forward_pdl(bool on) { g_forward_pdl = on; }
int forward_l2_ahead() { return g_forward_l2_ahead; }
void set_forward_l2_ahead(int mask) { g_forward_l2_ahead = mask; }
int forward_beside() { return g_forward_beside; }
void set_forward_beside(int mask) { g_forward_beside = mask; }

cudaError_t raw_embed(const uint16_t* table, const int* ids, int T, int H, float* x, cudaStream_t s) {
  GQ_KLAUNCH(launch(embed_kernel, cols_grid(H, T), dim3(kThreads), 0, s, table, ids, H, x));
  return cudaGetLastError();
}
cudaError_t raw_add(float* x, const void* y, bool y_bf16, long long ld_y, int T, int H, cudaStream_t s) {
  const long long n = static_cast<long long>(T) * H, blocks = (n + 255) / 256;
  GQ_KLAUNCH(launch(add_kernel, dim3(static_cast<unsigned>(blocks < 1024 ? blocks : 1024)), dim3(256), 0, s,
                    x, y, y_bf16 ? 1 : 0, ld_y, H, n));
  return cudaGetLastError();
}
cudaError_t raw_swiglu(const float* gu, long long ld, long long up_off, int T, int I, uint16_t* h,
                       cudaStream_t s) {
  GQ_KLAUNCH(launch(swiglu_kernel, cols_grid(I, T), dim3(kThreads), 0, s, gu, ld, up_off, I, h));
  return cudaGetLastError();
}
cudaError_t raw_gate(const float* o, const float* g, long long ld_g, int mode, int T, int nh, int d,
                     uint16_t* out, cudaStream_t s) {
  GQ_KLAUNCH(launch(gate_kernel, cols_grid(nh * d, T), dim3(kThreads), 0, s, o, g, ld_g, mode, nh, d, out));
  return cudaGetLastError();
}
cudaError_t raw_gate_fp8(const float* o, const float* g, long long ld_g, int mode, int T, int nh, int d,
                         uint16_t* out, uint8_t* q, float* sc, cudaStream_t s) {
  if (nh * d > kRowThreads * kRowPer || nh > kRowThreads) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(T)), block(kRowThreads);
  if (mode == 1)
    GQ_KLAUNCH(launch(gate_fp8_kernel<1>, grid, block, 0, s, o, g, ld_g, nh, d, out, q, sc));
  else if (mode == 2)
    GQ_KLAUNCH(launch(gate_fp8_kernel<2>, grid, block, 0, s, o, g, ld_g, nh, d, out, q, sc));
  else
    GQ_KLAUNCH(launch(gate_fp8_kernel<0>, grid, block, 0, s, o, g, ld_g, nh, d, out, q, sc));
  return cudaGetLastError();
}
cudaError_t raw_moe_combine(const float* y, const float* w, int T, int k, int H, float scale,
                            const float* add, long long ld_add, bool accumulate, float* out, cudaStream_t s) {
  GQ_KLAUNCH(launch(combine_kernel, cols_grid(H, T), dim3(kThreads), 0, s, y, w, k, H, scale, add, ld_add,
                    accumulate ? 1 : 0, out));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail
