// Does a warpgroup MMA (wgmma, A from registers, B from shared memory) give the bits of the warp MMA that
// the GEMV runs (mma.sync)? The GEMM may only take wgmma if it does (gpu-engine.md: a row's bits must not
// depend on the step's size). On sm_90, mma.sync m16n8k32 e4m3 is lowered to two HMMA.16816.F32 on
// unpacked FP16 (cuobjdump: the low bytes of each A/B register feed the first, the high bytes the second),
// accumulated from +0 and then added to C by an FADD, so the FP8 candidate is two wgmma m64nNk16 f16 (A
// registers: those unpacked halves, B: the same k slots) from +0, then the FADD; the BF16 candidate is wgmma
// m64nNk16 bf16 against mma m16n8k16 bf16. N = 64 tokens (8 core-matrix groups), the token block of the
// wgmma GEMM tried in session 28 (git 509eb28), so the descriptor's strides are exercised as a GEMM sets
// them. Session 28 on an H100: BF16 and FP8 0 differences; N-major B matches with LBO along K.
//
// A last case stores B N-major (transposed: N contiguous, as attention's V is) and tries both readings of
// the descriptor's two strides, to tell which one steps along K (information for an attention P·V on wgmma).
//
// Build and run on the GPU machine:
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe bench/tools/wgmma_probe.cu
//   /tmp/wgmma_probe [instances]
// Prints the differing outputs per case; exit 1 if a case that must match does not.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kM = 64, kN = 64;
__host__ __device__ constexpr bool is_fp8(int mode) { return mode == 1 || mode == 2; }  // modes: wg_kernel

__device__ uint32_t f16x2_of_e4m3x2(uint32_t two) {  // 2 E4M3 bytes (low 16 bits) -> f16x2, low byte low half
  uint32_t d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(static_cast<uint16_t>(two)));
  return d;
}

__device__ uint64_t desc(const void* smem, int lbo, int sbo) {
  const uint64_t a = static_cast<uint64_t>(__cvta_generic_to_shared(smem));
  return ((a & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32);
}

#define R4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
// One wgmma m64n64k16 of input type T ("f16" or "bf16").
#define WGMMA64(T)                                                                                         \
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T                                      \
               " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24," \
               "%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, %37;"                          \
               : R4(0), R4(4), R4(8), R4(12), R4(16), R4(20), R4(24), R4(28)                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB)                            \
               : "memory")
// d[32] (this thread's part of 64 × 64) += A (64 × 16, this warp's rows in a) · B (16 × 64 at desc b).
template <bool kF16, int kTransB>
__device__ void wgmma64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  if constexpr (kF16)
    WGMMA64("f16");
  else
    WGMMA64("bf16");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
#undef WGMMA64
#undef R4

// Operands of one instance: A [64][kb] bytes, B [64 tokens][kb] bytes (k contiguous), C/D [64][64] f32;
// kb = 32 (FP8, k = 32) or 32 (BF16, k = 16). Output element (row, col) of thread (warp w, lane g·4 + t):
// d[4j + i] = (16w + g + 8·(i / 2), 8j + 2t + i % 2), the mma.sync C layout of n-tile j.
__device__ int row_of(int w, int g, int i) { return 16 * w + g + 8 * (i / 2); }
__device__ int col_of(int j, int t, int i) { return 8 * j + 2 * t + i % 2; }

// Reference: warp w runs mma.sync on rows 16w..16w+15, one n-tile at a time.
template <bool kFp8>
__global__ void ref_kernel(const uint8_t* A, const uint8_t* B, const float* C, float* D) {
  const int inst = blockIdx.x, w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint8_t* a = A + static_cast<size_t>(inst) * kM * 32;
  const uint8_t* b = B + static_cast<size_t>(inst) * kN * 32;
  const float* c = C + static_cast<size_t>(inst) * kM * kN;
  float* o = D + static_cast<size_t>(inst) * kM * kN;
  const int r0 = 16 * w + g, r1 = r0 + 8;
  uint32_t a0, a1, a2, a3;  // FP8: bytes k 4t.., BF16: elements 2t.. (each row's run is 32 bytes)
  const int o0 = 4 * t, o2 = 16 + 4 * t;
  memcpy(&a0, a + r0 * 32 + o0, 4), memcpy(&a1, a + r1 * 32 + o0, 4);
  memcpy(&a2, a + r0 * 32 + o2, 4), memcpy(&a3, a + r1 * 32 + o2, 4);
  for (int j = 0; j < kN / 8; ++j) {
    float d[4];
    for (int i = 0; i < 4; ++i) d[i] = c[row_of(w, g, i) * kN + col_of(j, t, i)];
    const int n = 8 * j + g;
    uint32_t b0, b1;
    memcpy(&b0, b + n * 32 + o0, 4), memcpy(&b1, b + n * 32 + o2, 4);
    if constexpr (kFp8)
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    for (int i = 0; i < 4; ++i) o[row_of(w, g, i) * kN + col_of(j, t, i)] = d[i];
  }
}

