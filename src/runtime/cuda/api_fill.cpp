// Host side of the kernel API's random fills (kernels.h): synthetic weights and benchmark inputs.
#include "runtime/cuda/api_launched.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda {

using namespace detail;

Status fill_random_bytes(void* p, size_t n, uint64_t seed, cudaStream_t s) {
  GRIDQ_LAUNCHED(raw_fill_bytes(p, n, seed, s), "fill_random_bytes");
  return {};
}
Status fill_random_bf16(uint16_t* p, size_t n, float a, uint64_t seed, cudaStream_t s) {
  GRIDQ_LAUNCHED(raw_fill_bf16(p, n, a, seed, s), "fill_random_bf16");
  return {};
}
Status fill_random_e4m3(uint8_t* p, size_t n, uint64_t seed, cudaStream_t s) {
  GRIDQ_LAUNCHED(raw_fill_e4m3(p, n, seed, s), "fill_random_e4m3");
  return {};
}
Status fill_random_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  GRIDQ_LAUNCHED(raw_fill_f32(p, n, lo, hi, seed, s), "fill_random_f32");
  return {};
}
Status fill_random_cb_tiles(uint8_t* p, int k, int v, long long units, uint64_t seed, cudaStream_t s) {
  if (k < 12 || k > 24 || k % 2 || (v != 1 && v != 2))
    return err("fill_random_cb_tiles: k {} v {} unsupported", k, v);
  GRIDQ_LAUNCHED(raw_fill_cb_tiles(p, k, v, units, seed, s), "fill_random_cb_tiles");
  return {};
}

}  // namespace gridq::cuda
