#include "runtime/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/cuda/attn_splits.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/forward.h"
#include "runtime/cuda/gptq/gptq_hook.h"
#include "runtime/cuda/hessian.h"
#include "runtime/cuda/kernels/sample_kernels.h"
#include "runtime/cuda/register.h"
#include "runtime/cuda/synthetic_model.h"
#include "runtime/cuda/teacher/teacher.h"

namespace gridq::cuda {
namespace {

using detail::kMaxSliceRows;
static_assert(detail::kDefaultStepRows == runtime::kCudaStepTokens,
              "the engine's prefill chunk and serve's default budget fill one default step");

size_t round16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

size_t CudaBackend::Work::bytes() const {
  size_t n = 0;
  for (const DeviceBuffer* b : {&rows, &x, &a,  &a32, &xin, &xq, &xs,  &qkv, &g,   &q,  &o,      &ob,     &y,
                                &gu,   &h, &xp, &hs,  &yd,  &z,  &eid, &ew,  &grp, &an, &logits, &partial})
    n += b->bytes();
  return n;
}

Status check_device_spec(const model::ModelSpec& S, const char* who) {
  for (const auto& L : S.layers)
    if (L.head_dim % 32 || L.head_dim > detail::kMaxHeadDim)
      return err("{}: head_dim {} is not a multiple of 32 up to {}", who, L.head_dim, detail::kMaxHeadDim);
  if (S.moe.top_k > 32 || S.moe.n_experts > 1024)
    return err("{}: MoE with {} experts top-{} (the router kernel serves ≤ 1024 experts, top-k ≤ 32)", who,
               S.moe.n_experts, S.moe.top_k);
  return {};
}

Status allocate_work(CudaBackend::Work& w, const WorkSizes& z) {
  const size_t R = z.R, LR = z.LR, A = z.A, W = z.W, Y = z.Y, G = z.G, I2 = z.I2, Ih = z.Ih, K = z.K, H = z.H,
               qw = z.qw, max_d = z.max_d;
  w.max_splits = z.max_splits;
  w.step_rows = static_cast<int>(z.R);
  w.partial_slots = static_cast<int64_t>(A * qw / max_d) * z.max_splits;
  struct B {
    DeviceBuffer* buf;
    size_t bytes;
    const char* what;
  };
  for (const B& b : {B{&w.rows, 4 * R * 4, "step rows"},
                     B{&w.x, R * H * 4, "residual"},
                     B{&w.a, R * H * 2, "normed input"},
                     B{&w.a32, R * H * 4, "normed input fp32"},
                     B{&w.xin, R * W * 2, "FP4 contract input"},
                     B{&w.xq, R * W, "FP8 codes"},
                     B{&w.xs, R * 4, "FP8 scales"},
                     B{&w.qkv, R * (z.qkv + 48) * 4, "qkv"},
                     B{&w.g, R * G * 4, "gate"},
                     B{&w.q, R * qw * 4, "q"},
                     B{&w.o, R * qw * 4, "attention output"},
                     B{&w.ob, R * qw * 2, "gated output"},
                     B{&w.y, R * Y * 4, "matrix output"},
                     B{&w.gu, R * K * I2 * 4, "gate_up"},
                     B{&w.h, R * K * Ih * 2, "swiglu"},
                     B{&w.xp, z.E > 0 ? R * H * 2 : 0, "expert input permuted"},
                     B{&w.hs, R * Ih * 2, "shared expert swiglu"},
                     B{&w.yd, R * K * H * 4, "expert outputs"},
                     B{&w.z, R * round16(z.E) * 4, "router logits"},
                     B{&w.eid, R * K * 4, "expert ids"},
                     B{&w.ew, R * K * 4, "expert weights"},
                     B{&w.grp,
                       static_cast<size_t>(grouped_moe_grp_ints(static_cast<int>(R), static_cast<int>(K),
                                                                static_cast<int>(z.E))) *
                           4,
                       "expert pairs"},
                     B{&w.an, LR * H * 2, "final norm"},
                     B{&w.logits, LR * z.lm_rows * 4, "logits"},
                     B{&w.sample_scratch, LR * z.vocab * 8, "sampling scores"},
                     B{&w.sample_rows, LR * sizeof(detail::SampleRowArgs), "sampling rows"},
                     B{&w.sample_out, LR * sizeof(detail::SampleResult), "sampling results"},
                     B{&w.sample_greedy, detail::greedy_scratch_bytes(LR), "greedy sampling"},
                     B{&w.sample_edits, 4096 * sizeof(detail::SampleEdit), "sampling edits"},
                     B{&w.partial, A * qw / max_d * static_cast<size_t>(w.max_splits) * (max_d + 2) * 4,
                       "attention splits"}}) {
    GRIDQ_ASSIGN_OR_RETURN(*b.buf, DeviceBuffer::alloc(std::max<size_t>(b.bytes, 16), b.what));
    GRIDQ_RETURN_IF_ERROR(b.buf->zero());
  }
  return {};
}

CudaBackend::~CudaBackend() {
  static_assert(kGraphRows == kMaxSliceRows, "one decode graph per decode row count");
  for (void* g : graphs_)
    if (g) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  if (stream_) (void)cudaStreamDestroy(stream_);
  if (side_) (void)cudaStreamDestroy(side_);
  if (fork_) (void)cudaEventDestroy(fork_);
  if (join_) (void)cudaEventDestroy(join_);
  if (pf_) (void)cudaStreamDestroy(pf_);
  if (pf_fork_) (void)cudaEventDestroy(pf_fork_);
  if (pf_join_) (void)cudaEventDestroy(pf_join_);
}

Expected<std::unique_ptr<CudaBackend>> CudaBackend::create(const model::ModelSpec& spec,
                                                           const runtime::ModelWeights& w,
                                                           const runtime::DeviceOptions& opts) {
  GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceModel> dm, upload_model(spec, w));
  GRIDQ_ASSIGN_OR_RETURN(auto b, from_device_model(spec, std::move(dm), opts));
  // What the start-up report needs of the host weights, which are released after the upload.
  b->meta_ = w;
  auto strip = [](runtime::QMatrix& m) { m.data = nullptr, m.row_scale = nullptr, m.codebook = nullptr; };
  runtime::for_each_matrix(b->meta_, strip);
  return b;
}

Expected<std::unique_ptr<CudaBackend>> CudaBackend::from_device_model(const model::ModelSpec& spec,
                                                                      std::unique_ptr<DeviceModel> dm,
                                                                      const runtime::DeviceOptions& opts) {
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->spec_ = spec;
  b->dm_ = std::move(dm);
  GRIDQ_RETURN_IF_ERROR(b->init(opts));
  return b;
}

Status CudaBackend::init(const runtime::DeviceOptions& opts) {
  if (!(opts.gpu_memory_utilization > 0.0 && opts.gpu_memory_utilization <= 1.0))
    return err("cuda backend: --gpu-memory-utilization {} is not in (0, 1]", opts.gpu_memory_utilization);
  if (opts.max_num_seqs < 1) return err("cuda backend: --max-num-seqs {} < 1", opts.max_num_seqs);
  const auto& S = spec_;
  GRIDQ_RETURN_IF_ERROR(check_device_spec(S, "cuda backend"));
  int max_d = 0, max_nh = 0, max_qkv = 0;
  for (const auto& L : S.layers) {
    max_d = std::max(max_d, L.head_dim);
    max_nh = std::max(max_nh, L.n_heads);
  }
  GRIDQ_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GRIDQ_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  GRIDQ_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  GRIDQ_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  GRIDQ_CUDA(cudaStreamCreateWithFlags(&pf_, cudaStreamNonBlocking));
  GRIDQ_CUDA(cudaEventCreateWithFlags(&pf_fork_, cudaEventDisableTiming));
  GRIDQ_CUDA(cudaEventCreateWithFlags(&pf_join_, cudaEventDisableTiming));
  graphs_on_ = opts.cuda_graphs;
  GRIDQ_ASSIGN_OR_RETURN(ws_, WorkspaceBuffers::create());
  GRIDQ_ASSIGN_OR_RETURN(ws_side_, WorkspaceBuffers::create());
  max_len_ = opts.max_model_len > 0 ? opts.max_model_len : S.max_position_embeddings;
  if (max_len_ < 1) return err("cuda backend: max_model_len {} < 1", max_len_);
  GRIDQ_ASSIGN_OR_RETURN(plan_, runtime::KvPlan::from_spec(S, 16, detail::kAttnSliceRows));

  // Step buffers: widest input, output and intermediate over every matrix of the model.
  size_t W = static_cast<size_t>(S.hidden_size), Y = static_cast<size_t>(S.hidden_size), G = 1, I2 = 1,
         Ih = 1;
  for (size_t l = 0; l < dm_->layers.size(); ++l) {
    const DevLayer& dl = dm_->layers[l];
    for (const DevLinear* m :
         {&dl.qkv, &dl.q, &dl.k, &dl.v, &dl.g, &dl.o, &dl.mlp.gate_up, &dl.mlp.down, &dl.router,
          &dl.shared.gate_up, &dl.shared.down, &dl.experts.gate, &dl.experts.up, &dl.experts.down_ref}) {
      W = std::max(W, static_cast<size_t>(m->cols));
      Y = std::max(Y, static_cast<size_t>(m->out_rows()));
    }
    max_qkv = std::max({max_qkv, dl.qkv.out_rows(), dl.q.out_rows() + dl.k.out_rows() + dl.v.out_rows()});
    G = std::max(G, static_cast<size_t>(dl.g.out_rows()));
    I2 = std::max({I2, static_cast<size_t>(dl.mlp.gate_up.out_rows()),
                   static_cast<size_t>(dl.shared.gate_up.out_rows()),
                   static_cast<size_t>(2 * S.moe.expert_intermediate)});
    Ih = std::max({Ih, static_cast<size_t>(dl.mlp.inter), static_cast<size_t>(dl.shared.inter),
                   static_cast<size_t>(S.moe.expert_intermediate)});
  }
  // R: rows of a step; LR: logit rows of a step (sampling's per-row scratch is vocabulary-wide); A: rows of
  // one attention slice.
  const size_t R = static_cast<size_t>(detail::step_rows_for(opts.max_num_batched_tokens)),
               LR = kMaxSliceRows, A = kMaxSliceRows, K = static_cast<size_t>(std::max(1, S.moe.top_k)),
               H = static_cast<size_t>(S.hidden_size);
  const size_t qw = static_cast<size_t>(max_nh) * static_cast<size_t>(max_d);
  work_ = std::make_unique<Work>();
  WorkSizes ws;
  ws.R = R, ws.LR = LR, ws.A = A, ws.W = W, ws.Y = Y, ws.G = G, ws.I2 = I2, ws.Ih = Ih, ws.K = K, ws.H = H;
  ws.qkv = static_cast<size_t>(max_qkv), ws.qw = qw, ws.max_d = static_cast<size_t>(max_d);
  ws.E = static_cast<size_t>(std::max(1, S.moe.n_experts));
  ws.lm_rows = static_cast<size_t>(dm_->lm_head.out_rows()), ws.vocab = static_cast<size_t>(S.vocab_size);
  ws.max_splits = 0;  // the attention split buffer is sized below, beside the KV pages
  GRIDQ_RETURN_IF_ERROR(allocate_work(*work_, ws));
  // KV: what is left of gpu_memory_utilization × total after the weights and the step buffers.
  size_t free_b = 0, total_b = 0;
  GRIDQ_CUDA(cudaMemGetInfo(&free_b, &total_b));
  max_seqs_ = opts.max_num_seqs;
  max_pages_per_seq_ = static_cast<int>(std::max<int64_t>(1, plan_.pages_for(max_len_)));
  const int64_t table_bytes = static_cast<int64_t>(max_seqs_) * max_pages_per_seq_ * 4;
  const int64_t budget = static_cast<int64_t>(opts.gpu_memory_utilization * static_cast<double>(total_b)) -
                         static_cast<int64_t>(total_b - free_b) - table_bytes - (int64_t{256} << 20);
  // Ring snapshots (cuda_snapshots.cpp): four per sequence slot (two a turn: prompt end, answer end; a turn's
  // must not push out those of users not yet readmitted), at most a quarter of the KV budget; none without
  // both kinds of layer (no pages to share or no rings to rebuild). An eighth gave an H100 55 snapshots for
  // 32 agent users, and their TTFT grew from 0.7 to 2.7 s over 8 turns as snapshots were evicted; a quarter
  // (110) kept it at 0.73-0.77 s with 320k tokens of pages left (session 31).
  const int64_t snap_b = init_ring_layers();
  int n_snaps = 0;
  if (opts.prefix_caching && snap_b > 0 && plan_.n_full > 0 && budget > 0)
    n_snaps = static_cast<int>(std::min<int64_t>(4LL * max_seqs_, budget / 4 / snap_b));
  // The attention split buffer: for max_len, or, when the KV pool beside it holds fewer tokens (no
  // sequence outgrows the pool), for what the pool holds (1M positions of Laguna-S-2.1 would take 6.5 GB).
  const int64_t slot_b = attn_split_slot_bytes(S);
  const auto split_bytes = [&](int n) { return attn_split_slots(S, n) * slot_b; };
  const auto kv_tokens = [&](int64_t b) -> int64_t {
    auto c = plan_.capacity(b, max_seqs_);
    return c ? c->tokens : 0;
  };
  const int64_t kv_budget = budget - n_snaps * snap_b;
  const int ctx_splits = plan_.n_full > 0 ? attn_ctx_splits(max_len_, kv_budget, kv_tokens, split_bytes)
                                          : attn_splits_for(max_len_);
  work_->max_splits = ctx_splits;
  work_->partial_slots = attn_split_slots(S, ctx_splits);
  GRIDQ_ASSIGN_OR_RETURN(
      work_->partial, DeviceBuffer::alloc(static_cast<size_t>(split_bytes(ctx_splits)), "attention splits"));
  GRIDQ_RETURN_IF_ERROR(work_->partial.zero());
  GRIDQ_ASSIGN_OR_RETURN(auto cap, plan_.capacity(kv_budget - split_bytes(ctx_splits), max_seqs_));
  // --num-gpu-blocks-override: at most that many pages (never more than the memory holds).
  if (opts.num_gpu_blocks_override > 0 && cap.pages > opts.num_gpu_blocks_override) {
    cap.pages = opts.num_gpu_blocks_override;
    cap.tokens = cap.pages * plan_.page_tokens;
    cap.page_pool_bytes = cap.pages * plan_.page_bytes;
  }
  // No more pages than max_num_seqs sequences of max_model_len can hold: a second engine in the same process
  // (eval --teacher) then finds the memory the first does not need.
  const int64_t most = static_cast<int64_t>(max_seqs_) * max_pages_per_seq_;
  if (cap.pages > most) {
    cap.pages = most;
    cap.tokens = most * plan_.page_tokens;
    cap.page_pool_bytes = most * plan_.page_bytes;
  }
  GRIDQ_ASSIGN_OR_RETURN(
      pages_,
      DeviceBuffer::alloc(static_cast<size_t>(std::max<int64_t>(cap.page_pool_bytes, 16)), "KV pages"));
  GRIDQ_ASSIGN_OR_RETURN(
      rings_,
      DeviceBuffer::alloc(static_cast<size_t>(std::max<int64_t>(cap.ring_pool_bytes, 16)), "KV rings"));
  // Zeroed: a page is only read at positions its sequence wrote, but freed device memory can hold NaN bytes.
  GRIDQ_RETURN_IF_ERROR(pages_.zero());
  GRIDQ_RETURN_IF_ERROR(rings_.zero());
  GRIDQ_ASSIGN_OR_RETURN(
      snaps_,
      DeviceBuffer::alloc(static_cast<size_t>(std::max<int64_t>(n_snaps * snap_b, 16)), "ring snapshots"));
  snap_.assign(static_cast<size_t>(n_snaps), RingSnapshot{});
  GRIDQ_ASSIGN_OR_RETURN(page_table_, DeviceBuffer::alloc(static_cast<size_t>(table_bytes), "KV page table"));
  GRIDQ_RETURN_IF_ERROR(page_table_.zero());
  pool_ = runtime::PagePool(cap.pages, plan_.page_tokens, 0);
  pool_.set_caching(false);  // until set_prefix_caching(true) (serve turns it on by default)
  reach_ = runtime::sliding_reach(S);
  for (int s = max_seqs_ - 1; s >= 0; --s) free_slots_.push_back(s);
  cudaDeviceProp prop{};
  GRIDQ_CUDA(cudaGetDeviceProperties(&prop, 0));
  mem_.weights = dm_->weight_bytes;
  mem_.packed = dm_->packed_bytes;
  mem_.kv_pages = static_cast<size_t>(cap.page_pool_bytes);
  mem_.kv_rings = static_cast<size_t>(cap.ring_pool_bytes);
  mem_.kv_snapshots = static_cast<size_t>(n_snaps * snap_b);
  mem_.snapshots = n_snaps;
  mem_.workspace = work_->bytes();
  for (const WorkspaceBuffers* b : {&ws_, &ws_side_})
    mem_.workspace += b->counters.bytes() + b->partials.bytes() + b->barrier.bytes();
  mem_.kv_tokens = cap.tokens;
  mem_.max_seqs = max_seqs_;
  mem_.device = prop.name;
  // The memsets and copies above ran on the legacy default stream, which a non-blocking stream does not wait
  // for: finish them before the first step touches the KV pools.
  GRIDQ_CUDA(cudaDeviceSynchronize());
  return {};
}

Status CudaBackend::randomize_kv_for_bench(uint64_t seed) {
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(pages_.as<uint16_t>(), pages_.bytes() / 2, 0.5f, seed, stream_));
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(rings_.as<uint16_t>(), rings_.bytes() / 2, 0.5f, seed + 1, stream_));
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  return {};
}

