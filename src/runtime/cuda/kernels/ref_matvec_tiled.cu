// The reference matvec of a prefill step's router (BF16 weights, FP32 rows, no expert ids, cols % 256 == 0)
// staged through shared memory: the same sums in the same order as ref_matvec.cu, so the same bits at every
// step size. Each (token, row) sum there is 32 chains (chain l: the 8-weight blocks 32i + l, i ascending,
// 8 fmas each), then the xor-shuffle tree; here lane l of a warp is still chain l, for a warp tile of
// kWT tokens × kWR rows, and a CTA streams 256-column rounds (one block per chain) of its kTT tokens and
// kTR rows through a cp.async ring. Why: the warp-per-row kernel reloads every activation vector per
// 2 rows from L1 (0.44 fma a byte); here an activation vector serves kWR rows and a weight vector kWT
// tokens from shared memory (4 fmas per bank wavefront, the SM's fma:LDS issue ratio), and the step's
// activation tile is read from L2 once per kTR rows. Measured (H200, an 8k prompt, the router phase of the
// 47 MoE layers incl. its norm and top-k): warp-per-row 102.2 ms; warp tiles 8 × 8, one CTA an SM 53.7;
// 8 × 4, two CTAs 62.6; 4 × 8, two CTAs 51.3 (this one; about 30 % of the SM's FP32 fma rate).
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kWT = 4, kWR = 8;   // warp tile: tokens × rows (32 sums a lane: one chain each)
constexpr int kTT = 8, kTR = 32;  // CTA tile: 2 × 4 warps
constexpr int kWarps = (kTT / kWT) * (kTR / kWR);
constexpr int kThreads = kWarps * 32;
constexpr int kRound = 256;  // columns a round: 32 chains × one 8-column block
constexpr int kStages = 3;
constexpr int kMinBlocks = 2;  // CTAs an SM: 126 registers a thread (8 × 8 warp tiles: 245, one CTA)
constexpr int kXFloats = kTT * kRound;  // a stage's activations, FP32
constexpr int kWHalves = kTR * kRound;  // a stage's weights, BF16
constexpr int kStageBytes = kXFloats * 4 + kWHalves * 2;
constexpr int kSmem = kStages * kStageBytes;

// Stage layout. Activations [token][half][lane][4]: lane l's block (columns 8l … 8l+7 of the round) is two
// float4 at half 0 and 1, so a warp's float4 loads are 512 contiguous bytes (no bank conflict). Weights
// [row][lane][8] as stored: lane l's block is one contiguous 16-byte vector.
__device__ __forceinline__ void load_round(const RefArgs& a, int p0, int r0, int round, uint8_t* stage) {
  float* xs = reinterpret_cast<float*>(stage);
  uint16_t* ws = reinterpret_cast<uint16_t*>(stage + kXFloats * 4);
  const int col0 = round * kRound;
  // kTT × 64 activation chunks and kTR × 32 weight chunks of 16 bytes.
#pragma unroll
  for (int q = 0; q < kTT * 64 / kThreads; ++q) {
    const int c = threadIdx.x + q * kThreads, t = c / 64, ch = c % 64;
    const int p = min(p0 + t, a.P - 1);  // past the step: a valid row, never written back
    const float* src = a.x_f32 + static_cast<long long>(p / a.x_div) * a.w.cols + col0 + 4 * ch;
    cp_async16(xs + t * kRound + (ch & 1) * 128 + (ch >> 1) * 4, src);
  }
#pragma unroll
  for (int q = 0; q < kTR * 32 / kThreads; ++q) {
    const int c = threadIdx.x + q * kThreads, rr = c / 32, ch = c % 32;
    const int r = min(r0 + rr, a.w.rows - 1);
    const uint8_t* src = a.w.data + static_cast<long long>(r) * a.w.row_bytes + 2LL * (col0 + 8 * ch);
    cp_async16(ws + rr * kRound + 8 * ch, src);
  }
}

