#include "runtime/cpu/cpu_backend.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>

#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {

Expected<std::unique_ptr<CpuBackend>> CpuBackend::create(model::ModelSpec spec, ModelWeights weights,
                                                         std::shared_ptr<void> keepalive, CpuOptions opts) {
  GRIDQ_RETURN_IF_ERROR(validate_weights(spec, weights));
  if (opts.threads > 0) omp_set_num_threads(opts.threads);
  if (opts.kv_pages < 0) return err("cpu backend: kv_pages {} is negative", opts.kv_pages);
  if (opts.page_tokens < 1) return err("cpu backend: page_tokens {} < 1", opts.page_tokens);
  if (opts.kernels == CpuKernels::kBf16 && !have_avx512_bf16())
    return err(
        "cpu backend: the bf16 kernels need AVX512-BF16 (vdpbf16ps), which this CPU does not have; "
        "use the reference kernels");
  // The forward's temporaries (per-expert inputs, attention scores, up to tens of MiB a prefill chunk) come
  // from glibc's heap and go back to it, not to the kernel: with the defaults, buffers past the dynamic mmap
  // threshold were mapped fresh and unmapped per call, and the heap top trimmed, so every prefill chunk paid
  // page faults and zero-filling again (measured: a 514-token prefill at 2 threads 6,146 -> 6,776 tok/s).
  // Allocations above 32 MiB are still mapped on their own and returned on free.
  static const bool heap_kept = [] {
    return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  }();
  (void)heap_kept;
  std::unique_ptr<CpuBackend> b(new CpuBackend());
  b->spec_ = std::move(spec);
  b->w_ = std::move(weights);
  if (opts.kernels == CpuKernels::kBf16) {  // the one place that says which matrices take the fast path
    for_each_matrix(b->w_, [](QMatrix& m) { m.cpu_bf16_dot = m.format != WeightFormat::kF32; });
    for (LayerWeights& l : b->w_.layers) l.router.cpu_bf16_dot = false;
  }
  b->keepalive_ = std::move(keepalive);
  b->opts_ = opts;
  GRIDQ_ASSIGN_OR_RETURN(b->weight_copy_, place_weights(b->w_, opts.weight_pages, mem_available_bytes()));
  // The KV cache in BF16 on the fast path (layer_ops.h LayerCache::bf16: half the bytes a long-context decode
  // step reads), where its kernels apply (AVX-512, head_dim a multiple of 16); fp32 otherwise.
  b->kv_bf16_ = opts.kernels == CpuKernels::kBf16 && have_avx512();
  for (const auto& L : b->spec_.layers) b->kv_bf16_ = b->kv_bf16_ && L.head_dim % 16 == 0;
  // One page: [K | V] of page_tokens positions per full layer, layers in order (kv_plan.h's layout; fp32 or
  // BF16 elements). The salt keys the prefix cache to this model's shapes and KV type (the pool lives in this
  // backend).
  uint64_t salt = 0x6b76'6670'3332ull;  // "kv fp32"
  auto fold = [&](uint64_t v) { salt = (salt ^ v) * 0x100000001B3ull; };
  fold(static_cast<uint64_t>(b->spec_.vocab_size));
  fold(static_cast<uint64_t>(b->spec_.hidden_size));
  fold(static_cast<uint64_t>(opts.kernels));  // KV written by other kernels is other bits
  fold(b->kv_bf16_ ? 16 : 32);
  int64_t page_elems = 0;
  for (const auto& L : b->spec_.layers) {
    const int64_t kvw = static_cast<int64_t>(L.n_kv_heads) * L.head_dim;
    fold(static_cast<uint64_t>(kvw) * 4 + (L.attn == model::AttnKind::kFull ? 1 : 2));
    if (L.attn == model::AttnKind::kFull) {
      b->k_off_.push_back(page_elems);
      page_elems += 2 * opts.page_tokens * kvw;
    } else {
      b->k_off_.push_back(-1);
    }
  }
  b->page_floats_ = b->kv_bf16_ ? (page_elems + 1) / 2 : page_elems;
  b->reach_ = sliding_reach(b->spec_);
  b->pool_ = PagePool(opts.kv_pages, opts.page_tokens, salt);
  b->pool_.set_caching(false);  // `gridq serve` turns it on (--enable-prefix-caching)
  return b;
}

int64_t CpuBackend::pages_for(int64_t tokens) const {
  if (page_floats_ == 0 || tokens <= 0) return 0;
  return (tokens + opts_.page_tokens - 1) / opts_.page_tokens;
}