std::string CudaBackend::memory_report() const {
  auto gb = [](size_t b) { return fmt::format("{:.3f} GB", static_cast<double>(b) / 1e9); };
  return fmt::format(
      "{}: weights {} resident ({} packed, {:+.2f}%), KV pages {} ({} tokens of full-layer KV), "
      "KV rings {} ({} sequences × {:.1f} MiB), ring snapshots {} ({}), step workspace {} ({} rows a step)",
      mem_.device, gb(mem_.weights), gb(mem_.packed),
      mem_.packed ? 100.0 * (static_cast<double>(mem_.weights) / static_cast<double>(mem_.packed) - 1.0)
                  : 0.0,
      gb(mem_.kv_pages), mem_.kv_tokens, gb(mem_.kv_rings), mem_.max_seqs,
      static_cast<double>(plan_.ring_bytes_per_seq) / (1 << 20), gb(mem_.kv_snapshots), mem_.snapshots,
      gb(mem_.workspace), work_ ? work_->step_rows : 0);
}

std::vector<std::string> CudaBackend::kernel_report() const {
  std::vector<std::string> out;
  for (const auto& [name, n] : kernel_counts(*dm_)) out.push_back(fmt::format("{} ({} on cuda)", name, n));
  return out;
}

std::map<std::string, double> CudaBackend::take_phase_ms() { return std::exchange(phase_ms_, {}); }

