// Which of `bench/pending/l2-hints.patch`'s L2-policy instructions does the device refuse? Session 47 (H100)
// saw that patch's tests fail with cudaErrorIllegalInstruction at the first `--l2-ahead` prefetch; an illegal
// instruction ends the CUDA context, so each case runs in a process of its own (the argument picks it) and
// the driver loop below starts one per case.
//
//   case 0: createpolicy.fractional.L2::evict_first, then a plain load (the policy alone)
//   case 1: createpolicy.fractional.L2::evict_last, then a plain load
//   case 2: cp.async.bulk.prefetch.L2.global without a hint (main's --l2-ahead), 32 KB
//   case 3: the same with .L2::cache_hint and an evict_last policy, 32 KB (the patch's prefetch)
//   case 4: case 3 at 16 bytes, case 5 at 0 bytes (a prefetch's tail rounds down to a multiple of 16)
//   case 6: cp.async.cg.shared.global.L2::cache_hint, 16 bytes, an evict_first policy (the patch's rings)
//
// Build and run on the GPU machine:
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/l2_hint_probe bench/tools/l2_hint_probe.cu
//   /tmp/l2_hint_probe
// Prints one line a case: ok, or the CUDA error its process ended with.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

__device__ uint64_t policy(bool last) {
  uint64_t pol;
  if (last)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

__global__ void probe(int which, const uint8_t* src, float* out) {
  __shared__ __align__(16) uint8_t buf[64];
  float acc = 0.0f;
  const uint8_t* p = src + 65536 * threadIdx.x;  // 16-byte aligned, one 64 KB slice a thread
  switch (which) {
    case 0:
    case 1:
      acc = static_cast<float>(policy(which == 1) & 1) + p[0];
      break;
    case 2:
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(32768u) : "memory");
      break;
    case 3:
    case 4:
    case 5: {
      const uint32_t bytes = which == 3 ? 32768u : which == 4 ? 16u : 0u;
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p), "r"(bytes),
                   "l"(policy(true))
                   : "memory");
      break;
    }
    case 6: {
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
      if (threadIdx.x == 0) {
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(p),
                     "l"(policy(false))
                     : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        acc = buf[0];
      }
      break;
    }
    default:
      break;
  }
  out[threadIdx.x] = acc;
}

int run_case(int which) {
  uint8_t* src = nullptr;
  float* out = nullptr;
  if (cudaMalloc(&src, 32 * 65536) != cudaSuccess || cudaMalloc(&out, 32 * sizeof(float)) != cudaSuccess) {
    std::printf("case %d: no device memory (%s)\n", which, cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  cudaMemset(src, 1, 32 * 65536);
  probe<<<1, 32>>>(which, src, out);
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("case %d: %s\n", which, e == cudaSuccess ? "ok" : cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return run_case(std::atoi(argv[1]));
  int bad = 0;
  for (int which = 0; which <= 6; ++which) {
    const std::string cmd = std::string(argv[0]) + " " + std::to_string(which);
    bad += std::system(cmd.c_str()) != 0;
  }
  return bad == 0 ? 0 : 1;
}
