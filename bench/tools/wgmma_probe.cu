// Does a warpgroup MMA (wgmma, A from registers, B from shared memory) give the bits of the warp MMA that
// the GEMV runs (mma.sync)? The GEMM may only take wgmma if it does (gpu-engine.md: a row's bits must not
// depend on the step's size). On sm_90, mma.sync m16n8k32 e4m3 is lowered to two HMMA.16816.F32 on
// unpacked FP16 (cuobjdump: the low bytes of each A/B register feed the first, the high bytes the second),
// accumulated from +0 and then added to C by an FADD, so the FP8 candidate is two wgmma m64n8k16 f16 (A
// registers: those unpacked halves, B: the same k slots) from +0, then the FADD; the BF16 candidate is wgmma m64n8k16 bf16 against mma m16n8k16 bf16.
//
// Build and run on the GPU machine: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe bench/tools/wgmma_probe.cu
// && /tmp/wgmma_probe [instances]. Prints the mismatching outputs per case; exit 1 on any mismatch.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kM = 64, kN = 8;

__device__ uint32_t unpack_e4m3x2(uint32_t two) {  // 2 E4M3 bytes (low 16 bits) -> f16x2, low byte low half
  uint32_t d;
  const uint16_t s = static_cast<uint16_t>(two);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(s));
  return d;
}

