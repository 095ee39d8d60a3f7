// CB-GPTQ (quantizer.md §5): GPTQ's column-by-column error feedback with codebook slabs. Each step quantizes
// one sub-vector slab S (s = sub_dim consecutive columns) of every row jointly under the OBS metric ‖(w_S −
// q_S)·U_SS⁻¹‖², found as a nearest neighbour in the transformed space (y = x·A, c'_k = t_k·A, A = U_SS⁻¹,
// argmin_k ‖c'_k‖² − 2·y·c'_k, ties to the lowest k), then pushes the slab error onto the later columns of
// the block and, lazily, onto the columns after it. Scales are chosen per block on the compensated weights
// ("lazy"). All arithmetic is float64 and every row is processed independently (OpenMP over rows), so bytes
// do not depend on the thread count.
//
// RTN ("--method rtn", and the NN-only side of the holdout gate) uses the same scales and the q-weighted
// nearest codeword with no feedback.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"
#include "quant/dense_book.h"
#include "quant/scale_search_v2.h"

namespace gridq::quant {

// ---- the generic core (also used directly by tests with scalar tables) ----

struct GptqCoreSpec {
  int rows = 0;
  int cols = 0;
  int block = 256;           // columns per lazy block (a multiple of book.sub_dim)
  bool bf16_decode = false;  // quantized value Q = bf16_rn(fl32(t·s)) instead of t·s in float64
};

// Fills slab_scale [rows, (b1 − b0) / sub_dim] for block [b0, b1) from the compensated weights W [rows,
// cols].
using BlockScaleFn = std::function<void(int b0, int b1, const double* W, double* slab_scale)>;

struct GptqCoreResult {
  std::vector<uint32_t> sub_idx;  // [rows, cols / sub_dim] chosen entry of each slab's sub-table
  std::vector<double> Q;          // [rows, cols] quantized weights as fed back
};

// W: [rows, cols] fp32; U: [cols, cols] upper (H⁻¹ = UᵀU) or nullptr for U = I (no feedback, Euclidean
// nearest). Slab at column c uses sub-table (c / sub_dim) mod n_sub.
GptqCoreResult gptq_core(const float* W, const double* U, const DenseBook& book, const GptqCoreSpec& spec,
                         const BlockScaleFn& scales);

// ---- NVFP4-CB two-tier v2 ----

struct CbGptqOptions {
  double damp = 0.1;  // relative to mean(diag H)
  int max_retries = 3;
  int block = 256;  // must be 256 for fp4 (one superblock: its scales are searched on the compensated block)
  TwoTierOptions two_tier;
};

struct Fp4CbEncoding {
  int rows = 0;
  int cols = 0;
  std::vector<uint64_t> codes;            // [rows, cols / 8] k-bit codewords (sub0 in the low bits)
  std::vector<gridbook::V2Plane> planes;  // [rows, cols / 256]
  std::vector<float> w_hat;               // [rows, cols] decoded weights (exact BF16 values)
  bool used_identity = false;             // CB-GPTQ ran with U = I (no tokens or zero H)
  double damp_used = 0.0;
  // Set by the device batch (cb_gptq_device.h encode_fp4_batch_on_device): the holdout output-MSE it computed
  // (holdout_output_mse's bits) and which of its candidates this is (runtime::DeviceCbBatch::Which).
  std::optional<double> holdout_mse;
  int candidate = -1;
  // Set instead of codes and w_hat by the device batch ([rows, cols / 4] sub-indices): a matrix has up to
  // three candidates and keeps one, so only the kept one is decoded (cb_gptq_device.h decode_candidate).
  std::vector<uint32_t> sub_idx;
};

// RTN: two-tier scales on the original weights and the q-weighted nearest codeword. W: [R, C], q: [C].
// Requires a v2 fp4 product rung, C % 256 == 0, R % 8 == 0 not required here (the planner checks it).
Expected<Fp4CbEncoding> encode_fp4_rtn(const gridbook::Codebook& cb, const float* W, int R, int C,
                                       const float* q, const TwoTierOptions& opt = {});

// CB-GPTQ: H [C, C] fp32 (its n_tokens rows; 0 means plain nearest-neighbour), q [C] importances.
Expected<Fp4CbEncoding> encode_fp4_cb_gptq(const gridbook::Codebook& cb, const float* W, int R, int C,
                                           const float* H, int64_t n_tokens, const float* q,
                                           const CbGptqOptions& opt = {});

// The encoders' input rules: a product rung of `grid` (fp4: layout v2), C % 256 == 0, finite W [R, C],
// finite importances q [C] >= 0.
Status check_cb_inputs(const gridbook::Codebook& cb, gridbook::Grid grid, const float* W, int R, int C,
                       const float* q);

// The k-bit codewords [R, C/8] of sub-indices [R, C / sub_dim], and the decoded fp4 weights
// w = bf16_rn(t · scale_g) [R, C] of sub-indices and planes [R, C/256].
std::vector<uint64_t> compose_codes(const DenseBook& book, const uint32_t* sub_idx, int R, int C);
std::vector<float> decode_fp4(const DenseBook& book, const uint32_t* sub_idx, const gridbook::V2Plane* planes,
                              int R, int C);

// Packs into gridbook v2 superblocks through gridbook::encode_superblock_fp4_v2: [R, C/256 · (4k + 9)] bytes.
Expected<std::vector<uint8_t>> pack_fp4_v2(const gridbook::Rung& rung, const Fp4CbEncoding& enc);

// The packed bytes of rows × cols weights, superblock by superblock (row-major): encode(sb, codes, dst)
// writes superblock sb from its kCodewords codewords into the rung's type_size bytes at dst.
using SuperblockEncoder = std::function<Status(size_t sb, std::span<const uint64_t> codes, uint8_t* dst)>;
Expected<std::vector<uint8_t>> pack_superblocks(const gridbook::Rung& rung, int rows, int cols,
                                                const std::vector<uint64_t>& codes,
                                                const SuperblockEncoder& encode);

// ---- FP8-CB (per-row fp32 scale, no plane) ----

struct Fp8CbEncoding {
  int rows = 0;
  int cols = 0;
  std::vector<uint64_t> codes;   // [rows, cols / 8]
  std::vector<float> row_scale;  // [rows] the weight_scale tensor
  std::vector<float> w_hat;      // [rows, cols] bf16_rn(fl32(v · scale)) as FP32
  bool used_identity = false;
  double damp_used = 0.0;
};

// Row scales come from the original weights (a row scale spans every block, so it cannot be lazy).
Expected<Fp8CbEncoding> encode_fp8cb_rtn(const gridbook::Codebook& cb, const float* W, int R, int C,
                                         const float* q, int refits = 2);
Expected<Fp8CbEncoding> encode_fp8cb_cb_gptq(const gridbook::Codebook& cb, const float* W, int R, int C,
                                             const float* H, int64_t n_tokens, const float* q,
                                             const CbGptqOptions& opt = {});
// gptq_core for a book whose scale is one per row and fixed before GPTQ (FP8_DYNAMIC's grid, FP8-CB), block
// 256, on the GPU (runtime::CudaBackendHooks::fp8_gptq): each slab's entry of its sub-table [R, C / sub_dim],
// checked to lie in it, with the factorization's identity flag and damping. Fails without the CUDA backend.
struct FixedScaleGptq {
  std::vector<uint32_t> sub_idx;
  bool identity = false;
  double damp_used = 0.0;
};
Expected<FixedScaleGptq> fixed_scale_gptq_on_device(const float* W, int R, int C, const float* H,
                                                    int64_t n_tokens, const float* row_scale,
                                                    const DenseBook& book, bool bf16_decode, double damp,
                                                    int max_retries);

// encode_fp8cb_cb_gptq on the GPU (the row scales are searched here), the same bytes: for block 256 and
// rungs of 2-vectors.
bool fp8cb_gptq_on_device_covers(const gridbook::Codebook& cb, const CbGptqOptions& opt);
Expected<Fp8CbEncoding> encode_fp8cb_cb_gptq_on_device(const gridbook::Codebook& cb, const float* W, int R,
                                                       int C, const float* H, int64_t n_tokens,
                                                       const float* q, const CbGptqOptions& opt = {});
Expected<std::vector<uint8_t>> pack_fp8cb(const gridbook::Rung& rung, const Fp8CbEncoding& enc);

// ---- holdout gate (§5 line 11) ----

// Output-MSE of W_hat against W on held-out inputs: mean over n·R of ((W_hat − W)·xᵀ)². X: [n, C], W/W_hat:
// [R, C]. Float64, rows reduced in a fixed order.
double holdout_output_mse(const float* X, int64_t n, const float* W, const float* W_hat, int R, int C);

struct GateOutcome {
  double mse_gptq = 0.0;
  double mse_nn = 0.0;
  bool kept_gptq = false;  // mse_gptq <= mse_nn
};

// Runs CB-GPTQ and RTN and keeps CB-GPTQ only if its holdout output-MSE is <= the NN-only one.
Expected<Fp4CbEncoding> encode_fp4_gated(const gridbook::Codebook& cb, const float* W, int R, int C,
                                         const float* H, int64_t n_tokens, const float* q,
                                         const float* X_hold, int64_t n_hold, const CbGptqOptions& opt,
                                         GateOutcome* outcome);

}  // namespace gridq::quant
