// One Linear on the device, whatever its path (device_model.h): y [T, L.out_rows()] FP32 = L(x) for BF16
// rows x [T, L.cols]. The input contract is applied here for tiled kernels (FP8 per-token codes, FP4 QDQ)
// and inside the reference kernel otherwise. The forward and the per-op tests call this one function.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "runtime/cuda/device_model.h"
#include "runtime/cuda/kernels.h"

namespace gridq::cuda {

// Which input's contract copy the scratch buffers hold (enqueue order): the matrices that share an input
// (q/k/v and g; gate_up after a norm that wrote the copy itself) apply its contract once. Whoever rewrites an
// input or the scratch resets the entry.
struct ContractCache {
  const uint16_t* fp4_of = nullptr;  // xin holds FP4 QDQ of these rows
  const uint16_t* fp8_of = nullptr;  // xq / xs hold the FP8 codes of these rows
};

struct LinearScratch {
  uint16_t* xin = nullptr;         // [T, cols] BF16: the FP4-QDQ'd input
  uint8_t* xq = nullptr;           // [T, cols] E4M3 codes of the FP8 per-token contract
  float* xs = nullptr;             // [T] their scales
  ContractCache* cache = nullptr;  // null: always apply the contract
};

Status apply_linear(const DevLinear& L, const uint16_t* x, int T, float* y, const LinearScratch& scratch,
                    const Workspace& ws, cudaStream_t s);

// res [T, H] FP32 += L(x): the residual add. Fused into the GEMV's epilogue when L is tiled (gemv_residual);
// otherwise L(x) goes to y [T, L.out_rows()] and a separate add follows.
Status apply_linear_residual(const DevLinear& L, const uint16_t* x, int T, float* res, int H, float* y,
                             const LinearScratch& scratch, const Workspace& ws, cudaStream_t s);

// res [T, H] FP32 += the GEMV g (its input ready, g.M rows): accumulated in the epilogue when the matrix has
// exactly H rows (same bits as a separate add: each sum is added once, in FP32), else into g.y [T, rows] (the
// scratch) and added after. PDL as the forward's launches.
Status gemv_residual(GemvArgs g, float* res, int H, const Workspace& ws, cudaStream_t s);

}  // namespace gridq::cuda