__device__ uint64_t desc_kmajor(const void* smem, int lbo, int sbo) {
  const uint64_t a = static_cast<uint64_t>(__cvta_generic_to_shared(smem));
  return ((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32);
}

// Reference: each warp w runs mma.sync on rows 16w..16w+15. A [64][32] bytes (FP8) or [64][16] bf16 bits,
// B [8][32] bytes or [8][16] bf16 bits (row n = token, k contiguous), C/D [64][8] f32.
template <bool kFp8>
__global__ void ref_kernel(const uint8_t* A, const uint8_t* B, const float* C, float* D) {
  const int inst = blockIdx.x, w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  const float* c = C + inst * kM * kN;
  float d0 = c[r0 * kN + 2 * t], d1 = c[r0 * kN + 2 * t + 1], d2 = c[r1 * kN + 2 * t], d3 = c[r1 * kN + 2 * t + 1];
  if constexpr (kFp8) {
    const uint8_t* a = A + inst * kM * 32;
    const uint8_t* b = B + inst * kN * 32;
    uint32_t a0, a1, a2, a3, b0, b1;
    memcpy(&a0, a + r0 * 32 + 4 * t, 4), memcpy(&a1, a + r1 * 32 + 4 * t, 4);
    memcpy(&a2, a + r0 * 32 + 16 + 4 * t, 4), memcpy(&a3, a + r1 * 32 + 16 + 4 * t, 4);
    memcpy(&b0, b + g * 32 + 4 * t, 4), memcpy(&b1, b + g * 32 + 16 + 4 * t, 4);
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    const uint16_t* a = reinterpret_cast<const uint16_t*>(A) + inst * kM * 16;
    const uint16_t* b = reinterpret_cast<const uint16_t*>(B) + inst * kN * 16;
    uint32_t a0, a1, a2, a3, b0, b1;
    memcpy(&a0, a + r0 * 16 + 2 * t, 4), memcpy(&a1, a + r1 * 16 + 2 * t, 4);
    memcpy(&a2, a + r0 * 16 + 8 + 2 * t, 4), memcpy(&a3, a + r1 * 16 + 8 + 2 * t, 4);
    memcpy(&b0, b + g * 16 + 2 * t, 4), memcpy(&b1, b + g * 16 + 8 + 2 * t, 4);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float* o = D + inst * kM * kN;
  o[r0 * kN + 2 * t] = d0, o[r0 * kN + 2 * t + 1] = d1, o[r1 * kN + 2 * t] = d2, o[r1 * kN + 2 * t + 1] = d3;
}

template <bool kFp8>
__device__ void wgmma_k16(float& d0, float& d1, float& d2, float& d3, const uint32_t (&a)[4], uint64_t desc) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  if constexpr (kFp8)
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  else
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
        : "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

// The candidate: one warpgroup. B in shared memory K-major without swizzle: core matrices of 8 rows × 16 bytes,
// the two along k 128 bytes apart (LBO), element (n, slot s) at halfword (s / 8)·64 + n·8 + s % 8.
template <bool kFp8, bool kDirect>
__global__ void wg_kernel(const uint8_t* A, const uint8_t* B, const float* C, float* D) {
  __shared__ __align__(128) uint16_t bs[2][128];
  const int inst = blockIdx.x, w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  const float* c = C + inst * kM * kN;
  float d0 = c[r0 * kN + 2 * t], d1 = c[r0 * kN + 2 * t + 1], d2 = c[r1 * kN + 2 * t], d3 = c[r1 * kN + 2 * t + 1];
  if (kFp8) {
    // Half h takes bytes 2h, 2h+1 of each 4-byte group: slot s ↔ k = (s < 8 ? 0 : 16) + 4·((s % 8) / 2) + 2h + s % 2.
    const uint8_t* b = B + inst * kN * 32;
    for (int i = threadIdx.x; i < 2 * 128; i += blockDim.x) {
      const int h = i / 128, e = i % 128, n = e % 64 / 8, s = (e / 64) * 8 + e % 8;
      const int k = (s < 8 ? 0 : 16) + 4 * ((s % 8) / 2) + 2 * h + s % 2;
      bs[h][e] = static_cast<uint16_t>(unpack_e4m3x2(b[n * 32 + k]));
    }
  } else {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(B) + inst * kN * 16;
    for (int e = threadIdx.x; e < 128; e += blockDim.x) {
      const int n = e % 64 / 8, k = (e / 64) * 8 + e % 8;
      bs[0][e] = b[n * 16 + k];
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if constexpr (kFp8) {
    const uint8_t* a = A + inst * kM * 32;
    uint32_t q0, q1, q2, q3;
    memcpy(&q0, a + r0 * 32 + 4 * t, 4), memcpy(&q1, a + r1 * 32 + 4 * t, 4);
    memcpy(&q2, a + r0 * 32 + 16 + 4 * t, 4), memcpy(&q3, a + r1 * 32 + 16 + 4 * t, 4);
    const uint32_t lo[4] = {unpack_e4m3x2(q0), unpack_e4m3x2(q1), unpack_e4m3x2(q2), unpack_e4m3x2(q3)};
    const uint32_t hi[4] = {unpack_e4m3x2(q0 >> 16), unpack_e4m3x2(q1 >> 16), unpack_e4m3x2(q2 >> 16),
                            unpack_e4m3x2(q3 >> 16)};
    // The lowering's arithmetic: T = 0 + A_lo·B_lo, T += A_hi·B_hi, then D = C + T (one FADD each).
    float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
    wgmma_k16<true>(t0, t1, t2, t3, lo, desc_kmajor(bs[0], 128, 256));
    wgmma_k16<true>(t0, t1, t2, t3, hi, desc_kmajor(bs[1], 128, 256));
    if (kDirect) {  // for comparison: accumulating straight onto C (expected to differ)
      wgmma_k16<true>(d0, d1, d2, d3, lo, desc_kmajor(bs[0], 128, 256));
      wgmma_k16<true>(d0, d1, d2, d3, hi, desc_kmajor(bs[1], 128, 256));
    } else {
      d0 = __fadd_rn(d0, t0), d1 = __fadd_rn(d1, t1), d2 = __fadd_rn(d2, t2), d3 = __fadd_rn(d3, t3);
    }
  } else {
    const uint16_t* a = reinterpret_cast<const uint16_t*>(A) + inst * kM * 16;
    uint32_t r[4];
    memcpy(&r[0], a + r0 * 16 + 2 * t, 4), memcpy(&r[1], a + r1 * 16 + 2 * t, 4);
    memcpy(&r[2], a + r0 * 16 + 8 + 2 * t, 4), memcpy(&r[3], a + r1 * 16 + 8 + 2 * t, 4);
    wgmma_k16<false>(d0, d1, d2, d3, r, desc_kmajor(bs[0], 128, 256));
  }
  float* o = D + inst * kM * kN;
  o[r0 * kN + 2 * t] = d0, o[r0 * kN + 2 * t + 1] = d1, o[r1 * kN + 2 * t] = d2, o[r1 * kN + 2 * t + 1] = d3;
}

#define CK(x)                                                                   \
  do {                                                                          \
    const cudaError_t e_ = (x);                                                 \
    if (e_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(2);                                                             \
    }                                                                           \
  } while (0)

// Random operands with wide exponent spreads (alignment and truncation inside the dot product are what differ
// between datapaths): FP8 bytes without NaN, BF16 with exponents over ±40, C over ±30.
template <bool kFp8, bool kDirect = false>
long long run_case(int inst, std::mt19937& rng) {
  const int kb = kFp8 ? 32 : 32;  // bytes of a row's k run (32 FP8 or 16 BF16)
  std::vector<uint8_t> A(static_cast<size_t>(inst) * kM * kb), B(static_cast<size_t>(inst) * kN * kb);
  std::vector<float> C(static_cast<size_t>(inst) * kM * kN);
  auto fill = [&](std::vector<uint8_t>& v) {
    if (kFp8) {
      for (auto& x : v) {
        do x = static_cast<uint8_t>(rng()); while ((x & 0x7F) == 0x7F);
      }
    } else {
      for (size_t i = 0; i + 1 < v.size(); i += 2) {
        const uint16_t sign = rng() & 1, exp = static_cast<uint16_t>(127 - 40 + rng() % 81), man = rng() & 0x7F;
        const uint16_t bits = static_cast<uint16_t>(sign << 15 | exp << 7 | man);
        memcpy(&v[i], &bits, 2);
      }
    }
  };
  fill(A), fill(B);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : C) x = std::ldexp(u(rng), static_cast<int>(rng() % 61) - 30) * (rng() % 4 == 0 ? 0.0f : 1.0f);
  uint8_t *dA, *dB;
  float *dC, *dR, *dW;
  CK(cudaMalloc(&dA, A.size()));
  CK(cudaMalloc(&dB, B.size()));
  CK(cudaMalloc(&dC, C.size() * 4));
  CK(cudaMalloc(&dR, C.size() * 4));
  CK(cudaMalloc(&dW, C.size() * 4));
  CK(cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
  ref_kernel<kFp8><<<inst, 128>>>(dA, dB, dC, dR);
  wg_kernel<kFp8, kDirect><<<inst, 128>>>(dA, dB, dC, dW);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> R(C.size()), W(C.size());
  CK(cudaMemcpy(R.data(), dR, R.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(W.data(), dW, W.size() * 4, cudaMemcpyDeviceToHost));
  long long bad = 0, shown = 0;
  for (size_t i = 0; i < R.size(); ++i)
    if (std::memcmp(&R[i], &W[i], 4) != 0) {
      if (shown++ < 5) std::printf("  mismatch at %zu: mma %.9g wgmma %.9g\n", i, R[i], W[i]);
      ++bad;
    }
  cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dR), cudaFree(dW);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const int inst = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::mt19937 rng(12345);
  const long long f = run_case<true>(inst, rng);
  std::printf("fp8  (mma m16n8k32 e4m3 vs 2x wgmma m64n8k16 f16): %lld of %lld outputs differ\n", f,
              1LL * inst * kM * kN);
  const long long fd = run_case<true, true>(inst, rng);
  std::printf("fp8, accumulating onto C inside the wgmma instead (information only): %lld differ\n", fd);
  const long long b = run_case<false>(inst, rng);
  std::printf("bf16 (mma m16n8k16 bf16 vs wgmma m64n8k16 bf16):   %lld of %lld outputs differ\n", b,
              1LL * inst * kM * kN);
  return f || b ? 1 : 0;
}
