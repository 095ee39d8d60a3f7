// CB-GPTQ and the two-tier RTN encoder for NVFP4-CB v2 rungs on the GPU (issue 12), batched over matrices
// of one shape: the routed experts of a layer are one batch, gate and up sharing their expert's Hessian.
// The result is the CPU encoder's (quant/cb_gptq.h encode_fp4_cb_gptq / encode_fp4_rtn) bit for bit: the
// kernels repeat its float64 operations in its order (gptq_kernels.h says how), and the tests compare bytes.
//
//   CbGptqBatch job;                       // device pointers: W [M, R, C], H [nH, C, C], q [nH, C] (fp32)
//   job.h_of = {0, 0, 1, 1};               // gate_0, up_0, gate_1, up_1 → H_0, H_0, H_1, H_1
//   job.n_tokens = {5120, 4800};
//   auto res = cb_gptq_fp4(job, book, settings, stream);   // sub-indices and v2 planes per matrix
//
// Supported books: two sub-tables of 4-vectors with 64, 256, 1024 or 4096 entries each (NVFP4_CB_K12, K16,
// K20, K24).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda {

struct CbGptqBook {
  int K = 0;              // entries per sub-table
  std::vector<double> t;  // [2, K, 4] as quant::DenseBook
};

struct CbGptqSettings {
  double damp = 0.1;  // relative to mean(diag H); ×10 per retry
  int max_retries = 3;
  int pilot_rows = 256;
  int refits = 2;
  int max_window = 14;    // at most 14 here (the window tables hold 15 exponents' scales)
  int refine_passes = 0;  // > 0: quant/cb_refine.h refine_fp4 after CB-GPTQ (its damping: the one used)
  bool refine_scales = false;
};

struct CbGptqBatch {
  int R = 0, C = 0, M = 0, nH = 0;
  const float* W = nullptr;       // device [M, R, C]
  const float* H = nullptr;       // device [nH, C, C] (lower triangle read); null for RTN
  const float* q = nullptr;       // device [nH, C] importances (imatrix)
  std::vector<int> h_of;          // [M] the Hessian (and importances) of each matrix
  std::vector<int64_t> n_tokens;  // [nH] rows behind each H (0: plain nearest neighbour)
  // One matrix [R, C] with its own H (and q): the hooks' one-matrix requests.
  static CbGptqBatch one(int R, int C, const float* W, const float* H, const float* q, int64_t n_tokens) {
    CbGptqBatch b;
    b.R = R, b.C = C, b.M = 1, b.nH = 1;
    b.W = W, b.H = H, b.q = q;
    b.h_of = {0};
    b.n_tokens = {n_tokens};
    return b;
  }
};

struct CbGptqResult {
  std::vector<uint32_t> sub_idx;  // [M, R, C / 4] chosen entry of each 4-column slab
  std::vector<uint8_t> planes;    // [M, R, C / 256, 17]: E, then the 16 group codes
  std::vector<uint8_t> identity;  // [nH] 1 where CB-GPTQ ran with U = I (no tokens or zero H)
  std::vector<double> damp_used;  // [nH]
  double seconds_factor = 0.0;    // wall time of the factorization and of the encode (synchronised)
  double seconds_encode = 0.0;
  size_t device_bytes_peak = 0;  // device memory in use (all of the GPU's) with every buffer allocated
  double seconds_refine = 0.0;
  // With refine_passes > 0 (cb_gptq_fp4 only): the refined encoding beside the CB-GPTQ one, and per matrix
  // refine_fp4's RefineResult. Matrices whose H is the identity are not refined (refine_skipped 1); a cold H
  // (zero trace) leaves the encoding as it is with zero objectives, as on the CPU.
  std::vector<uint32_t> refined_sub_idx;
  std::vector<uint8_t> refined_planes;
  std::vector<uint8_t> refine_skipped;  // [M]
  std::vector<double> refine_f_before, refine_f_after;
  std::vector<int> refine_rounds;
  std::vector<int64_t> refine_codes, refine_scales;
};

// CB-GPTQ (lazy two-tier scales on the compensated block, 256-column blocks).
Expected<CbGptqResult> cb_gptq_fp4(const CbGptqBatch& job, const CbGptqBook& book, const CbGptqSettings& opt,
                                   cudaStream_t stream);
// The v2 code tables on the device (built and uploaded once per process), for kernels that decode planes.
Expected<gptq::V2Tables> device_v2_tables();

// Round-to-nearest: two-tier scales on the original weights and the nearest entries (H unused).
Expected<CbGptqResult> cb_rtn_fp4(const CbGptqBatch& job, const CbGptqBook& book, const CbGptqSettings& opt,
                                  cudaStream_t stream);

// The damped inverse-Cholesky factor of each of the job's Hessians (quant/hessian_factor.cpp's rules and
// retries): U [nH, C, C] float64 upper, identity [nH] (1: no tokens or a zero diagonal); res.identity and
// res.damp_used are filled. Shared by the encoders above and fp8_gptq.
Status gptq_factor(const CbGptqBatch& job, const CbGptqSettings& opt, cudaStream_t stream, DeviceBuffer& U,
                   DeviceBuffer& identity, CbGptqResult& res);

// GPTQ for the FP8 formats, whose scale is one per row and fixed before GPTQ (block 256), batched like
// cb_gptq_fp4 (job.q unused): FP8_DYNAMIC per channel (quant/fp8_weights.h quantize_fp8_per_channel_gptq)
// and the FP8-CB product rungs (quant/cb_gptq.h encode_fp8cb_cb_gptq). idx [M, R, C / sub_dim]: each slab's
// entry of its sub-table, the CPU encoder's choice bit for bit (gptq_fp8.cu).
struct ScalarBook {
  int sub_dim = 1;
  std::vector<int> entries;  // [n_sub]
  std::vector<double> t;     // every sub-table in order, [Σ entries, sub_dim]
  bool bf16_decode = false;  // decoded bf16_rn(fl32(t)·s) (FP8-CB) instead of t·s (FP8_DYNAMIC)
};
struct Fp8GptqResult {
  std::vector<uint16_t> idx;
  std::vector<uint8_t> identity;  // [nH]
  std::vector<double> damp_used;  // [nH]
};
Expected<Fp8GptqResult> fp8_gptq(const CbGptqBatch& job, const ScalarBook& book,
                                 const std::vector<double>& scale /*[M·R]*/, const CbGptqSettings& opt,
                                 cudaStream_t stream);

}  // namespace gridq::cuda
