#include "runtime/cuda/device_model.h"

#include <cstring>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"

namespace gridq::cuda {
namespace {

using runtime::QMatrix;
using RF = runtime::WeightFormat;

constexpr size_t kSlack = 16;  // the CB code window reads up to 7 bytes past a row (format.md §5)

size_t elem_bytes(RF f) { return f == RF::kBF16 ? 2 : f == RF::kF32 ? 4 : 1; }
size_t host_row_bytes(const QMatrix& m) {
  return m.format == RF::kCB ? static_cast<size_t>(m.row_bytes)
                             : static_cast<size_t>(m.cols) * elem_bytes(m.format);
}
// The bytes the host holds of m (its rows and row scales).
size_t host_bytes(const QMatrix& m) {
  return host_row_bytes(m) * static_cast<size_t>(m.rows) + (m.row_scale ? m.rows * 4 : 0);
}
bool same_kind(const QMatrix& a, const QMatrix& b) {
  return a.format == b.format && a.cols == b.cols && a.act_bits == b.act_bits && a.rung == b.rung &&
         a.codebook == b.codebook && (a.rung == nullptr || *a.rung == *b.rung);
}
bool tiled_cb(const QMatrix& m) {
  const auto* r = m.rung;
  return r && r->grid == gridbook::Grid::FP4 && r->mode == gridbook::Mode::Product && r->k % 2 == 0 &&
         r->k >= 12 && r->k <= 24;
}

// Host bytes of `parts` stacked: per expert e (outer), the parts' rows (inner), each expert padded with zero
// rows to `rows_pad`; FP32 row scales alongside (1.0 on padding rows, which the kernels require to be > 0).
struct Stacked {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};
Stacked stack_rows(const std::vector<std::vector<const QMatrix*>>& experts, int rows_pad) {
  Stacked s;
  const QMatrix& m0 = *experts[0][0];
  const size_t rb = host_row_bytes(m0);
  const bool scaled = m0.row_scale != nullptr;
  // One allocation each (the quantizer's teacher uploads hundreds of experts per layer; every grown or extra
  // buffer of megabytes is fresh pages to fault in).
  s.bytes.reserve(rb * static_cast<size_t>(rows_pad) * experts.size());
  if (scaled) s.scales.reserve(static_cast<size_t>(rows_pad) * experts.size());
  for (const auto& parts : experts) {
    int64_t rows = 0;
    for (const QMatrix* p : parts) {
      const auto* d = static_cast<const uint8_t*>(p->data);
      s.bytes.insert(s.bytes.end(), d, d + rb * static_cast<size_t>(p->rows));
      if (scaled) s.scales.insert(s.scales.end(), p->row_scale, p->row_scale + p->rows);
      rows += p->rows;
    }
    s.bytes.resize(s.bytes.size() + rb * static_cast<size_t>(rows_pad - rows), 0);
    if (scaled) s.scales.resize(s.scales.size() + static_cast<size_t>(rows_pad - rows), 1.0f);
  }
  return s;
}

Status upload_ref_codebook(DevLinear& d, const QMatrix& m) {
  const gridbook::Codebook& cb = *m.codebook;
  std::vector<float> all;
  auto& r = d.ref;
  r.cb_fp8 = m.rung->grid == gridbook::Grid::FP8 ? 1 : 0;
  r.k = m.rung->k;
  r.layout_version = m.rung->layout_version;
  r.n_sub = cb.split.n;
  r.sub_dim = m.rung->sub_dim();
  if (r.n_sub < 1 || r.n_sub > 4) return err("CB codebook with {} sub-tables", r.n_sub);
  for (int i = 0; i < r.n_sub; ++i) {
    r.sub_bits[i] = cb.split.width[i];
    r.sub_off[i] = cb.split.offset[i];
    r.table_off[i] = static_cast<int>(all.size());
    all.insert(all.end(), cb.sub[static_cast<size_t>(i)].begin(), cb.sub[static_cast<size_t>(i)].end());
  }
  for (int c = 0; c < 16; ++c) r.v2_table[c] = gridbook::kV2Table[static_cast<size_t>(c)];
  GRIDQ_ASSIGN_OR_RETURN(d.ref_codebook, DeviceBuffer::alloc(all.size() * 4, "reference codebook"));
  GRIDQ_RETURN_IF_ERROR(d.ref_codebook.upload(all.data(), all.size() * 4));
  r.codebook = d.ref_codebook.as<float>();
  return {};
}

// experts[e] = the parts stacked by rows for expert e (one expert for a plain matrix).
Expected<DevLinear> upload(const std::vector<std::vector<const QMatrix*>>& experts, const std::string& what,
                           bool allow_tiled) {
  if (experts.empty() || experts[0].empty()) return err("{}: nothing to upload", what);
  const QMatrix& m0 = *experts[0][0];
  int64_t rows = 0;
  for (const QMatrix* p : experts[0]) rows += p->rows;
  for (const auto& parts : experts) {
    int64_t r = 0;
    for (const QMatrix* p : parts) {
      if (!p->data) return err("{}: weight has no data", what);
      if (!same_kind(*p, m0))
        return err("{}: parts differ in format, width, contract or codebook ({} vs {})", what,
                   runtime::format_name(p->format), runtime::format_name(m0.format));
      r += p->rows;
    }
    if (r != rows) return err("{}: experts differ in rows ({} vs {})", what, r, rows);
  }
  if (rows > (1 << 30) || m0.cols > (1 << 30)) return err("{}: [{}, {}] is too large", what, rows, m0.cols);
  if ((m0.format == RF::kFP8 || (m0.format == RF::kCB && m0.rung->grid == gridbook::Grid::FP8)) &&
      !m0.row_scale)
    return err("{}: {} weight without weight_scale", what, runtime::format_name(m0.format));
  DevLinear d;
  d.rows = static_cast<int>(rows);
  d.cols = static_cast<int>(m0.cols);
  d.experts = static_cast<int>(experts.size());
  d.act_bits = m0.format == RF::kFP8 ? 8 : m0.act_bits;
  const int E = d.experts, R = d.rows, C = d.cols;
  const int rows16 = (R + 15) / 16 * 16;
  const bool tiled =
      allow_tiled && ((m0.format == RF::kBF16 && C % 64 == 0) ||
                      (m0.format == RF::kFP8 && C % 64 == 0 && m0.act_bits == 8) ||
                      (m0.format == RF::kCB && tiled_cb(m0) && (m0.act_bits == 4 || m0.act_bits == 16)));
  if (tiled) {
    Stacked s = stack_rows(experts, rows16);
    d.path = DevLinear::Path::kTiled;
    if (m0.format == RF::kBF16) {
      // The stacked bytes as BF16 values in place (a vector's storage is aligned for any scalar).
      const std::span<const uint16_t> w(reinterpret_cast<const uint16_t*>(s.bytes.data()),
                                        s.bytes.size() / 2);
      GRIDQ_ASSIGN_OR_RETURN(d.tiled, upload_bf16(rows16, C, E, w));
      d.kernel = "tiled BF16";
    } else if (m0.format == RF::kFP8) {
      GRIDQ_ASSIGN_OR_RETURN(d.tiled, upload_fp8(rows16, C, E, s.bytes, s.scales));
      d.kernel = "tiled FP8 W8A8";
    } else {
      const auto& cb = *m0.codebook;
      std::vector<uint16_t> f16;
      for (const auto& t : cb.sub)
        for (float v : t) f16.push_back(f32_to_f16(v));
      GRIDQ_ASSIGN_OR_RETURN(d.tiled, upload_cb(m0.rung->k, m0.rung->layout_version, rows16, C, E, s.bytes,
                                                f16, gridbook::kV2Table));
      d.kernel = "tiled " + m0.rung->name() + (m0.rung->layout_version == 2 ? " v2" : " v1") +
                 (m0.act_bits == 16 ? " w4a16" : "");
    }
    return d;
  }
  // Reference path: canonical bytes, no padding.
  Stacked s = stack_rows(experts, R);
  d.path = DevLinear::Path::kRef;
  auto& r = d.ref;
  r.rows = R;
  r.cols = C;
  r.row_bytes = static_cast<long long>(host_row_bytes(m0));
  r.expert_stride = r.row_bytes * R;
  r.act_bits = d.act_bits;
  r.format = m0.format == RF::kBF16  ? detail::kRefBF16
             : m0.format == RF::kF32 ? detail::kRefF32
             : m0.format == RF::kFP8 ? detail::kRefFP8
                                     : detail::kRefCB;
  GRIDQ_ASSIGN_OR_RETURN(d.ref_data, DeviceBuffer::alloc(s.bytes.size() + kSlack, what));
  GRIDQ_RETURN_IF_ERROR(d.ref_data.zero());
  GRIDQ_RETURN_IF_ERROR(d.ref_data.upload(s.bytes.data(), s.bytes.size()));
  r.data = d.ref_data.as<uint8_t>();
  if (!s.scales.empty()) {
    GRIDQ_ASSIGN_OR_RETURN(d.ref_scale, DeviceBuffer::alloc(s.scales.size() * 4, what + " weight_scale"));
    GRIDQ_RETURN_IF_ERROR(d.ref_scale.upload(s.scales.data(), s.scales.size() * 4));
    r.row_scale = d.ref_scale.as<float>();
  }
  if (m0.format == RF::kCB) {
    if (m0.rung->mode != gridbook::Mode::Product)
      return err("{}: {} is not a product-mode rung (gridq decodes product mode only)", what,
                 m0.rung->name());
    GRIDQ_RETURN_IF_ERROR(upload_ref_codebook(d, m0));
  }
  d.kernel = std::string("reference ") +
             (m0.format == RF::kCB ? m0.rung->name() : std::string(runtime::format_name(m0.format)));
  return d;
}

std::vector<std::vector<const QMatrix*>> one(std::initializer_list<const QMatrix*> parts) { return {parts}; }

}  // namespace

size_t DevLinear::resident_bytes() const {
  return tiled.resident_bytes + ref_data.bytes() + ref_scale.bytes() + ref_codebook.bytes();
}
size_t DevExperts::resident_bytes() const {
  return gate_up.resident_bytes + down.resident_bytes + gate.resident_bytes() + up.resident_bytes() +
         down_ref.resident_bytes();
}

std::map<std::string, int> kernel_counts(const DeviceModel& dm) {
  std::map<std::string, int> n;
  auto add = [&](const DevLinear& l) {
    if (l.path != DevLinear::Path::kNone) ++n[l.kernel];
  };
  add(dm.lm_head);
  for (const DevLayer& dl : dm.layers) {
    for (const DevLinear* l :
         {&dl.qkv, &dl.q, &dl.k, &dl.v, &dl.g, &dl.o, &dl.mlp.gate_up, &dl.mlp.down, &dl.router,
          &dl.shared.gate_up, &dl.shared.down, &dl.experts.gate, &dl.experts.up, &dl.experts.down_ref})
      add(*l);
    if (dl.experts.fused)
      ++n[dl.experts.fp4 ? "fused MoE gate_up+down (tiled NVFP4_CB_K16 v2)"
                         : "fused MoE gate_up+down (tiled NVFP4_CB_K16 v2, w4a16: BF16 activations)"];
  }
  return n;
}

Expected<DevLinear> upload_linear(const std::vector<const QMatrix*>& stack, const std::string& what,
                                  bool allow_tiled) {
  std::vector<std::vector<const QMatrix*>> e;
  for (const QMatrix* m : stack) e.push_back({m});
  return upload(e, what, allow_tiled);
}

Status upload_swiglu(DevSwiglu& s, const QMatrix& gate, const QMatrix& up, const QMatrix& down,
                     const std::string& what) {
  s.inter = static_cast<int>(gate.rows);
  GRIDQ_ASSIGN_OR_RETURN(s.gate_up, upload(one({&gate, &up}), what + " gate_up", true));
  GRIDQ_ASSIGN_OR_RETURN(s.down, upload(one({&down}), what + " down", true));
  // The fused kernel reads gate rows 0..I-1 and up rows I..2I-1 as 16-row tiles: I % 16 == 0, no padding.
  const auto& m = s.gate_up.tiled.m;
  s.fused = s.gate_up.path == DevLinear::Path::kTiled && s.inter % 16 == 0 && m.rows == 2 * s.inter &&
            (m.format == WeightFormat::BF16 ||
             (m.format == WeightFormat::CB && m.k == 16 && m.layout_version == 2));
  return {};
}

Expected<DevLayer> upload_layer(const model::ModelSpec& spec, int l, const runtime::LayerWeights& lw,
                                bool routed, size_t& packed, size_t& weight_bytes) {
  const int64_t H = spec.hidden_size;
  auto count = [&](const QMatrix& m) { packed += host_bytes(m); };
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const std::string p = "layer " + std::to_string(l) + " ";
  DevLayer dl;
  std::vector<float> v;
  auto put = [&](const std::vector<float>& x) {
    const size_t off = v.size();
    v.insert(v.end(), x.begin(), x.end());
    v.resize((v.size() + 3) / 4 * 4);  // 16-byte aligned pieces
    return off;
  };
  const size_t o_in = put(lw.input_norm), o_post = put(lw.post_norm);
  const size_t o_q = L.qk_norm ? put(lw.q_norm) : 0, o_k = L.qk_norm ? put(lw.k_norm) : 0;
  const size_t o_b = lw.router_bias.empty() ? 0 : put(lw.router_bias);
  const size_t o_f = put(L.rope.inv_freq.empty() ? std::vector<float>{0.0f} : L.rope.inv_freq);
  GRIDQ_ASSIGN_OR_RETURN(dl.vecs, DeviceBuffer::alloc(v.size() * 4, p + "norms"));
  GRIDQ_RETURN_IF_ERROR(dl.vecs.upload(v.data(), v.size() * 4));
  const float* base = dl.vecs.as<float>();
  dl.input_norm = base + o_in;
  dl.post_norm = base + o_post;
  dl.q_norm = L.qk_norm ? base + o_q : nullptr;
  dl.k_norm = L.qk_norm ? base + o_k : nullptr;
  dl.router_bias = lw.router_bias.empty() ? nullptr : base + o_b;
  dl.inv_freq = base + o_f;
  for (const QMatrix* m : {&lw.q, &lw.k, &lw.v, &lw.o}) count(*m);
  if (same_kind(lw.q, lw.k) && same_kind(lw.q, lw.v)) {
    GRIDQ_ASSIGN_OR_RETURN(dl.qkv, upload(one({&lw.q, &lw.k, &lw.v}), p + "q/k/v_proj", true));
  } else {
    dl.stacked = false;
    GRIDQ_ASSIGN_OR_RETURN(dl.q, upload_linear({&lw.q}, p + "q_proj"));
    GRIDQ_ASSIGN_OR_RETURN(dl.k, upload_linear({&lw.k}, p + "k_proj"));
    GRIDQ_ASSIGN_OR_RETURN(dl.v, upload_linear({&lw.v}, p + "v_proj"));
  }
  if (L.gate != model::GateMode::kNone) {
    GRIDQ_ASSIGN_OR_RETURN(dl.g, upload_linear({&lw.g}, p + "g_proj"));
    count(lw.g);
  }
  GRIDQ_ASSIGN_OR_RETURN(dl.o, upload_linear({&lw.o}, p + "o_proj"));
  if (L.mlp == model::MlpKind::kDense) {
    GRIDQ_RETURN_IF_ERROR(upload_swiglu(dl.mlp, lw.mlp_gate, lw.mlp_up, lw.mlp_down, p + "mlp"));
    for (const QMatrix* m : {&lw.mlp_gate, &lw.mlp_up, &lw.mlp_down}) count(*m);
  } else {
    const auto& M = spec.moe;
    GRIDQ_ASSIGN_OR_RETURN(dl.router, upload_linear({&lw.router}, p + "router", false));
    count(lw.router);
    if (M.shared_intermediate > 0) {
      GRIDQ_RETURN_IF_ERROR(
          upload_swiglu(dl.shared, lw.shared_gate, lw.shared_up, lw.shared_down, p + "shared expert"));
      for (const QMatrix* m : {&lw.shared_gate, &lw.shared_up, &lw.shared_down}) count(*m);
    }
    auto k16v2 = [](const QMatrix& m) {
      return m.format == RF::kCB && m.rung && m.rung->grid == gridbook::Grid::FP4 &&
             m.rung->mode == gridbook::Mode::Product && m.rung->k == 16 && m.rung->layout_version == 2 &&
             (m.act_bits == 4 || m.act_bits == 16);  // 16: the w4a16 contract (EngineOptions)
    };
    // The fused MoE kernels: NVFP4-CB K16 v2 stacks whose rows fill 16-row tiles exactly.
    const bool k16 = k16v2(lw.expert_gate[0]) && k16v2(lw.expert_down[0]) &&
                     M.expert_intermediate % 16 == 0 && H % 16 == 0;
    std::vector<std::vector<const QMatrix*>> gu, dn;
    for (int e = 0; e < M.n_experts; ++e) {
      gu.push_back({&lw.expert_gate[static_cast<size_t>(e)], &lw.expert_up[static_cast<size_t>(e)]});
      dn.push_back({&lw.expert_down[static_cast<size_t>(e)]});
      for (const auto* m : {&lw.expert_gate[static_cast<size_t>(e)], &lw.expert_up[static_cast<size_t>(e)],
                            &lw.expert_down[static_cast<size_t>(e)]})
        count(*m);
    }
    if (k16 && routed) {
      GRIDQ_ASSIGN_OR_RETURN(DevLinear a, upload(gu, p + "experts gate_up", true));
      GRIDQ_ASSIGN_OR_RETURN(DevLinear b, upload(dn, p + "experts down", true));
      dl.experts.fused = a.path == DevLinear::Path::kTiled && b.path == DevLinear::Path::kTiled;
      dl.experts.fp4 = lw.expert_gate[0].act_bits == 4;
      dl.experts.gate_up = std::move(a.tiled);
      dl.experts.down = std::move(b.tiled);
    }
    if (!dl.experts.fused && routed) {
      std::vector<std::vector<const QMatrix*>> g, u;
      for (int e = 0; e < M.n_experts; ++e) {
        g.push_back({&lw.expert_gate[static_cast<size_t>(e)]});
        u.push_back({&lw.expert_up[static_cast<size_t>(e)]});
      }
      GRIDQ_ASSIGN_OR_RETURN(dl.experts.gate, upload(g, p + "experts gate", false));
      GRIDQ_ASSIGN_OR_RETURN(dl.experts.up, upload(u, p + "experts up", false));
      GRIDQ_ASSIGN_OR_RETURN(dl.experts.down_ref, upload(dn, p + "experts down", false));
    }
  }
  weight_bytes = dl.vecs.bytes() + dl.qkv.resident_bytes() + dl.q.resident_bytes() + dl.k.resident_bytes() +
                 dl.v.resident_bytes() + dl.g.resident_bytes() + dl.o.resident_bytes() +
                 dl.mlp.gate_up.resident_bytes() + dl.mlp.down.resident_bytes() + dl.router.resident_bytes() +
                 dl.experts.resident_bytes() + dl.shared.gate_up.resident_bytes() +
                 dl.shared.down.resident_bytes();
  return dl;
}

Expected<std::unique_ptr<DeviceModel>> upload_model(const model::ModelSpec& spec,
                                                    const runtime::ModelWeights& w) {
  auto dm = std::make_unique<DeviceModel>();
  const int64_t H = spec.hidden_size;
  size_t packed = 0;
  auto count = [&](const QMatrix& m) { packed += host_bytes(m); };
  if (w.embed.format != RF::kBF16)
    return err("embed: {} on the device (BF16 only)", runtime::format_name(w.embed.format));
  GRIDQ_ASSIGN_OR_RETURN(dm->embed,
                         DeviceBuffer::alloc(static_cast<size_t>(w.embed.rows * H) * 2, "embed_tokens"));
  GRIDQ_RETURN_IF_ERROR(dm->embed.upload(w.embed.data, dm->embed.bytes()));
  count(w.embed);
  GRIDQ_ASSIGN_OR_RETURN(dm->final_norm, DeviceBuffer::alloc(static_cast<size_t>(H) * 4, "final norm"));
  GRIDQ_RETURN_IF_ERROR(dm->final_norm.upload(w.final_norm.data(), dm->final_norm.bytes()));
  GRIDQ_ASSIGN_OR_RETURN(dm->lm_head, upload_linear({&w.lm_head}, "lm_head"));
  count(w.lm_head);
  for (int l = 0; l < spec.n_layers; ++l) {
    size_t wb = 0;
    GRIDQ_ASSIGN_OR_RETURN(DevLayer dl,
                           upload_layer(spec, l, w.layers[static_cast<size_t>(l)], true, packed, wb));
    dm->weight_bytes += wb;
    dm->layers.push_back(std::move(dl));
  }
  dm->weight_bytes += dm->embed.bytes() + dm->final_norm.bytes() + dm->lm_head.resident_bytes();
  dm->packed_bytes = packed;
  return dm;
}

}  // namespace gridq::cuda