__global__ void __launch_bounds__(kThreads, kMinBlocks) ref_matvec_tiled_kernel(const RefArgs a) {
  pdl_entry();
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wt = warp / (kTR / kWR), wr = warp % (kTR / kWR);
  // Row tiles are the fast grid dimension: the CTAs that share a token tile run together, so the step's
  // activations come from DRAM about once.
  const int r0 = blockIdx.x * kTR, p0 = blockIdx.y * kTT;
  const int rounds = a.w.cols / kRound;
  float acc[kWT][kWR];
#pragma unroll
  for (int t = 0; t < kWT; ++t)
#pragma unroll
    for (int r = 0; r < kWR; ++r) acc[t][r] = 0.0f;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < rounds) load_round(a, p0, r0, s, smem + s * kStageBytes);
    cp_async_commit();
  }
  for (int i = 0; i < rounds; ++i) {
    // Wait for round i, then one barrier: every warp is past round i-1, whose slot takes round i+S-1.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (i + kStages - 1 < rounds)
      load_round(a, p0, r0, i + kStages - 1, smem + ((i + kStages - 1) % kStages) * kStageBytes);
    cp_async_commit();
    const uint8_t* stage = smem + (i % kStages) * kStageBytes;
    const float* xs = reinterpret_cast<const float*>(stage) + (wt * kWT) * kRound;
    const uint16_t* ws = reinterpret_cast<const uint16_t*>(stage + kXFloats * 4) + (wr * kWR) * kRound;
    float wf[kWR][8];
#pragma unroll
    for (int r = 0; r < kWR; ++r) {
      const uint4 v = *reinterpret_cast<const uint4*>(ws + r * kRound + 8 * lane);
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) wf[r][j] = __uint_as_float(j & 1 ? u[j / 2] & 0xFFFF0000u : u[j / 2] << 16);
    }
#pragma unroll
    for (int t = 0; t < kWT; ++t) {
      const float4 lo = *reinterpret_cast<const float4*>(xs + t * kRound + 4 * lane);
      const float4 hi = *reinterpret_cast<const float4*>(xs + t * kRound + 128 + 4 * lane);
      const float xv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      // Per (token, row): j ascending, the reference chain's order.
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < kWR; ++r) acc[t][r] = fmaf(wf[r][j], xv[j], acc[t][r]);
    }
  }
#pragma unroll
  for (int t = 0; t < kWT; ++t) {
    const int p = p0 + wt * kWT + t;
#pragma unroll
    for (int r = 0; r < kWR; ++r) {
      float v = acc[t][r];
      for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
      const int row = r0 + wr * kWR + r;
      if (lane == 0 && p < a.P && row < a.w.rows) a.y[static_cast<long long>(p) * a.ld_y + row] = v;
    }
  }
}

}  // namespace

cudaError_t raw_ref_matvec_tiled(const RefArgs& a, cudaStream_t s) {
  if (a.w.format != kRefBF16 || a.w.act_bits != 16 || a.x_f32 == nullptr || a.ids != nullptr ||
      a.w.cols % kRound != 0 || a.w.row_bytes % 16 != 0 ||
      (reinterpret_cast<uintptr_t>(a.w.data) & 15) != 0 || (reinterpret_cast<uintptr_t>(a.x_f32) & 15) != 0)
    return cudaErrorNotSupported;
  if (a.P < 1 || a.w.rows < 1 || a.x_div < 1) return cudaErrorInvalidValue;
  static const cudaError_t attr =
      cudaFuncSetAttribute(ref_matvec_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  const long long tiles = (static_cast<long long>(a.P) + kTT - 1) / kTT;
  if (tiles > 65535) return cudaErrorNotSupported;  // grid.y's limit
  const dim3 grid(static_cast<unsigned>((a.w.rows + kTR - 1) / kTR), static_cast<unsigned>(tiles));
  GQ_KLAUNCH(launch(ref_matvec_tiled_kernel, grid, dim3(kThreads), static_cast<size_t>(kSmem), s, a));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail
