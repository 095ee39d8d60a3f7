// The teacher's row moves (teacher_kernels.cu): the routed pairs of a step gathered by expert and their
// down outputs put back in (row, choice) order, so each expert runs as one GEMM over its rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gridq::cuda::detail {

// dst[p, :] = src[idx[p], :] for p < n; BF16 rows of `cols`.
cudaError_t raw_gather_rows_bf16(const uint16_t* src, const int* idx, int n, int cols, uint16_t* dst,
                                 cudaStream_t s);
// dst[idx[p] · cols + :] = src[p · ld_src + :] for p < n; FP32 rows of `cols` (the idx are distinct).
cudaError_t raw_scatter_rows_f32(const float* src, long long ld_src, const int* idx, int n, int cols,
                                 float* dst, cudaStream_t s);

}  // namespace gridq::cuda::detail
