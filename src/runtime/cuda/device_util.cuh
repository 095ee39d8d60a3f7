// Small device helpers shared by the kernels: PTX wrappers (PDL, bulk L2 prefetch, streaming loads, mma),
// BF16 packing and the exact activation-contract arithmetic of format.md §14.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gridq::cuda::detail {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Global nanosecond timer (diagnostic traces).
__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Asks the copy engine to pull [p, p+bytes) into L2 (bytes % 16 == 0, p 16-byte aligned); no registers held.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// 16-byte asynchronous global -> shared copy (L2 only), and its group bookkeeping.
// cp_async16_s takes the shared address already in the shared window (a caller copying to fixed offsets
// converts once); cp_async16 converts a generic pointer per copy.
__device__ __forceinline__ void cp_async16_s(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  cp_async16_s(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst)), gmem_src);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ldmatrix: four 8×8 BF16 matrices from shared memory (row addresses from lanes 8i…8i+7 for matrix i), plain
// or transposed, into the mma fragment layout.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Weight loads: read once per kernel, so keep them out of L1.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const void* p) {
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream2(const void* p) {
  uint16_t v;
  asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream1(const void* p) {
  uint16_t v;
  asm("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// D = A·B + D, A 16×16 BF16 (row), B 16×8 BF16 (col), FP32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// D = A·B + D, A 16×32 E4M3, B 32×8 E4M3, FP32 accumulators.
__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Packed BF16 multiply (RN). FP4 codebook value × E4M3-exact scale is exact in BF16 (format.md §16).
__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a);
  __nv_bfloat162 y = *reinterpret_cast<__nv_bfloat162*>(&b);
  __nv_bfloat162 r = __hmul2(x, y);
  return *reinterpret_cast<uint32_t*>(&r);
}

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<uint16_t*>(&b);
}
__device__ __forceinline__ float bf16_round(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// format.md §14.1 step 4: nearest FP4 grid value, exact ties to the lower value. hi = the smallest grid value
// ≥ v (6 when none), lo = the largest < v (−6 when none; 6 for NaN, whose comparisons all fail: the result is
// then lo = 6, as the table walk gave). Selects over the constant grid, unrolled: a dynamically indexed table
// would live in local memory (a 64-byte stack frame and 8 stores + 2 loads a call in every kernel that QDQs).
__device__ __forceinline__ float fp4_snap(float v) {
  constexpr float G[15] = {-6.f, -4.f, -3.f, -2.f, -1.5f, -1.f, -0.5f, 0.f,
                           0.5f, 1.f,  1.5f, 2.f,  3.f,   4.f,  6.f};
  float hi = 6.f, lo = isnan(v) ? 6.f : -6.f;
#pragma unroll
  for (int j = 14; j >= 0; --j)
    if (G[j] >= v) hi = G[j];
#pragma unroll
  for (int j = 0; j < 15; ++j)
    if (G[j] < v) lo = G[j];
  // fabsf(hi - v) etc. are exact-order FP32 ops; __fsub_rn keeps the compiler from contracting.
  return fabsf(__fsub_rn(hi, v)) < fabsf(__fsub_rn(v, lo)) ? hi : lo;
}

// FP4 group scale from the group absmax a (no NaN): fl32(max(a, 1e-8)·fl32(1/6)).
__device__ __forceinline__ float fp4_group_scale(float a) {
  return __fmul_rn(fmaxf(a, 1e-8f), __uint_as_float(0x3E2AAAABu));
}
// One element of the FP4 contract given the group scale: bf16_rn(fl32(q·s)), q = snap(fl32(x/s)).
__device__ __forceinline__ uint16_t fp4_qdq_elem(float x, float s) {
  float q = fp4_snap(__fdiv_rn(x, s));
  return f32_to_bf16_bits(__fmul_rn(q, s));
}

// format.md §14.2: s = max(fl32(a·fl32(1/448)), fl32(1/229376)); NaN stays NaN.
__device__ __forceinline__ float fp8_token_scale(float a) {
  float s = __fmul_rn(a, 1.0f / 448.0f);
  if (isnan(s)) return s;
  return fmaxf(s, 1.0f / 229376.0f);
}
__device__ __forceinline__ uint8_t fp8_quant_elem(float x, float s) {
  float v = __fdiv_rn(x, s);
  v = fminf(fmaxf(v, -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float silu_f32(float z) { return __fdiv_rn(z, __fadd_rn(1.0f, expf(-z))); }

// splitmix64: deterministic pseudo-random stream for synthetic data.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The opt-in a launch with `bytes` of dynamic shared memory needs (host side). Without it dynamic + static
// shared memory must fit in 48 KB; every kernel launched through this keeps its static bytes (reduction
// scratch) under 1 KB, so the opt-in is set from 47 KB up. (A test of the dynamic bytes alone against 48 KB
// let the attention merge's launch of exactly 48 KB beside 32 static bytes be refused: 4,096 splits, the
// 1M-position KV of an H200.) The attribute is set once per (device, kernel) and size (smem_opt_in.cu),
// not at every launch: the merge and the pair sort launch once a layer in eager steps.
inline constexpr size_t kSmemWithoutOptIn = 47 * 1024;
cudaError_t opt_in_smem_bytes(const void* kern, size_t bytes);
template <class Kernel>
cudaError_t opt_in_smem(Kernel kern, size_t bytes) {
  if (bytes <= kSmemWithoutOptIn) return cudaSuccess;
  return opt_in_smem_bytes(reinterpret_cast<const void*>(kern), bytes);
}

}  // namespace gridq::cuda::detail