KvPageStats CpuBackend::kv_pages() const {
  KvPageStats k;
  k.page_tokens = opts_.page_tokens;
  k.total = opts_.kv_pages > 0 ? pool_.total() : -1;
  k.used = pool_.used();
  k.cached = pool_.cached();
  return k;
}

int64_t CpuBackend::kv_pages_needed(SeqId id, int64_t new_len) const {
  auto it = seqs_.find(id);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.pages.size());
  return std::max<int64_t>(0, pages_for(new_len) - have);
}

Status CpuBackend::set_prefix_caching(bool on) {
  pool_.set_caching(on);
  return {};
}

Expected<PrefixHit> CpuBackend::attach_prefix(SeqId id, std::span<const int32_t> tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return err("cpu backend: attach_prefix on unknown sequence {}", id);
  SeqState& s = it->second;
  if (s.len != 0 || !s.pages.empty())
    return err("cpu backend: attach_prefix on sequence {} that already holds {} tokens", id, s.len);
  PrefixHit hit;
  if (tokens.size() < 2 || page_floats_ == 0) return hit;
  const int64_t max_pages = static_cast<int64_t>(tokens.size() - 1) / opts_.page_tokens;
  s.pages = pool_.match(tokens, max_pages, &s.chain);
  s.committed = s.pages.size();
  hit = prefix_hit(s.pages.size(), opts_.page_tokens, reach_);
  s.floor = hit.cached;
  s.len = hit.resume;
  s.hist.assign(tokens.begin(), tokens.begin() + hit.resume);
  return hit;
}

Status CpuBackend::grow_pages(std::span<const BatchItem> items, std::span<SeqState* const> state) {
  int64_t need = 0;
  for (size_t i = 0; i < items.size(); ++i)
    need += std::max<int64_t>(0, pages_for(state[i]->len + static_cast<int64_t>(items[i].tokens.size())) -
                                     static_cast<int64_t>(state[i]->pages.size()));
  if (need > pool_.available()) {
    if (opts_.kv_pages > 0)
      return err(
          "cpu backend: the KV cache is full: the step needs {} new pages of {} tokens, {} of {} are free "
          "(--num-gpu-blocks-override)",
          need, opts_.page_tokens, pool_.available(), pool_.total());
    pool_.grow(std::max(need - pool_.available(), pool_.total()));  // no budget: grow on demand
  }
  page_mem_.resize(static_cast<size_t>(pool_.total()));
  for (size_t i = 0; i < items.size(); ++i) {
    SeqState& s = *state[i];
    const int64_t want = pages_for(s.len + static_cast<int64_t>(items[i].tokens.size()));
    while (static_cast<int64_t>(s.pages.size()) < want) {
      const int p = pool_.allocate();  // cannot fail: counted above
      auto& mem = page_mem_[static_cast<size_t>(p)];
      if (mem.empty()) mem.assign(static_cast<size_t>(page_floats_), 0.0f);
      s.pages.push_back(p);
    }
  }
  return {};
}

void CpuBackend::commit_pages(SeqState& s) {
  s.committed = pool_.commit_filled(s.pages, s.committed, s.hist, s.chain);
}

Status CpuBackend::add_sequence(SeqId id) {
  if (seqs_.count(id)) return err("cpu backend: sequence {} already exists", id);
  SeqState s;
  s.layers.reserve(static_cast<size_t>(spec_.n_layers));
  for (const auto& L : spec_.layers) s.layers.push_back(fresh_layer_cache(L, kv_bf16_));
  seqs_.emplace(id, std::move(s));
  return {};
}

void CpuBackend::remove_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Last page first: under pressure the LRU then evicts a prefix's tail before its head.
  for (auto p = it->second.pages.rbegin(); p != it->second.pages.rend(); ++p) pool_.unref(*p);
  seqs_.erase(it);
}

int64_t CpuBackend::sequence_length(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.len;
}