// mode 0: BF16 K-major (5: the same over BF16's whole finite range); 1: FP8 as two f16 halves from +0 then
// FADD; 2: FP8 accumulating onto C inside the wgmma (information: expected to differ); 3 / 4: BF16 with B
// stored N-major, strides (128, 256) / (256, 128).
template <int kMode>
__global__ void wg_kernel(const uint8_t* A, const uint8_t* B, const float* C, float* D) {
  __shared__ __align__(128) uint16_t bs[2][kN * 16];  // one or two k16 blocks of 64 tokens × 16 slots
  const int inst = blockIdx.x, w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint8_t* a = A + static_cast<size_t>(inst) * kM * 32;
  const uint8_t* b = B + static_cast<size_t>(inst) * kN * 32;
  const float* c = C + static_cast<size_t>(inst) * kM * kN;
  float* o = D + static_cast<size_t>(inst) * kM * kN;
  constexpr bool kFp8 = is_fp8(kMode);
  for (int e = threadIdx.x; e < kN * 16; e += blockDim.x) {
    const int n = e / 16, s = e % 16;  // token, k slot
    if constexpr (kFp8) {
      // Half h holds bytes 2h, 2h+1 of each 4-byte group: slot s ↔ k = 16·(s / 8) + 4·((s % 8) / 2) + 2h + s
      // % 2.
      for (int h = 0; h < 2; ++h) {
        const int k = 16 * (s / 8) + 4 * ((s % 8) / 2) + 2 * h + s % 2;
        bs[h][(n / 8) * 128 + (s / 8) * 64 + (n % 8) * 8 + s % 8] =
            static_cast<uint16_t>(f16x2_of_e4m3x2(b[n * 32 + k]));
      }
    } else {
      uint16_t v;
      memcpy(&v, b + n * 32 + 2 * s, 2);
      if (kMode == 0 || kMode == 5)  // K-major: core (token group, k half) at group·256 + half·128 bytes
        bs[0][(n / 8) * 128 + (s / 8) * 64 + (n % 8) * 8 + s % 8] = v;
      else  // N-major: core (k group, token group) at kgroup·128 + tgroup·256 bytes, 8 tokens contiguous
        bs[0][(n / 8) * 128 + (s / 8) * 64 + (s % 8) * 8 + n % 8] = v;
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int r0 = 16 * w + g, r1 = r0 + 8;
  uint32_t q[4];
  memcpy(&q[0], a + r0 * 32 + 4 * t, 4), memcpy(&q[1], a + r1 * 32 + 4 * t, 4);
  memcpy(&q[2], a + r0 * 32 + 16 + 4 * t, 4), memcpy(&q[3], a + r1 * 32 + 16 + 4 * t, 4);
  float d[32];
  for (int j = 0; j < kN / 8; ++j)
    for (int i = 0; i < 4; ++i) d[4 * j + i] = c[row_of(w, g, i) * kN + col_of(j, t, i)];
  if constexpr (kFp8) {
    uint32_t lo[4], hi[4];
    for (int i = 0; i < 4; ++i) lo[i] = f16x2_of_e4m3x2(q[i]), hi[i] = f16x2_of_e4m3x2(q[i] >> 16);
    if constexpr (kMode == 1) {
      float tt[32];
      for (int i = 0; i < 32; ++i) tt[i] = 0.0f;
      wgmma64<true, 0>(tt, lo, desc(bs[0], 128, 256));
      wgmma64<true, 0>(tt, hi, desc(bs[1], 128, 256));
      for (int i = 0; i < 32; ++i) d[i] = __fadd_rn(d[i], tt[i]);
    } else {
      wgmma64<true, 0>(d, lo, desc(bs[0], 128, 256));
      wgmma64<true, 0>(d, hi, desc(bs[1], 128, 256));
    }
  } else if constexpr (kMode == 0 || kMode == 5) {
    wgmma64<false, 0>(d, q, desc(bs[0], 128, 256));
  } else if constexpr (kMode == 3) {
    wgmma64<false, 1>(d, q, desc(bs[0], 128, 256));
  } else {
    wgmma64<false, 1>(d, q, desc(bs[0], 256, 128));
  }
  for (int j = 0; j < kN / 8; ++j)
    for (int i = 0; i < 4; ++i) o[row_of(w, g, i) * kN + col_of(j, t, i)] = d[4 * j + i];
}

#define CK(x)                                                                         \
  do {                                                                                \
    const cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

// Random operands with wide exponent spreads (alignment and truncation inside the dot product are what differ
// between datapaths): FP8 bytes without NaN, BF16 with exponents over ±40, C over ±30 (a quarter zeros).
template <int kMode>
long long run_case(int inst, std::mt19937& rng) {
  constexpr bool kFp8 = is_fp8(kMode);
  std::vector<uint8_t> A(static_cast<size_t>(inst) * kM * 32), B(static_cast<size_t>(inst) * kN * 32);
  std::vector<float> C(static_cast<size_t>(inst) * kM * kN);
  auto fill = [&](std::vector<uint8_t>& v) {
    if constexpr (kFp8) {
      for (auto& x : v) do
          x = static_cast<uint8_t>(rng());
        while ((x & 0x7F) == 0x7F);
    } else {
      for (size_t i = 0; i + 1 < v.size(); i += 2) {
        // kMode 5: the whole finite range, subnormals and zeros included (exponent field 0 … 254).
        const uint32_t sign = rng() & 1, exp = kMode == 5 ? rng() % 255 : 127 - 40 + rng() % 81,
                       man = rng() & 0x7F;
        const uint16_t bits = static_cast<uint16_t>(sign << 15 | exp << 7 | man);
        memcpy(&v[i], &bits, 2);
      }
    }
  };
  fill(A), fill(B);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : C) x = rng() % 4 == 0 ? 0.0f : std::ldexp(u(rng), static_cast<int>(rng() % 61) - 30);
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
  wg_kernel<kMode><<<inst, 128>>>(dA, dB, dC, dW);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> R(C.size()), W(C.size());
  CK(cudaMemcpy(R.data(), dR, R.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(W.data(), dW, W.size() * 4, cudaMemcpyDeviceToHost));
  long long bad = 0, shown = 0;
  for (size_t i = 0; i < R.size(); ++i)
    if (std::memcmp(&R[i], &W[i], 4) != 0) {
      if (shown++ < 3) std::printf("  mode %d: output %zu: mma %.9g wgmma %.9g\n", kMode, i, R[i], W[i]);
      ++bad;
    }
  cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dR), cudaFree(dW);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const int inst = argc > 1 ? std::atoi(argv[1]) : 4000;
  const long long outs = 1LL * inst * kM * kN;
  std::mt19937 rng(12345);
  const long long b = run_case<0>(inst, rng), f = run_case<1>(inst, rng), fd = run_case<2>(inst, rng);
  const long long t1 = run_case<3>(inst, rng), t2 = run_case<4>(inst, rng), bw = run_case<5>(inst, rng);
  std::printf("bf16 (mma m16n8k16 vs wgmma m64n64k16, B K-major):        %lld of %lld outputs differ\n", b,
              outs);
  std::printf("fp8  (mma m16n8k32 e4m3 vs 2x wgmma f16 from +0, FADD):  %lld differ\n", f);
  std::printf("fp8, accumulating onto C inside the wgmma (information):  %lld differ\n", fd);
  std::printf("bf16, B N-major, strides (LBO 128, SBO 256) / (256, 128): %lld / %lld differ\n", t1, t2);
  std::printf("bf16 over the whole finite range (subnormals, zeros):      %lld differ\n", bw);
  return b || f ? 1 : 0;
}