// ---- registration (runtime/device.h) ----

namespace {

runtime::CudaProbe probe() {
  runtime::CudaProbe p;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    p.description = e != cudaSuccess ? std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")"
                                     : "no CUDA device is visible";
    (void)cudaGetLastError();
    return p;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    p.description = "cudaGetDeviceProperties failed";
    return p;
  }
  const std::string what = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                           std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) +
                           " GiB)";
  // The kernels are built for sm_90a (Hopper) only; other GPUs have no kernel image here.
  if (prop.major != 9 || prop.minor != 0) {
    p.description = what + ": this gridq has kernels for sm_90a (Hopper) only";
    return p;
  }
  p.usable = true;
  p.description = what;
  return p;
}

}  // namespace

void register_backend() {
  runtime::CudaBackendHooks h;
  h.probe = probe;
  h.create = [](const model::ModelSpec& spec, const runtime::ModelWeights& w, std::shared_ptr<void>,
                const runtime::DeviceOptions& o) -> Expected<std::unique_ptr<runtime::Backend>> {
    GRIDQ_ASSIGN_OR_RETURN(auto b, CudaBackend::create(spec, w, o));
    return std::unique_ptr<runtime::Backend>(std::move(b));
  };
  h.synthetic = [](const std::string& name, uint64_t seed, int vocab,
                   const runtime::DeviceOptions& o) -> Expected<std::unique_ptr<runtime::Backend>> {
    GRIDQ_ASSIGN_OR_RETURN(model::ModelSpec spec, synthetic_spec(name));
    if (vocab > 0) spec.vocab_size = vocab;
    GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<DeviceModel> dm, synthetic_device_model(spec, seed));
    GRIDQ_ASSIGN_OR_RETURN(auto b, CudaBackend::from_device_model(spec, std::move(dm), o));
    return std::unique_ptr<runtime::Backend>(std::move(b));
  };
  h.hessian = make_host_rows_hessian;
  h.cb_fp4 = cb_fp4_host;
  h.cb_fp4_batch = cb_fp4_batch_host;
  h.fp8_gptq = fp8_gptq_host;
  h.half_trace = half_trace_host;
  h.teacher = [](const model::ModelSpec& spec) -> Expected<std::unique_ptr<runtime::DeviceTeacher>> {
    GRIDQ_ASSIGN_OR_RETURN(auto t, Teacher::create(spec));
    return std::unique_ptr<runtime::DeviceTeacher>(std::move(t));
  };
  runtime::register_cuda_backend(std::move(h));
}

}  // namespace gridq::cuda
