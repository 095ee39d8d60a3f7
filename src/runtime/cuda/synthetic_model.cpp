#include "runtime/cuda/synthetic_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/numerics.h"
#include "gridbook/scale_coding.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/relayout.h"

namespace gridq::cuda {
namespace {

constexpr size_t kSlack = 16;  // as upload_model: the CB code window reads up to 7 bytes past a row
constexpr int kCbK = 16, kCbV = 2;
constexpr size_t kCbTypeSize = 73;  // NVFP4-CB K16 v2: bytes per 256 weights
constexpr float kBf16Scale = 0.05f;

struct Builder {
  cudaStream_t s = nullptr;
  uint64_t seed = 0, n = 0;
  size_t packed = 0;
  // A fresh, well separated seed per buffer (the fill kernels hash seed + index, so nearby seeds overlap).
  uint64_t next() { return synthetic_hash(seed ^ synthetic_hash(++n)); }
};

// ---- device weights (the DeviceWeights upload_bf16 / upload_fp8 / upload_cb would produce) ----

Status alloc_tiles(Builder& b, DeviceWeights& d, size_t bytes, const char* what) {
  GRIDQ_ASSIGN_OR_RETURN(d.tiles, DeviceBuffer::alloc(bytes + kSlack, what));
  GRIDQ_CUDA(cudaMemsetAsync(d.tiles.as<uint8_t>() + bytes, 0, kSlack, b.s));
  d.resident_bytes += d.tiles.bytes();
  d.relayout_bytes = bytes;
  return {};
}

// BF16 [experts][rows, in], uniform in ±kBf16Scale. Rows that do not fill 16-row tiles are padded with zero
// rows like upload_model does; such (small) matrices are built on the host and re-laid.
Expected<DeviceWeights> bf16_weights(Builder& b, int rows, int in, int experts) {
  const int rows16 = (rows + 15) / 16 * 16;
  const size_t per = static_cast<size_t>(rows16) * static_cast<size_t>(in);
  b.packed += static_cast<size_t>(experts) * static_cast<size_t>(rows) * static_cast<size_t>(in) * 2;
  if (rows16 != rows) {
    std::vector<uint16_t> w(per * static_cast<size_t>(experts), 0);
    uint64_t st = b.next();
    for (int e = 0; e < experts; ++e)
      for (size_t i = 0; i < static_cast<size_t>(rows) * static_cast<size_t>(in); ++i) {
        st = synthetic_hash(st);
        const float u = static_cast<float>(st >> 40) * 0x1p-24f;
        w[per * static_cast<size_t>(e) + i] = f32_to_bf16((2.0f * u - 1.0f) * kBf16Scale);
      }
    return upload_bf16(rows16, in, experts, w);
  }
  DeviceWeights d;
  const size_t n = per * static_cast<size_t>(experts);
  GRIDQ_RETURN_IF_ERROR(alloc_tiles(b, d, n * 2, "synthetic BF16 tiles"));
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(d.tiles.as<uint16_t>(), n, kBf16Scale, b.next(), b.s));
  d.m.format = WeightFormat::BF16;
  d.m.rows = rows;
  d.m.in = in;
  d.m.tiles = d.tiles.as<uint8_t>();
  d.m.expert_stride = static_cast<long long>(per * 2);
  return d;
}

// FP8 E4M3 [rows, in] (no NaN) with FP32 row scales in [1e-3, 1e-2].
Expected<DeviceWeights> fp8_weights(Builder& b, int rows, int in) {
  if (rows % kTileRows != 0)
    return err("synthetic model: FP8 matrix with {} rows (not a multiple of 16)", rows);
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(in);
  b.packed += n + static_cast<size_t>(rows) * 4;
  DeviceWeights d;
  GRIDQ_RETURN_IF_ERROR(alloc_tiles(b, d, n, "synthetic FP8 tiles"));
  GRIDQ_RETURN_IF_ERROR(fill_random_e4m3(d.tiles.as<uint8_t>(), n, b.next(), b.s));
  GRIDQ_ASSIGN_OR_RETURN(d.scales,
                         DeviceBuffer::alloc(static_cast<size_t>(rows) * 4, "synthetic FP8 weight_scale"));
  GRIDQ_RETURN_IF_ERROR(
      fill_random_f32(d.scales.as<float>(), static_cast<size_t>(rows), 1e-3f, 1e-2f, b.next(), b.s));
  d.resident_bytes += d.scales.bytes();
  d.m.format = WeightFormat::FP8;
  d.m.rows = rows;
  d.m.in = in;
  d.m.tiles = d.tiles.as<uint8_t>();
  d.m.expert_stride = static_cast<long long>(n);
  d.m.row_scale = d.scales.as<float>();
  return d;
}

// NVFP4-CB K16 v2 stack [experts][rows, in]: legal random tiles and an on-grid random codebook.
Expected<DeviceWeights> cb_weights(Builder& b, int rows, int in, int experts) {
  if (rows % kTileRows != 0 || in % 256 != 0)
    return err("synthetic model: NVFP4-CB matrix [{}, {}] (rows must be a multiple of 16, in of 256)", rows,
               in);
  const long long unit = cb_unit_bytes(kCbK, kCbV);
  const long long units = static_cast<long long>(rows / kTileRows) * (in / 256);
  const size_t per = static_cast<size_t>(units * unit);
  b.packed +=
      static_cast<size_t>(experts) * static_cast<size_t>(rows) * static_cast<size_t>(in / 256) * kCbTypeSize;
  DeviceWeights d;
  GRIDQ_RETURN_IF_ERROR(alloc_tiles(b, d, per * static_cast<size_t>(experts), "synthetic NVFP4-CB tiles"));
  GRIDQ_RETURN_IF_ERROR(
      fill_random_cb_tiles(d.tiles.as<uint8_t>(), kCbK, kCbV, units * experts, b.next(), b.s));
  // Codebook [2][2^(k/2)][4] BF16: random E2M1 magnitudes and signs (bench.cpp's construction).
  std::vector<uint16_t> cb((size_t{2} << (kCbK / 2)) * 4);
  const uint16_t e2m1[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
  uint64_t st = b.next();
  for (auto& x : cb) {
    st = synthetic_hash(st);
    x = static_cast<uint16_t>(e2m1[(st >> 33) & 7] | (((st >> 40) & 1) << 15));
  }
  GRIDQ_ASSIGN_OR_RETURN(d.codebook, DeviceBuffer::alloc(cb.size() * 2, "synthetic NVFP4-CB codebook"));
  GRIDQ_CUDA(cudaMemcpyAsync(d.codebook.as(), cb.data(), cb.size() * 2, cudaMemcpyHostToDevice, b.s));
  GRIDQ_CUDA(cudaStreamSynchronize(b.s));  // `cb` is pageable host memory that goes out of scope
  d.resident_bytes += d.codebook.bytes();
  d.m.format = WeightFormat::CB;
  d.m.rows = rows;
  d.m.in = in;
  d.m.k = kCbK;
  d.m.layout_version = kCbV;
  d.m.tiles = d.tiles.as<uint8_t>();
  d.m.expert_stride = static_cast<long long>(per);
  d.m.codebook = d.codebook.as<uint16_t>();
  // T[c] (gridbook::kV2Table = bench.cpp's 127·128 + 16·c bits): every entry exact in BF16 and E4M3.
  for (int c = 0; c < 16; ++c) d.m.v2_table_bf16[c] = f32_to_bf16(gridbook::kV2Table[static_cast<size_t>(c)]);
  return d;
}

DevLinear tiled(DeviceWeights w, int rows, int cols, int act_bits, std::string kernel) {
  DevLinear d;
  d.path = DevLinear::Path::kTiled;
  d.rows = rows;
  d.cols = cols;
  d.act_bits = act_bits;
  d.tiled = std::move(w);
  d.kernel = std::move(kernel);
  return d;
}

Expected<DevLinear> bf16_linear(Builder& b, int rows, int cols) {
  GRIDQ_ASSIGN_OR_RETURN(DeviceWeights w, bf16_weights(b, rows, cols, 1));
  return tiled(std::move(w), rows, cols, 16, "tiled BF16");
}
Expected<DevLinear> fp8_linear(Builder& b, int rows, int cols) {
  GRIDQ_ASSIGN_OR_RETURN(DeviceWeights w, fp8_weights(b, rows, cols));
  return tiled(std::move(w), rows, cols, 8, "tiled FP8 W8A8");
}

// The router: canonical BF16 [rows, cols] for the reference matvec (forward.cpp runs it on FP32 inputs).
Expected<DevLinear> bf16_ref_linear(Builder& b, int rows, int cols) {
  DevLinear d;
  d.path = DevLinear::Path::kRef;
  d.rows = rows;
  d.cols = cols;
  d.kernel = "reference BF16";
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  GRIDQ_ASSIGN_OR_RETURN(d.ref_data, DeviceBuffer::alloc(n * 2 + 16, "synthetic router"));
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(d.ref_data.as<uint16_t>(), n, 0.05f, b.next(), b.s));
  b.packed += n * 2;
  d.ref.format = detail::kRefBF16;
  d.ref.rows = rows;
  d.ref.cols = cols;
  d.ref.row_bytes = static_cast<long long>(cols) * 2;
  d.ref.expert_stride = d.ref.row_bytes * rows;
  d.ref.data = d.ref_data.as<uint8_t>();
  return d;
}

// A BF16 SwiGLU block: gate and up as one [2I, H] matrix (gate rows first), the fused gate+up kernel.
Status swiglu(Builder& b, DevSwiglu& s, int inter, int H) {
  s.inter = inter;
  GRIDQ_ASSIGN_OR_RETURN(s.gate_up, bf16_linear(b, 2 * inter, H));
  GRIDQ_ASSIGN_OR_RETURN(s.down, bf16_linear(b, H, inter));
  s.fused = inter % 16 == 0;
  return {};
}

// FP32 vectors of one layer, 16-byte aligned pieces in one buffer (upload_model's layout).
Status layer_vectors(Builder& b, DevLayer& dl, const model::ModelSpec& spec, const model::LayerSpec& L) {
  const size_t H = static_cast<size_t>(spec.hidden_size), d = static_cast<size_t>(L.head_dim);
  const bool bias = L.mlp == model::MlpKind::kMoe && spec.moe.has_bias;
  size_t n = 0;
  auto put = [&](size_t len) {
    const size_t off = n;
    n = (n + len + 3) / 4 * 4;
    return off;
  };
  const size_t o_in = put(H), o_post = put(H);
  const size_t o_q = L.qk_norm ? put(d) : 0, o_k = L.qk_norm ? put(d) : 0;
  const size_t o_b = bias ? put(static_cast<size_t>(spec.moe.n_experts)) : 0;
  const std::vector<float> inv = L.rope.inv_freq.empty() ? std::vector<float>{0.0f} : L.rope.inv_freq;
  const size_t o_f = put(inv.size());
  GRIDQ_ASSIGN_OR_RETURN(dl.vecs, DeviceBuffer::alloc(n * 4, "synthetic norms"));
  float* base = dl.vecs.as<float>();
  // Norms and bias first (their regions do not overlap inv_freq's), then inv_freq copied on the same stream.
  GRIDQ_RETURN_IF_ERROR(fill_random_f32(base, o_f, 0.9f, 1.1f, b.next(), b.s));
  if (bias)
    GRIDQ_RETURN_IF_ERROR(
        fill_random_f32(base + o_b, static_cast<size_t>(spec.moe.n_experts), -0.01f, 0.01f, b.next(), b.s));
  GRIDQ_CUDA(cudaMemcpyAsync(base + o_f, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice, b.s));
  GRIDQ_CUDA(cudaStreamSynchronize(b.s));  // `inv` is pageable host memory that goes out of scope
  dl.input_norm = base + o_in;
  dl.post_norm = base + o_post;
  dl.q_norm = L.qk_norm ? base + o_q : nullptr;
  dl.k_norm = L.qk_norm ? base + o_k : nullptr;
  dl.router_bias = bias ? base + o_b : nullptr;
  dl.inv_freq = base + o_f;
  return {};
}

Expected<DevLayer> layer(Builder& b, const model::ModelSpec& spec, const model::LayerSpec& L) {
  const int H = spec.hidden_size, d = L.head_dim, qw = L.n_heads * d, kvw = L.n_kv_heads * d;
  DevLayer dl;
  GRIDQ_RETURN_IF_ERROR(layer_vectors(b, dl, spec, L));
  // q, k, v stacked FP8 (one pass over the input), the output gate BF16, o FP8.
  GRIDQ_ASSIGN_OR_RETURN(dl.qkv, fp8_linear(b, qw + 2 * kvw, H));
  dl.stacked = true;
  if (L.gate == model::GateMode::kPerHead) {
    GRIDQ_ASSIGN_OR_RETURN(dl.g, bf16_linear(b, L.n_heads, H));
  } else if (L.gate == model::GateMode::kPerElement) {
    GRIDQ_ASSIGN_OR_RETURN(dl.g, bf16_linear(b, qw, H));
  }
  GRIDQ_ASSIGN_OR_RETURN(dl.o, fp8_linear(b, H, qw));
  if (L.mlp == model::MlpKind::kDense) {
    GRIDQ_RETURN_IF_ERROR(swiglu(b, dl.mlp, L.dense_intermediate, H));
    return dl;
  }
  const auto& M = spec.moe;
  GRIDQ_ASSIGN_OR_RETURN(dl.router, bf16_ref_linear(b, M.n_experts, H));
  if (M.shared_intermediate > 0) GRIDQ_RETURN_IF_ERROR(swiglu(b, dl.shared, M.shared_intermediate, H));
  const int I = M.expert_intermediate;
  if (I % 16 != 0 || H % 16 != 0)
    return err("synthetic model: experts [{}, {}] do not fill 16-row tiles (the fused MoE kernels need it)",
               I, H);
  GRIDQ_ASSIGN_OR_RETURN(dl.experts.gate_up, cb_weights(b, 2 * I, H, M.n_experts));
  GRIDQ_ASSIGN_OR_RETURN(dl.experts.down, cb_weights(b, H, I, M.n_experts));
  dl.experts.fused = true;
  return dl;
}

size_t layer_bytes(const DevLayer& dl) {
  return dl.vecs.bytes() + dl.qkv.resident_bytes() + dl.q.resident_bytes() + dl.k.resident_bytes() +
         dl.v.resident_bytes() + dl.g.resident_bytes() + dl.o.resident_bytes() +
         dl.mlp.gate_up.resident_bytes() + dl.mlp.down.resident_bytes() + dl.router.resident_bytes() +
         dl.experts.resident_bytes() + dl.shared.gate_up.resident_bytes() + dl.shared.down.resident_bytes();
}

}  // namespace

