// The model on the device, mirroring runtime::ModelWeights field for field (gpu-engine.md §2): every Linear
// uploaded once, in the re-laid tiled layout where a tiled GEMV kernel serves its format and shape
// (relayout.h), else in its canonical bytes for the reference matvec (kernels/ref_matvec.cu). Nothing is
// expanded: resident bytes are the packed bytes, plus zero rows that pad a tiled matrix to 16-row tiles.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/upload.h"
#include "runtime/model_weights.h"

namespace gridq::cuda {

// One Linear [rows, cols] (or a stack of experts) as the device forward runs it.
struct DevLinear {
  enum class Path { kNone, kTiled, kRef };
  Path path = Path::kNone;
  int rows = 0, cols = 0;  // logical
  int experts = 1;
  int act_bits = 16;    // input contract (16 none, 8 FP8 per token, 4 FP4 group-16)
  DeviceWeights tiled;  // kTiled: rows padded to a multiple of 16 (tiled.m.rows)
  DeviceBuffer ref_data, ref_scale, ref_codebook;
  detail::RefMatrix ref;  // kRef: canonical bytes (+16 bytes of slack for the 8-byte code window)
  std::string kernel;     // "tiled FP8 W8A8", "reference NVFP4_CB_K13", ... (the start-up report)

  // Row stride of the output: tiled kernels write every padded row.
  int out_rows() const { return path == Path::kTiled ? tiled.m.rows : rows; }
  size_t resident_bytes() const;
};

// The routed experts of one MoE layer.
struct DevExperts {
  bool fused = false;  // NVFP4-CB K16 v2: the one-launch MoE kernels (kernels.h)
  bool fp4 = true;     // the experts' activation contract: FP4 group-16 QDQ (act_bits 4); false: w4a16
  DeviceWeights gate_up, down;   // fused: stacks [E][2I, H] and [E][H, I], tiled
  DevLinear gate, up, down_ref;  // otherwise: reference stacks [E][I, H], [E][I, H], [E][H, I]
  size_t resident_bytes() const;
};

// A SwiGLU block (dense MLP or shared expert): gate and up as one [2I, H] matrix, gate rows first.
struct DevSwiglu {
  DevLinear gate_up, down;
  bool fused = false;  // the tiled gate+up+SiLU·mul kernel serves gate_up (BF16, NVFP4-CB K16 v2)
  int inter = 0;
};

struct DevLayer {
  DeviceBuffer vecs;                   // FP32 norms and router bias, pointed into by the fields below
  const float* input_norm = nullptr;   // [H]
  const float* post_norm = nullptr;    // [H]
  const float* q_norm = nullptr;       // [d] or null
  const float* k_norm = nullptr;       // [d] or null
  const float* router_bias = nullptr;  // [E] or null
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  DevLinear qkv;      // [n_h·d + 2·n_kv·d, H]: q, k, v rows stacked (one pass over the input)
  DevLinear q, k, v;  // used instead when the three cannot be stacked (different formats)
  bool stacked = true;
  DevLinear g;       // [n_h or n_h·d, H]; path kNone without a gate
  DevLinear o;       // [H, n_h·d]
  DevSwiglu mlp;     // dense layers
  DevLinear router;  // [E, H] FP32 output
  DevExperts experts;
  DevSwiglu shared;  // inter 0 without a shared expert
};

struct DeviceModel {
  DeviceBuffer embed;       // BF16 [vocab, H], canonical (rows are gathered, never multiplied)
  DeviceBuffer final_norm;  // FP32 [H]
  DevLinear lm_head;        // [vocab, H]
  std::vector<DevLayer> layers;
  size_t weight_bytes = 0;  // resident bytes of every weight above
  size_t packed_bytes = 0;  // the same weights' bytes as the host holds them
};

// Uploads every weight the forward reads. Refuses (naming the tensor) what no device path can serve.
Expected<std::unique_ptr<DeviceModel>> upload_model(const model::ModelSpec& spec,
                                                    const runtime::ModelWeights& w);

// How many matrices (or MoE layers) each kernel path serves: {"tiled FP8 W8A8": 96, ...} (start-up report,
// bench JSON).
std::map<std::string, int> kernel_counts(const DeviceModel& dm);

// Layer l's weights as the forward reads them (upload_model's per-layer part). routed = false leaves the
// routed experts off the device (the quantizer's teacher uploads them itself, teacher.h). Adds the host bytes
// to `packed` and sets `weight_bytes` to the layer's resident bytes.
Expected<DevLayer> upload_layer(const model::ModelSpec& spec, int l, const runtime::LayerWeights& lw,
                                bool routed, size_t& packed, size_t& weight_bytes);
// gate, up and down as a SwiGLU block (gate_up stacked, fused where the kernel serves it).
Status upload_swiglu(DevSwiglu& s, const runtime::QMatrix& gate, const runtime::QMatrix& up,
                     const runtime::QMatrix& down, const std::string& what);

// One host matrix (or expert stack, all of one format) as a DevLinear. `what` names it in errors.
Expected<DevLinear> upload_linear(const std::vector<const runtime::QMatrix*>& stack, const std::string& what,
                                  bool allow_tiled = true);

}  // namespace gridq::cuda
