// The SwiGLU + FP4 QDQ of the routed experts' FP32 gate/up outputs (kparams.h raw_swiglu_pairs): after the
// wide (prefill) grouped kernel, and after the single-tile narrow items below 16 tokens a step. The same bits
// as the paired items' epilogue (swiglu_column), which CudaMoeGrouped.WideItemsAreBitIdenticalToNarrow pins.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

namespace {

// h[p, i] = FP4QDQ(bf16(silu(bf16(g))·bf16(u))) over groups of 16 consecutive i (format.md §14.1), g and u
// the FP32 rows i and I + i of gu[p]: the arithmetic of the GEMV's SwiGLU epilogue (swiglu_column). A block
// takes kSwigluThreads consecutive i of one pair (block b: pair b / cpr, chunk b % cpr, one 32-bit division a
// block: a 64-bit one a thread was most of this kernel's time at a prefill chunk's 20k pairs); a group is 16
// consecutive lanes (I % 16 == 0, chunks start at multiples of 16), reduced by xor 1, 2, 4, 8. qdq == 0 (the
// w4a16 contract): h is the BF16 product itself. perm (the wide down's input, I % 256 == 0): each 256-column
// unit of h stored with its words at unit_word_slot (kparams.h), through shared memory (a block is one unit),
// so the stores stay coalesced.
constexpr int kSwigluThreads = 256;
__global__ void __launch_bounds__(kSwigluThreads)
    swiglu_pairs_kernel(const float* gu, int I, int cpr, uint16_t* h, int qdq, int perm) {
  __shared__ uint16_t unit[kSwigluThreads];
  pdl_entry();
  const unsigned b = blockIdx.x, pr = b / static_cast<unsigned>(cpr);
  const int i = static_cast<int>(b - pr * static_cast<unsigned>(cpr)) * kSwigluThreads + threadIdx.x;
  const bool ok = i < I;  // whole groups in or out
  float hv = 0.0f;
  if (ok) {
    const float* g = gu + static_cast<long long>(pr) * 2 * I;
    hv = bf16_round(__fmul_rn(silu_f32(bf16_round(__ldcg(g + i))), bf16_round(__ldcg(g + I + i))));
  }
  float a = fabsf(hv);
  int nan = isnan(hv);
#pragma unroll
  for (int m = 1; m < 16; m <<= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, m));
    nan |= __shfl_xor_sync(0xffffffffu, nan, m);
  }
  const uint16_t v = !qdq  ? f32_to_bf16_bits(hv)
                     : nan ? uint16_t{0x7FC0}
                           : fp4_qdq_elem(hv, fp4_group_scale(a));
  uint16_t* out = h + static_cast<long long>(pr) * I;
  if (!perm) {
    if (ok) out[i] = v;
    return;
  }
  // Element e = 2w + half of the unit goes to 2·unit_word_slot(w) + half.
  const int e = static_cast<int>(threadIdx.x);
  unit[2 * unit_word_slot(e >> 1) + (e & 1)] = v;
  __syncthreads();
  out[i] = unit[threadIdx.x];  // perm: I % 256 == 0, every i of the block is in
}

}  // namespace

cudaError_t raw_swiglu_pairs(const float* gu, int P, int I, uint16_t* h, bool qdq_fp4, bool perm,
                             cudaStream_t s, bool pdl) {
  if (I % 16 || P < 0 || I < 1 || (perm && I % kSwigluThreads)) return cudaErrorInvalidValue;
  const int cpr = (I + kSwigluThreads - 1) / kSwigluThreads;  // blocks a pair
  const long long blocks = static_cast<long long>(P) * cpr;
  if (blocks > 0x7FFFFFFFLL) return cudaErrorInvalidValue;
  if (blocks == 0) return cudaSuccess;
  return launch_pdl(pdl, swiglu_pairs_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kSwigluThreads), 0, s,
                    gu, I, cpr, h, qdq_fp4 ? 1 : 0, perm ? 1 : 0);
}

}  // namespace gridq::cuda::detail