Status CpuBackend::forward(std::span<const BatchItem> items, std::vector<float>& logits) {
  const int64_t H = spec_.hidden_size;
  // The step's layout and buffers are members, reused: a decode step allocates nothing once warm.
  AttnLayout& lay = step_.lay;
  std::vector<SeqState*>& state = step_.state;  // [n_items]
  lay.seqs.clear();
  lay.pos.clear();
  lay.seq_of.clear();
  state.clear();
  int64_t T = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = seqs_.find(items[i].seq);
    if (it == seqs_.end()) return err("cpu backend: unknown sequence {}", items[i].seq);
    for (size_t j = 0; j < i; ++j)
      if (items[j].seq == items[i].seq)
        return err("cpu backend: sequence {} appears twice in one batch", items[i].seq);
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    state.push_back(&it->second);
    lay.seqs.push_back(AttnSeq{nullptr, it->second.len, T, n});
    for (int64_t j = 0; j < n; ++j) {
      const int32_t tok = items[i].tokens[static_cast<size_t>(j)];
      if (tok < 0 || tok >= spec_.vocab_size)
        return err("cpu backend: token id {} out of range [0, {})", tok, spec_.vocab_size);
      lay.pos.push_back(it->second.len + j);
      lay.seq_of.push_back(i);
    }
    T += n;
  }
  if (T == 0) return {};
  GRIDQ_RETURN_IF_ERROR(grow_pages(items, state));
  auto& page_ptrs = step_.page_ptrs;  // [n_items] each sequence's page memory
  if (page_ptrs.size() < items.size()) page_ptrs.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    page_ptrs[i].clear();
    for (int p : state[i]->pages) page_ptrs[i].push_back(page_mem_[static_cast<size_t>(p)].data());
  }

  LineVector<float>& x = step_.x;  // [T, H] residual stream
  x.resize(static_cast<size_t>(T * H));
  {
    int64_t t = 0;
    for (const auto& item : items)
      for (int32_t tok : item.tokens) dequantize_row(w_.embed, tok, x.data() + (t++) * H);
  }
  LineVector<float>& a = step_.a;  // [T, H] normalised input of a block (scratch)
  for (int l = 0; l < spec_.n_layers; ++l) {
    for (size_t i = 0; i < items.size(); ++i) {
      LayerCache& c = state[i]->layers[static_cast<size_t>(l)];
      if (const int64_t off = k_off_[static_cast<size_t>(l)]; off >= 0) {
        const int64_t kvw = static_cast<int64_t>(spec_.layers[static_cast<size_t>(l)].n_kv_heads) *
                            spec_.layers[static_cast<size_t>(l)].head_dim;
        c.paged =
            PagedKv{&page_ptrs[i], opts_.page_tokens, off, off + opts_.page_tokens * kvw, state[i]->floor};
      }
      lay.seqs[i].cache = &c;
    }
    decoder_layer(spec_, w_.layers[static_cast<size_t>(l)], l, lay, x.data(), a);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    SeqState& s = *state[i];
    s.len += static_cast<int64_t>(items[i].tokens.size());
    s.hist.insert(s.hist.end(), items[i].tokens.begin(), items[i].tokens.end());
    commit_pages(s);
  }

  // Logits for the requested rows only.
  std::vector<int64_t>& rows = step_.rows;
  rows.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    if (n == 0) continue;
    if (items[i].logits == LogitsMode::kAll)
      for (int64_t j = 0; j < n; ++j) rows.push_back(lay.seqs[i].start + j);
    else if (items[i].logits == LogitsMode::kLast)
      rows.push_back(lay.seqs[i].start + n - 1);
  }
  if (rows.empty()) return {};
  const int64_t R = static_cast<int64_t>(rows.size());
  LineVector<float>& h = step_.h;  // [R, H] the final norm of the rows with logits
  h.resize(static_cast<size_t>(R * H));
  for (int64_t r = 0; r < R; ++r)
    rmsnorm_rows(x.data() + rows[static_cast<size_t>(r)] * H, w_.final_norm.data(), 1, H, spec_.norm_eps,
                 h.data() + r * H);
  const size_t base = logits.size();
  logits.resize(base + static_cast<size_t>(R * spec_.vocab_size));
  matmul(w_.lm_head, h.data(), R, logits.data() + base);
  return {};
}

std::vector<std::string> CpuBackend::kernel_report() const {
  std::vector<std::string> out = {
      fmt::format("cpu: {} thread(s) in one worker pool; {} kernels, one summation order on every path "
                  "(bit-identical across kernels, thread counts and batch sizes)",
                  pool_threads(),
                  have_avx512() ? "AVX-512 and AVX2+F16C"
                  : have_avx2() ? "AVX2+F16C"
                                : "scalar")};
  if (opts_.kernels == CpuKernels::kBf16)
    out.push_back(
        "cpu: --cpu-kernels bf16: BF16, FP8 W8A8 and CB matrices (not the router) run on AVX512-BF16, "
        "weights as their exact BF16 values, activations rounded to BF16 (FP8's are exact in it); "
        "bit-identical across thread counts and batch sizes, not to the reference kernels");
  if (kv_bf16_)
    out.push_back("cpu: KV cache in BF16 (the bf16 kernels' attention: fused scores and value sums)");
  return out;
}

}  // namespace gridq::runtime::cpu
