// The teacher's steps (teacher.h): norm → attention → o_proj → norm → MLP for whole sequences, the captured
// rows brought back to the host as each step finishes, the hooks fed once per call in cpu::decoder_layer's
// order.
#include "runtime/cuda/teacher/teacher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/numerics.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/forward_ops.h"

namespace gridq::cuda {

namespace {

using detail::kMaxStepRows;

size_t round16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

void widen_bf16(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

Teacher::~Teacher() {
  if (s_) (void)cudaStreamDestroy(s_);
}

Expected<std::unique_ptr<Teacher>> Teacher::create(const model::ModelSpec& spec) {
  GRIDQ_RETURN_IF_ERROR(check_device_spec(spec, "cuda teacher"));
  std::unique_ptr<Teacher> t(new Teacher());
  t->spec_ = spec;
  GRIDQ_CUDA(cudaStreamCreateWithFlags(&t->s_, cudaStreamNonBlocking));
  GRIDQ_ASSIGN_OR_RETURN(t->ws_, WorkspaceBuffers::create());
  return t;
}

void Teacher::note_peak() {
  size_t b = w_ ? w_->bytes() : 0;
  for (const DeviceBuffer* d : {&kv_, &page_table_, &pairs_, &xg_, &hg_, &yg_}) b += d->bytes();
  peak_ = std::max<int64_t>(peak_, static_cast<int64_t>(b + layer_bytes_));
}

Status Teacher::size_for(int64_t S) {
  if (S == sized_S_) return {};
  const auto& sp = spec_;
  const auto& M = sp.moe;
  size_t qw = 1, max_d = 1, qkv = 1, kvw = 1, ring = 1, D = 1;
  for (const auto& L : sp.layers) {
    qw = std::max(qw, static_cast<size_t>(L.n_heads) * L.head_dim);
    max_d = std::max(max_d, static_cast<size_t>(L.head_dim));
    kvw = std::max(kvw, static_cast<size_t>(L.n_kv_heads) * L.head_dim);
    qkv = std::max(qkv, round16(static_cast<size_t>(L.n_heads + 2 * L.n_kv_heads) * L.head_dim));
    D = std::max(D, static_cast<size_t>(L.dense_intermediate));
    if (L.attn == model::AttnKind::kSliding)
      ring = std::max(ring, static_cast<size_t>(L.window) + detail::kAttnSliceRows);
  }
  const size_t H = static_cast<size_t>(sp.hidden_size), E = static_cast<size_t>(std::max(1, M.n_experts));
  const size_t K = static_cast<size_t>(std::max(1, M.top_k));
  const size_t inter = std::max(
      {D, static_cast<size_t>(M.shared_intermediate), static_cast<size_t>(M.expert_intermediate), size_t{1}});
  WorkSizes z;
  z.R = kMaxStepRows, z.LR = 0, z.A = detail::kMaxSliceRows;
  z.W = std::max({H, qw, inter}), z.Y = round16(std::max({H, qw, 2 * inter, E}));
  z.G = round16(qw), z.I2 = round16(2 * inter), z.Ih = inter, z.K = K, z.H = H;
  z.qkv = qkv, z.qw = qw, z.max_d = max_d, z.E = E;
  // Room for a whole attention slice's splits (forward_layers.cpp cuts a slice whose splits do not fit).
  z.max_splits = static_cast<int>((S + detail::kAttnSplitKeys - 1) / detail::kAttnSplitKeys) *
                 (detail::kAttnSliceRows / detail::kMaxSliceRows);
  w_ = std::make_unique<CudaBackend::Work>();
  GRIDQ_RETURN_IF_ERROR(allocate_work(*w_, z));
  // KV: one step's sequences, full layers in 16-token pages (the serving layout: page p of slot s is page
  // s·max_pages + p), sliding layers in rings of window + kAttnSliceRows slots.
  seqs_per_step_ = static_cast<int>(kMaxStepRows / S);
  max_pages_ = static_cast<int>((S + 15) / 16);
  const size_t slots = static_cast<size_t>(seqs_per_step_);
  const size_t full = slots * static_cast<size_t>(max_pages_) * 2 * 16 * kvw, rings = slots * 2 * ring * kvw;
  GRIDQ_ASSIGN_OR_RETURN(kv_, DeviceBuffer::alloc(std::max(full, rings) * 2, "teacher KV"));
  std::vector<int> table(slots * static_cast<size_t>(max_pages_));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
  GRIDQ_ASSIGN_OR_RETURN(page_table_, DeviceBuffer::alloc(table.size() * 4, "teacher page table"));
  GRIDQ_RETURN_IF_ERROR(page_table_.upload(table.data(), table.size() * 4));
  const size_t P = kMaxStepRows * K;
  GRIDQ_ASSIGN_OR_RETURN(pairs_, DeviceBuffer::alloc(2 * P * 4, "teacher expert pairs"));
  if (M.n_experts > 0) {
    GRIDQ_ASSIGN_OR_RETURN(xg_, DeviceBuffer::alloc(P * H * 2, "teacher expert inputs"));
    GRIDQ_ASSIGN_OR_RETURN(hg_, DeviceBuffer::alloc(P * static_cast<size_t>(M.expert_intermediate) * 2,
                                                    "teacher expert SwiGLU"));
    GRIDQ_ASSIGN_OR_RETURN(yg_, DeviceBuffer::alloc(P * round16(H) * 4, "teacher expert outputs"));
  }
  sized_S_ = S;
  note_peak();
  return {};
}

Status Teacher::load_layer(int l, const runtime::LayerWeights& lw) {
  // The previous layer leaves the device first: one layer's weights at a time.
  dl_ = DevLayer{};
  experts_.clear();
  layer_ = -1;
  layer_bytes_ = 0;
  size_t packed = 0, wb = 0;
  GRIDQ_ASSIGN_OR_RETURN(dl_, upload_layer(spec_, l, lw, false, packed, wb));
  const auto& L = spec_.layers[static_cast<size_t>(l)];
  if (L.mlp == model::MlpKind::kMoe) {
    const auto E = static_cast<size_t>(spec_.moe.n_experts);
    if (lw.expert_gate.size() != E || lw.expert_up.size() != E || lw.expert_down.size() != E)
      return err("cuda teacher: layer {} has {} / {} / {} expert matrices, the spec {}", l,
                 lw.expert_gate.size(), lw.expert_up.size(), lw.expert_down.size(), E);
    experts_.resize(E);
    // Experts in parallel: each is host relayouts of megabytes (fresh pages) then a copy; one after another
    // they took seconds per layer.
    std::vector<Status> bad(E);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t e = 0; e < E; ++e)
      bad[e] = upload_swiglu(experts_[e], lw.expert_gate[e], lw.expert_up[e], lw.expert_down[e],
                             fmt::format("layer {} expert {}", l, e));
    for (size_t e = 0; e < E; ++e) {
      GRIDQ_RETURN_IF_ERROR(bad[e]);
      wb += experts_[e].gate_up.resident_bytes() + experts_[e].down.resident_bytes();
    }
  }
  layer_bytes_ = wb;
  layer_ = l;
  note_peak();
  return {};
}

Status Teacher::layer(int l, const runtime::LayerWeights& lw, int64_t n_seq, int64_t S, float* x,
                      const runtime::cpu::LayerHooks* hooks) {
  if (l < 0 || l >= spec_.n_layers) return err("cuda teacher: layer {} outside [0, {})", l, spec_.n_layers);
  if (n_seq <= 0 || S <= 0) return err("cuda teacher: {} sequences of {} tokens", n_seq, S);
  if (S > kMaxStepRows)
    return err("cuda teacher: sequences of {} tokens exceed one step of {} rows (use a shorter seq_len)", S,
               kMaxStepRows);
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  GRIDQ_RETURN_IF_ERROR(size_for(S));
  if (l != layer_) GRIDQ_RETURN_IF_ERROR(load_layer(l, lw));
  seconds_.upload += since(t0);
  t0 = std::chrono::steady_clock::now();
  const auto& L = spec_.layers[static_cast<size_t>(l)];
  const auto& M = spec_.moe;
  const bool moe = L.mlp == model::MlpKind::kMoe;
  const size_t T = static_cast<size_t>(n_seq * S), H = static_cast<size_t>(spec_.hidden_size);
  const size_t K = static_cast<size_t>(moe ? M.top_k : 0);
  const size_t U =
      moe ? static_cast<size_t>(M.shared_intermediate) : static_cast<size_t>(L.dense_intermediate);
  // The host rows are kept from call to call (a layer is several calls of one size): the steps write every
  // element before the hooks read it; the experts' lists start empty.
  Chunk& ck = ck_;
  ck.a1.resize(T * H), ck.hm.resize(T * H), ck.a2.resize(T * H), ck.out.resize(T * H);
  ck.o.resize(T * static_cast<size_t>(L.n_heads) * L.head_dim);
  ck.u.resize(T * U);
  ck.idx.resize(T * K), ck.wt.resize(T * K);
  ck.ex.resize(moe ? static_cast<size_t>(M.n_experts) : 0);
  for (auto& e : ck.ex) e.rows.clear(), e.wt.clear(), e.u.clear();
  for (int64_t s0 = 0; s0 < n_seq; s0 += seqs_per_step_) {
    const int ns = static_cast<int>(std::min<int64_t>(seqs_per_step_, n_seq - s0));
    GRIDQ_RETURN_IF_ERROR(step(l, s0, ns, S, x, ck));
  }
  seconds_.steps += since(t0);
  t0 = std::chrono::steady_clock::now();
  if (hooks) {
    const auto Ti = static_cast<int64_t>(T);
    if (hooks->attn_in) hooks->attn_in(ck.a1.data(), x, Ti);
    if (hooks->o_in) hooks->o_in(ck.o.data(), Ti);
    if (hooks->mlp_in) hooks->mlp_in(ck.a2.data(), ck.hm.data(), Ti);
    if (!moe && hooks->dense_down_in) hooks->dense_down_in(ck.u.data(), Ti);
    if (moe && U > 0 && hooks->shared_down_in) hooks->shared_down_in(ck.u.data(), Ti);
    if (moe && hooks->routing) hooks->routing(ck.idx.data(), ck.wt.data(), Ti);
    // The experts' hooks touch their own expert's state only (LayerHooks::expert): several at once.
    const auto n_ex = static_cast<int64_t>(moe && hooks->expert ? ck.ex.size() : 0);
#pragma omp parallel
    {
      std::vector<float> xr;
#pragma omp for schedule(dynamic, 1)
      for (int64_t e = 0; e < n_ex; ++e) {
        const auto& ex = ck.ex[static_cast<size_t>(e)];
        if (ex.rows.empty()) continue;
        xr.resize(ex.rows.size() * H);
        for (size_t i = 0; i < ex.rows.size(); ++i)
          std::memcpy(xr.data() + i * H, ck.a2.data() + static_cast<size_t>(ex.rows[i]) * H, H * 4);
        hooks->expert(static_cast<int>(e), ex.rows, ex.wt, xr.data(), ex.u.data());
      }
    }
  }
  std::memcpy(x, ck.out.data(), T * H * 4);
  seconds_.hooks += since(t0);
  return {};
}

Status Teacher::step(int l, int64_t s0, int ns, int64_t S, const float* x, Chunk& ck) {
  const auto& L = spec_.layers[static_cast<size_t>(l)];
  const auto& M = spec_.moe;
  const bool moe = L.mlp == model::MlpKind::kMoe;
  const int T = ns * static_cast<int>(S), H = spec_.hidden_size, qw = L.n_heads * L.head_dim;
  const size_t r0 = static_cast<size_t>(s0 * S);
  CudaBackend::Work& w = *w_;
  // w.rows = [ids | pos | slot | kv_write] (ids unused: the rows come from x).
  std::vector<int> rows(4 * static_cast<size_t>(T), 0), pos(static_cast<size_t>(T)),
      slot(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    pos[t] = static_cast<int>(t % S), slot[t] = static_cast<int>(t / S);
    rows[T + t] = pos[t], rows[2 * T + t] = slot[t], rows[3 * T + t] = 1;
  }
  GRIDQ_CUDA(cudaMemcpyAsync(w.rows.as(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice, s_));
  GRIDQ_CUDA(
      cudaMemcpyAsync(w.x.as(), x + r0 * H, static_cast<size_t>(T) * H * 4, cudaMemcpyHostToDevice, s_));
  CudaBackend::PhaseTimer timer;
  fwd::Ctx c{spec_,      w,       ws_,
             s_,         T,       {w.rows.as<int>() + T, w.rows.as<int>() + 2 * T, w.rows.as<int>() + 3 * T},
             pos.data(), &timer,  fwd::attention_warps(pos, slot),
             nullptr,    nullptr, nullptr,
             nullptr,    {}};
  auto get = [&](const DeviceBuffer& b, float* dst, size_t n) -> Status {
    GRIDQ_CUDA(cudaMemcpyAsync(dst, b.as(), n * 4, cudaMemcpyDeviceToHost, s_));
    return {};
  };
  auto get_bf16 = [&](const DeviceBuffer& b, float* dst, size_t n) -> Status {
    ck.bf.resize(n);
    GRIDQ_CUDA(cudaMemcpyAsync(ck.bf.data(), b.as(), n * 2, cudaMemcpyDeviceToHost, s_));
    GRIDQ_CUDA(cudaStreamSynchronize(s_));
    widen_bf16(ck.bf.data(), n, dst);
    return {};
  };
  const size_t TH = static_cast<size_t>(T) * H;
  // Attention.
  GRIDQ_RETURN_IF_ERROR(fwd::norm(c, dl_.input_norm, fwd::attention_contracts(dl_), w.a32.as<float>()));
  GRIDQ_RETURN_IF_ERROR(get(w.a32, ck.a1.data() + r0 * H, TH));
  detail::KvView kv;
  kv.base = kv_.as<uint16_t>();
  kv.kvw = L.n_kv_heads * L.head_dim;
  if (L.attn == model::AttnKind::kSliding) {
    const int ring = L.window + detail::kAttnSliceRows;
    kv.v_off = static_cast<long long>(ring) * kv.kvw, kv.page_elems = 2 * kv.v_off;
    kv.page_tokens = ring, kv.sliding = 1;
  } else {
    kv.v_off = 16LL * kv.kvw, kv.page_elems = 2 * kv.v_off;
    kv.page_tokens = 16, kv.page_table = page_table_.as<int>(), kv.max_pages = max_pages_;
  }
  GRIDQ_RETURN_IF_ERROR(fwd::attention_gated(c, dl_, L, kv));
  GRIDQ_RETURN_IF_ERROR(get_bf16(w.ob, ck.o.data() + r0 * qw, static_cast<size_t>(T) * qw));
  const LinearScratch scratch{w.xin.as<uint16_t>(), w.xq.as<uint8_t>(), w.xs.as<float>(), &c.cc};
  GRIDQ_RETURN_IF_ERROR(apply_linear_residual(dl_.o, w.ob.as<uint16_t>(), T, w.x.as<float>(), H,
                                              w.y.as<float>(), scratch, ws_.ws, s_));
  GRIDQ_RETURN_IF_ERROR(get(w.x, ck.hm.data() + r0 * H, TH));
  // MLP.
  const bool shared = moe && M.shared_intermediate > 0;
  GRIDQ_RETURN_IF_ERROR(fwd::norm(c, dl_.post_norm, fwd::mlp_contracts(dl_, moe, shared), w.a32.as<float>()));
  GRIDQ_RETURN_IF_ERROR(get(w.a32, ck.a2.data() + r0 * H, TH));
  if (!moe) {
    GRIDQ_RETURN_IF_ERROR(
        fwd::swiglu_mlp(c, dl_.mlp, w.a.as<uint16_t>(), w.h.as<uint16_t>(), w.x.as<float>()));
    const size_t D = static_cast<size_t>(L.dense_intermediate);
    GRIDQ_RETURN_IF_ERROR(get_bf16(w.h, ck.u.data() + r0 * D, static_cast<size_t>(T) * D));
  } else {
    if (shared) {
      GRIDQ_RETURN_IF_ERROR(fwd::swiglu_mlp(c, dl_.shared, w.a.as<uint16_t>(), w.hs.as<uint16_t>(), nullptr));
      const size_t Is = static_cast<size_t>(M.shared_intermediate);
      GRIDQ_RETURN_IF_ERROR(get_bf16(w.hs, ck.u.data() + r0 * Is, static_cast<size_t>(T) * Is));
    }
    GRIDQ_RETURN_IF_ERROR(fwd::route(c, dl_));
    const size_t K = static_cast<size_t>(M.top_k);
    GRIDQ_CUDA(cudaMemcpyAsync(ck.idx.data() + r0 * K, w.eid.as(), T * K * 4, cudaMemcpyDeviceToHost, s_));
    GRIDQ_RETURN_IF_ERROR(get(w.ew, ck.wt.data() + r0 * K, T * K));
    GRIDQ_CUDA(cudaStreamSynchronize(s_));
    GRIDQ_RETURN_IF_ERROR(experts_step(static_cast<int64_t>(r0), T, ck));
    const long long ld_shared = shared ? dl_.shared.down.out_rows() : 0;
    GQ_LAUNCH(
        detail::raw_moe_combine(w.yd.as<float>(), w.ew.as<float>(), T, M.top_k, H, M.routed_scaling,
                                shared ? w.y.as<float>() : nullptr, ld_shared, true, w.x.as<float>(), s_),
        "moe combine + residual add");
  }
  GRIDQ_RETURN_IF_ERROR(get(w.x, ck.out.data() + r0 * H, TH));
  GRIDQ_CUDA(cudaStreamSynchronize(s_));
  return {};
}

}  // namespace gridq::cuda
