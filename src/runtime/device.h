// Which backend runs a model (`--device cpu|cuda|auto`) and the seam through which the CUDA backend plugs in:
// runtime/ never links CUDA, so a program built with it (cli/main.cpp, the CUDA tests) registers the
// backend's hooks at start; a program without it has none and `--device cuda` is refused with a message that
// says so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/backend.h"
#include "runtime/model_weights.h"

namespace gridq::runtime {

namespace cpu {
struct LayerHooks;
}

// What a device backend is asked for at open (vLLM's names where the meaning is the same).
struct DeviceOptions {
  double gpu_memory_utilization = 0.9;  // fraction of the device's total memory gridq may hold
  int64_t max_model_len = 0;            // 0 = the model's max_position_embeddings
  int max_num_seqs = 16;                // sequences that may hold KV at once (rings are per sequence)
  bool cuda_graphs = true;              // decode steps replay CUDA graphs (vLLM's --enforce-eager turns off)
  // Full-layer KV pages of 16 tokens (vLLM's --num-gpu-blocks-override): cuda: 0 = as many as the memory
  // budget holds, else at most this many; cpu: 0 = see cpu_kv_budget, else exactly this many.
  int64_t num_gpu_blocks_override = 0;
  // cpu without an override: false = KV grows on demand (no page accounting: generate, eval); true = a
  // pool of max_num_seqs × max_model_len worth of pages, as `gridq serve` admits against.
  bool cpu_kv_budget = false;
  // Prefix caching will be turned on (serve): the cuda backend reserves its ring snapshots
  // (cuda_snapshots.cpp) only then, so generate, eval and bench keep that memory for KV.
  bool prefix_caching = false;
  // cuda: the token budget of one forward step (vLLM's --max-num-batched-tokens): the rows its buffers are
  // sized for, 0 = kCudaStepTokens (cuda/kernels/forward_kernels.h step_rows_for).
  int64_t max_num_batched_tokens = 0;
};
// The CUDA engine's default rows of one step: its prefill chunk and serve's default step budget, so that a
// prompt's chunk fills one step (cuda/kernels/forward_kernels.h kDefaultStepRows, held equal to it).
inline constexpr int kCudaStepTokens = 4096;

// The CUDA backend as seen from runtime/: a probe (is there a GPU this build can run?) and a factory.
struct CudaProbe {
  bool usable = false;
  std::string description;  // usable: "NVIDIA H200 (sm_90, 139.8 GiB)"; else why not, naming the rule
};
// A device-held H = Σ xᵀx for the quantizer's accumulators (quant/hessian_accum.h): host rows in, in
// whole 256-row blocks (the last call may hold the final partial block), the same bits as the CPU
// accumulator (cuda/hessian.h says why).
class DeviceHessianStore {
 public:
  virtual ~DeviceHessianStore() = default;
  virtual Status add_blocks(const float* rows, int64_t n) = 0;  // rows [n, cols], host memory
  virtual Expected<std::vector<float>> upper() = 0;  // H [cols, cols]: the upper triangle (j ≥ i) valid
};

// The book and encoder settings of a GPU NVFP4-CB encode (quant's CbGptqOptions and refinement).
struct CbFp4Settings {
  int K = 0;  // entries per sub-table; book [2, K, 4]
  const double* book = nullptr;
  double damp = 0.1;
  int max_retries = 3, pilot_rows = 256, refits = 2;
  int refine_passes = 0;  // CB-GPTQ only: > 0 also returns the refined encoding (quant/cb_refine.h)
  bool refine_scales = false;
};
// One NVFP4-CB v2 encode on the GPU (`gridq quantize --device cuda`): CB-GPTQ, or round-to-nearest when H is
// null, with the CPU encoder's bytes (cuda/gptq/gptq.h). Host memory in and out.
struct CbFp4Request {
  const float* W = nullptr;  // [R, C]
  int R = 0, C = 0;
  const float* H = nullptr;  // [C, C]; null: RTN
  int64_t n_tokens = 0;
  const float* q = nullptr;  // [C] importances
  CbFp4Settings s;
};
struct CbFp4Reply {
  std::vector<uint32_t> sub_idx;          // [R, C / 4]
  static constexpr int kPlaneBytes = 17;  // per superblock: E, then the 16 group codes
  std::vector<uint8_t> planes;            // [R, C / 256, kPlaneBytes]
  bool identity = false;                  // CB-GPTQ ran with U = I
  double damp_used = 0.0;
  bool refined = false;  // refine_passes > 0 and not the identity: the refinement's result follows
  std::vector<uint32_t> refined_sub_idx;
  std::vector<uint8_t> refined_planes;
  double f_before = 0.0, f_after = 0.0;
  int rounds = 0;
  int64_t codes_changed = 0, scales_changed = 0;
};

// One GPTQ encode of an FP8 format on the GPU (`gridq quantize --device cuda`, block 256, in_features a
// multiple of 256): FP8_DYNAMIC per channel (one table of the 253 signed E4M3 values, sub_dim 1) or an
// FP8-CB product rung (its sub-tables of 2-vectors, decoded in BF16), with each row's scale fixed before
// GPTQ; each slab's entry, the CPU encoder's choice bit for bit (cuda/gptq/gptq.h fp8_gptq). Host memory in
// and out.
struct Fp8GptqRequest {
  const float* W = nullptr;  // [R, C]
  int R = 0, C = 0;
  const float* H = nullptr;  // [C, C]
  int64_t n_tokens = 0;
  const float* scale = nullptr;  // [R] the row scales
  int sub_dim = 1;
  std::vector<int> entries;        // [n_sub]
  const double* tables = nullptr;  // every sub-table in order, [Σ entries, sub_dim]
  bool bf16_decode = false;        // the decoded value is bf16_rn(fl32(t)·s) instead of t·s
  double damp = 0.1;
  int max_retries = 3;
};
struct Fp8GptqReply {
  std::vector<uint16_t> idx;  // [R, C / sub_dim] entries of each slab's sub-table
  bool identity = false;      // GPTQ ran with U = I
  double damp_used = 0.0;
};

// A batch of NVFP4-CB v2 encodes on the GPU (`gridq quantize --device cuda`: a layer's routed experts, in
// chunks): M matrices [R, C] of one shape over nH inputs (gate and up share their expert's), each encoded by
// CB-GPTQ (and its refinement when refine_passes > 0) and/or round-to-nearest, with every candidate's
// holdout output-MSE (quant/cb_gptq.h holdout_output_mse's bits); half_traces() then gives the output proxy
// of the candidate the caller keeps (quant/output_proxy.h's bits). The bytes are the one-matrix encoders'.
// Host memory in and out.
struct CbFp4BatchRequest {
  int R = 0, C = 0;
  std::vector<const float*> W;     // [M] each [R, C]
  std::vector<int> h_of;           // [M] the input of each matrix
  std::vector<const float*> H;     // [nH] each [C, C], both triangles (RTN too: the output proxy)
  std::vector<int64_t> n_tokens;   // [nH] rows behind each H (0: plain nearest neighbour)
  std::vector<const float*> q;     // [nH] each [C] importances
  std::vector<const float*> hold;  // [nH] each [n_hold, C] holdout rows (null when n_hold is 0)
  std::vector<int64_t> n_hold;     // [nH]
  CbFp4Settings s;
  bool gptq = true;  // CB-GPTQ (and the refinement); false: RTN only
  bool rtn = false;  // with gptq: RTN as well (the holdout gate's alternative)
};
struct CbFp4BatchMatrix {
  CbFp4Reply enc;                     // CB-GPTQ and its refinement (sub_idx empty without gptq)
  std::vector<uint32_t> rtn_sub_idx;  // RTN when asked (or without gptq): [R, C / 4]
  std::vector<uint8_t> rtn_planes;    // [R, C / 256, kPlaneBytes]
  // Holdout output-MSE of each candidate present (0 when its input has no holdout rows).
  double mse_gptq = 0.0, mse_refined = 0.0, mse_rtn = 0.0;
};
class DeviceCbBatch {
 public:
  enum Which { kGptq = 0, kRefined = 1, kRtn = 2 };
  virtual ~DeviceCbBatch() = default;
  virtual const std::vector<CbFp4BatchMatrix>& matrices() const = 0;  // [M]
  // ½·tr(ΔW H ΔWᵀ) of candidate which[m] of every matrix m (-1: skipped, 0 returned).
  virtual Expected<std::vector<double>> half_traces(const std::vector<int>& which) = 0;
};

// The layer-streamed teacher's decoder layer on the GPU (`gridq quantize --device cuda`, cuda/teacher/
// teacher.h): cpu::decoder_layer's contract for n_seq fresh sequences of S tokens each, starting at position
// 0, with the device engine's numbers (BF16 activations between matrices, gpu-engine.md §3).
class DeviceTeacher {
 public:
  virtual ~DeviceTeacher() = default;
  // x [n_seq·S, H] FP32 host rows, advanced in place through layer l of `lw` (BF16 or F32 weights). The
  // hooks get host rows once per call, in cpu::decoder_layer's order and with its row order.
  virtual Status layer(int l, const LayerWeights& lw, int64_t n_seq, int64_t S, float* x,
                       const cpu::LayerHooks* hooks) = 0;
  virtual int64_t peak_device_bytes() const = 0;  // weights + buffers, the largest so far
  // Seconds in layer() since the last call: the uploads and steps (the device forward with its copies
  // back), and the hooks; then zeroes them.
  struct Seconds {
    double upload = 0, steps = 0, hooks = 0;
  };
  virtual Seconds take_seconds() = 0;
};

struct CudaBackendHooks {
  std::function<CudaProbe()> probe;
  // `keepalive` owns what the host weights point into (mmaps); the backend may drop it after upload.
  std::function<Expected<std::unique_ptr<Backend>>(const model::ModelSpec&, const ModelWeights&,
                                                   std::shared_ptr<void> keepalive, const DeviceOptions&)>
      create;
  // A full-size model of random legal weights built on the device (`serve --synthetic NAME`, cuda/
  // synthetic_model.h): `vocab` > 0 replaces the config's vocabulary size (a real tokenizer's).
  std::function<Expected<std::unique_ptr<Backend>>(const std::string& name, uint64_t seed, int vocab,
                                                   const DeviceOptions&)>
      synthetic;
  // `gridq quantize --device cuda`: the Hessians of the layer-streamed capture on the GPU.
  std::function<Expected<std::unique_ptr<DeviceHessianStore>>(int cols)> hessian;
  // `gridq quantize --device cuda`: the NVFP4-CB encoders on the GPU.
  std::function<Expected<CbFp4Reply>(const CbFp4Request&)> cb_fp4;
  // `gridq quantize --device cuda`: GPTQ of the FP8 formats (FP8_DYNAMIC, FP8-CB) on the GPU.
  std::function<Expected<Fp8GptqReply>(const Fp8GptqRequest&)> fp8_gptq;
  // `gridq quantize --device cuda`: a layer's routed experts encoded in batches.
  std::function<Expected<std::unique_ptr<DeviceCbBatch>>(const CbFp4BatchRequest&)> cb_fp4_batch;
  // The output proxy tr(ΔW H ΔWᵀ)/2 of quant/output_proxy.h on the GPU, the same bits (W, W_hat [R, C], H
  // [C, C] host, finite): the proxy of every tensor the expert batches (cb_fp4_batch) do not cover.
  std::function<Expected<double>(const float* W, const float* W_hat, int R, int C, const float* H)>
      half_trace;
  // `gridq quantize --device cuda`: the teacher forward on the GPU.
  std::function<Expected<std::unique_ptr<DeviceTeacher>>(const model::ModelSpec&)> teacher;
};
// Hooks without a probe or a factory clear the registration (tests restore a program without CUDA so).
void register_cuda_backend(CudaBackendHooks hooks);
const CudaBackendHooks* cuda_backend_hooks();  // null when this program has no CUDA backend

enum class DeviceKind { kCpu, kCuda };
struct DeviceChoice {
  DeviceKind kind = DeviceKind::kCpu;
  std::string log_line;  // one line naming the device and why it was chosen
};
// flag: "cpu", "cuda" or "auto" (CUDA when this program has the backend and a usable GPU, else CPU).
// "cuda" without a usable GPU, or any other value, is an error naming the flag and the reason.
Expected<DeviceChoice> choose_device(const std::string& flag);

}  // namespace gridq::runtime