size_t synthetic_packed_bytes(const model::ModelSpec& spec) {
  const size_t H = static_cast<size_t>(spec.hidden_size), V = static_cast<size_t>(spec.vocab_size);
  size_t n = 2 * (V * H * 2);  // embed_tokens, lm_head
  for (const auto& L : spec.layers) {
    const size_t d = static_cast<size_t>(L.head_dim), qw = static_cast<size_t>(L.n_heads) * d;
    const size_t qkv_rows = qw + 2 * static_cast<size_t>(L.n_kv_heads) * d;
    n += qkv_rows * H + qkv_rows * 4 + H * qw + H * 4;  // FP8 q/k/v, o and their row scales
    if (L.gate == model::GateMode::kPerHead) n += static_cast<size_t>(L.n_heads) * H * 2;
    if (L.gate == model::GateMode::kPerElement) n += qw * H * 2;
    if (L.mlp == model::MlpKind::kDense) {
      n += 3 * static_cast<size_t>(L.dense_intermediate) * H * 2;
      continue;
    }
    const auto& M = spec.moe;
    const size_t E = static_cast<size_t>(M.n_experts), I = static_cast<size_t>(M.expert_intermediate);
    n += E * H * 2 + 3 * static_cast<size_t>(M.shared_intermediate) * H * 2;
    n += E * (2 * I * (H / 256) + H * (I / 256)) * kCbTypeSize;
  }
  return n;
}

Expected<std::unique_ptr<DeviceModel>> synthetic_device_model(const model::ModelSpec& spec, uint64_t seed) {
  if (static_cast<int>(spec.layers.size()) != spec.n_layers)
    return err("synthetic model: spec lists {} layers, n_layers is {}", spec.layers.size(), spec.n_layers);
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  Builder b;
  b.s = stream.get();
  b.seed = seed;
  auto dm = std::make_unique<DeviceModel>();
  const size_t H = static_cast<size_t>(spec.hidden_size), V = static_cast<size_t>(spec.vocab_size);
  b.packed += V * H * 2;
  GRIDQ_ASSIGN_OR_RETURN(dm->embed, DeviceBuffer::alloc(V * H * 2, "synthetic embed_tokens"));
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(dm->embed.as<uint16_t>(), V * H, kBf16Scale, b.next(), b.s));
  GRIDQ_ASSIGN_OR_RETURN(dm->final_norm, DeviceBuffer::alloc(H * 4, "synthetic final norm"));
  GRIDQ_RETURN_IF_ERROR(fill_random_f32(dm->final_norm.as<float>(), H, 0.9f, 1.1f, b.next(), b.s));
  GRIDQ_ASSIGN_OR_RETURN(dm->lm_head, bf16_linear(b, spec.vocab_size, spec.hidden_size));
  for (const auto& L : spec.layers) {
    GRIDQ_ASSIGN_OR_RETURN(DevLayer dl, layer(b, spec, L));
    dm->weight_bytes += layer_bytes(dl);
    dm->layers.push_back(std::move(dl));
  }
  dm->weight_bytes += dm->embed.bytes() + dm->final_norm.bytes() + dm->lm_head.resident_bytes();
  dm->packed_bytes = b.packed;
  GRIDQ_RETURN_IF_ERROR(stream.sync());
  return dm;
}

}  // namespace gridq::cuda
