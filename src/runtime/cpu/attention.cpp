// Attention of one decoder layer (layer_ops.h, laguna.md §1.3): q/k/v/g projections in one parallel op,
// QK norm and RoPE per token, one task per (token, KV head) for its query heads' scores, softmax, values and
// output gates, then o_proj. The arithmetic is the reference's, operation for operation, unless the layer
// runs on the fast path (--cpu-kernels bf16: its projections' cpu_bf16_dot): then the scores and value sums
// fuse each product into its sum and the softmax takes the vectorised exp (attend_fast). Either way each
// query row's arithmetic is fixed by its keys alone, so batch, chunk and thread invariance hold.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/cpu/dot_kernels_avx512.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/scratch.h"
#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {

namespace {

using model::AttnKind;
using model::GateMode;

// torch.nn.functional.softplus (beta 1, threshold 20), fp32.
inline float softplus(float g) { return g > 20.0f ? g : std::log1p(std::exp(g)); }

// cos(p·inv_freq[i])·m and sin(p·inv_freq[i])·m for positions [0, n): computed once per RoPE variant (the
// same expressions the per-call loop had, so the same values) instead of on every call.
struct RopeTable {
  std::vector<float> inv_freq;
  float m = 0.0f;
  int64_t n = 0;
  std::vector<float> cs, sn;  // [n, half]
};

const RopeTable& rope_table(const model::RopeParams& rope, int64_t positions) {
  thread_local std::vector<RopeTable> tables;  // one per RoPE variant the calling thread has seen
  RopeTable* t = nullptr;
  for (auto& c : tables)
    if (c.m == rope.attention_factor && c.inv_freq == rope.inv_freq) t = &c;
  if (!t) {
    t = &tables.emplace_back();
    t->inv_freq = rope.inv_freq;
    t->m = rope.attention_factor;
  }
  const int64_t half = static_cast<int64_t>(rope.inv_freq.size());
  if (t->n < positions) {
    const int64_t n = std::max(positions, 2 * t->n);
    t->cs.resize(static_cast<size_t>(n * half));
    t->sn.resize(static_cast<size_t>(n * half));
    for (int64_t p = t->n; p < n; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const float ang = static_cast<float>(p) * t->inv_freq[static_cast<size_t>(i)];
        t->cs[static_cast<size_t>(p * half + i)] = std::cos(ang) * t->m;
        t->sn[static_cast<size_t>(p * half + i)] = std::sin(ang) * t->m;
      }
    t->n = n;
  }
  return *t;
}

// The reference's scores (four keys at a time), softmax (max, then exp and sum ascending, then the division)
// and value sums for nq ≤ kHeadsPerPass heads over the same nk keys; arguments as attend_fast's.
void attend_reference(const float* const* qh, int nq, const float* const* kp, const float* const* vp,
                      int64_t nk, int64_t d, float scale, float* const* sc, float* const* oh) {
  int64_t j = 0;
  for (; j + 4 <= nk; j += 4) {
    float s[kHeadsPerPass * 4];
    dot4_heads(qh, nq, kp + j, nk - j, d, s);
    for (int i = 0; i < nq; ++i)
      for (int r = 0; r < 4; ++r) sc[i][j + r] = s[i * 4 + r] * scale;
  }
  for (; j < nk; ++j)
    for (int i = 0; i < nq; ++i) sc[i][j] = dot(qh[i], kp[j], d) * scale;
  for (int i = 0; i < nq; ++i) {
    float mx = -INFINITY;
    for (int64_t jj = 0; jj < nk; ++jj) mx = std::max(mx, sc[i][jj]);
    float sum = 0.0f;
    for (int64_t jj = 0; jj < nk; ++jj) sum += (sc[i][jj] = std::exp(sc[i][jj] - mx));
    for (int64_t jj = 0; jj < nk; ++jj) sc[i][jj] /= sum;
  }
  weighted_sum_heads(sc, nq, vp, nk, d, oh);
}

// The fast path's scores, softmax and value sums for nq ≤ kHeadsPerPass heads over the same nk keys, fp32
// or BF16 (E): sc[i] [nk] ends as head i's weights, oh[i] [d] its output. Needs AVX-512 and d % 16 == 0.
template <typename E>
void attend_fast(const float* const* qh, int nq, const E* const* kp, const E* const* vp, int64_t nk,
                 int64_t d, float scale, float* const* sc, float* const* oh) {
  float s[kHeadsPerPass * 4];
  for (int64_t j = 0; j < nk; j += 4) {
    const int64_t n = std::min<int64_t>(4, nk - j);
    if (n == 4) {
      dot4_heads_fused(qh, nq, kp + j, nk - j, d, s);
    } else {  // the last keys, the missing ones repeating the last (computed, never stored)
      const E* tail[4];
      for (int r = 0; r < 4; ++r) tail[r] = kp[j + std::min<int64_t>(r, n - 1)];
      dot4_heads_fused(qh, nq, tail, 4, d, s);
    }
    for (int i = 0; i < nq; ++i)
      for (int64_t r = 0; r < n; ++r) sc[i][j + r] = s[i * 4 + r] * scale;
  }
  for (int i = 0; i < nq; ++i) softmax_fast(sc[i], nk);
  weighted_sum_heads_fused(sc, nq, vp, nk, d, oh);
}

}  // namespace

void attention(const model::ModelSpec& spec, const LayerWeights& lw, int l, const AttnLayout& lay,
               const float* a, float* x, const LayerHooks* hooks) {
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const int64_t T = lay.tokens();
  const int64_t H = spec.hidden_size, d = L.head_dim, nh = L.n_heads, nkv = L.n_kv_heads;
  const int64_t qw = nh * d, kvw = nkv * d;
  const bool gated = L.gate != GateMode::kNone;
  Scratch qs(Slot::kQ, static_cast<size_t>(T * qw)), ks(Slot::kK, static_cast<size_t>(T * kvw)),
      vs(Slot::kV, static_cast<size_t>(T * kvw)),
      gs(Slot::kG, static_cast<size_t>(gated ? T * lw.g.rows : 0));
  float *q = qs.data(), *k = ks.data(), *v = vs.data(), *g = gs.data();
  const MatJob jobs[4] = {{&lw.q, a, T, q}, {&lw.k, a, T, k}, {&lw.v, a, T, v}, {&lw.g, a, T, g}};
  matmul_jobs(std::span<const MatJob>(jobs, gated ? 4 : 3));
  // QK norm before RoPE, then RoPE (NeoX rotate-half on the first r dims, m on cos and sin).
  int64_t max_pos = 0;
  for (int64_t p : lay.pos) max_pos = std::max(max_pos, p);
  const int64_t half = L.rope.rotary_dim / 2;
  const RopeTable& rope = rope_table(L.rope, max_pos + 1);
  const bool fast_layer = on_fast_path(lw);
  const auto ss = fast_layer ? sum_squares_fast : sum_squares;
  auto qk_rope = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (L.qk_norm) {
        rmsnorm_rows(q + t * qw, lw.q_norm.data(), nh, d, spec.norm_eps, q + t * qw, ss);
        rmsnorm_rows(k + t * kvw, lw.k_norm.data(), nkv, d, spec.norm_eps, k + t * kvw, ss);
      }
      const int64_t p = lay.pos[static_cast<size_t>(t)];
      const float* cs = rope.cs.data() + p * half;
      const float* sn = rope.sn.data() + p * half;
      auto rot = [&](float* u) {
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = u[i], x2 = u[i + half];
          u[i] = x1 * cs[i] - x2 * sn[i];
          u[i + half] = x2 * cs[i] + x1 * sn[i];
        }
      };
      for (int64_t h = 0; h < nh; ++h) rot(q + t * qw + h * d);
      for (int64_t h = 0; h < nkv; ++h) rot(k + t * kvw + h * d);
    }
  };
  if (T >= 16)
    parallel_for(T, qk_rope);
  else
    qk_rope(0, T);
  // The caches' element type (one backend's sequences share it): fp32, or BF16 on the fast path. This call's
  // own K and V rows are rounded to it once, so a key reads the same whether it came from the cache or from
  // this call (prefill chunks stay invariant). KV memory is addressed in bytes: es per element.
  const bool kv16 = !lay.seqs.empty() && lay.seqs.front().cache->bf16;
  for (const AttnSeq& s : lay.seqs)
    if (s.cache->bf16 != kv16) std::abort();  // a backend's caches are all one type; mixing is a bug
  const int64_t es = kv16 ? 2 : 4;
  Scratch k16s(Slot::kK16, static_cast<size_t>(kv16 ? (T * kvw + 1) / 2 : 0)),
      v16s(Slot::kV16, static_cast<size_t>(kv16 ? (T * kvw + 1) / 2 : 0));
  if (kv16) {
    round_to_bf16(k, T * kvw, reinterpret_cast<uint16_t*>(k16s.data()));
    round_to_bf16(v, T * kvw, reinterpret_cast<uint16_t*>(v16s.data()));
  }
  const auto* kc = reinterpret_cast<const uint8_t*>(kv16 ? k16s.data() : k);  // [T, kvw] elements
  const auto* vc = reinterpret_cast<const uint8_t*>(kv16 ? v16s.data() : v);
  auto bytes = [&](auto* base, int64_t elem) { return reinterpret_cast<uint8_t*>(base) + elem * es; };
  const size_t row_bytes = static_cast<size_t>(kvw * es);
  // Full layers: append this call's keys first, then every query reads the cache.
  const bool sliding = L.attn == AttnKind::kSliding;
  const int64_t W = L.window;
  if (!sliding) {
    for (const AttnSeq& s : lay.seqs) {
      auto& c = *s.cache;
      const int64_t p0 = s.past, n = s.n;
      if (const PagedKv& pg = c.paged; pg.pages) {
        for (int64_t j = std::max(p0, pg.write_floor); j < p0 + n; ++j) {
          float* page = (*pg.pages)[static_cast<size_t>(j / pg.page_tokens)];
          const int64_t slot = (j % pg.page_tokens) * kvw, row = (s.start + j - p0) * kvw;
          std::memcpy(bytes(page, pg.k_off + slot), kc + row * es, row_bytes);
          std::memcpy(bytes(page, pg.v_off + slot), vc + row * es, row_bytes);
        }
        continue;
      }
      const size_t floats = static_cast<size_t>(((p0 + n) * kvw * es + 3) / 4);
      c.k.resize(floats);
      c.v.resize(floats);
      std::memcpy(bytes(c.k.data(), p0 * kvw), kc + s.start * kvw * es, static_cast<size_t>(n) * row_bytes);
      std::memcpy(bytes(c.v.data(), p0 * kvw), vc + s.start * kvw * es, static_cast<size_t>(n) * row_bytes);
    }
  }
  Scratch os(Slot::kO, static_cast<size_t>(T * qw));  // [T, n_h*d]
  float* o = os.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = nh / nkv;
  const bool fast = fast_layer && d % 16 == 0;  // attend_fast's kernels take 16 columns a step
  auto first_key = [&](int64_t t) {
    const int64_t p = lay.pos[static_cast<size_t>(t)];
    return sliding ? std::max<int64_t>(0, p - W + 1) : 0;
  };
  // One task per (token, KV head): the group's query heads read the same keys and values, so each key and
  // value row is located and loaded once for all of them. Per head the arithmetic is the reference's.
  struct Buffers {
    std::vector<float> sc;                // [group, keys] the heads' scores, then weights
    std::vector<const float*> kp, vp;     // [keys] key and value rows (fp32 caches)
    std::vector<const uint16_t*> kb, vb;  // [keys] the same of BF16 caches
  };
  auto kv_group = [&](int64_t tg, Buffers& bf) {
    const int64_t t = tg / nkv, kvh = tg % nkv;
    const AttnSeq& S = lay.seqs[lay.seq_of[static_cast<size_t>(t)]];
    const LayerCache& c = *S.cache;
    const int64_t p = lay.pos[static_cast<size_t>(t)], p0 = S.past, t0 = S.start;
    const int64_t j0 = first_key(t);
    const PagedKv& pg = c.paged;
    auto at = [&](const void* base, int64_t elem) { return static_cast<const uint8_t*>(base) + elem * es; };
    auto paged = [&](int64_t j, int64_t off) {
      return at((*pg.pages)[static_cast<size_t>(j / pg.page_tokens)],
                off + (j % pg.page_tokens) * kvw + kvh * d);
    };
    // Position j's row of this KV head: the pages, the growing cache, this call's rows, or the ring.
    auto row = [&](int64_t j, const LineVector<float>& cache, const uint8_t* call, int64_t off) {
      if (!sliding && pg.pages) return paged(j, off);
      if (!sliding) return at(cache.data(), j * kvw + kvh * d);
      if (j >= p0) return call + ((t0 + j - p0) * kvw + kvh * d) * es;
      return at(cache.data(), (j % W) * kvw + kvh * d);
    };
    const int64_t nk = p - j0 + 1;
    bf.sc.resize(static_cast<size_t>(group * nk));
    if (kv16) {
      bf.kb.resize(static_cast<size_t>(nk));
      bf.vb.resize(static_cast<size_t>(nk));
    } else {
      bf.kp.resize(static_cast<size_t>(nk));
      bf.vp.resize(static_cast<size_t>(nk));
    }
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t* kr = row(j0 + j, c.k, kc, pg.k_off);
      const uint8_t* vr = row(j0 + j, c.v, vc, pg.v_off);
      if (kv16) {
        bf.kb[static_cast<size_t>(j)] = reinterpret_cast<const uint16_t*>(kr);
        bf.vb[static_cast<size_t>(j)] = reinterpret_cast<const uint16_t*>(vr);
      } else {
        bf.kp[static_cast<size_t>(j)] = reinterpret_cast<const float*>(kr);
        bf.vp[static_cast<size_t>(j)] = reinterpret_cast<const float*>(vr);
      }
    }
    // The group's heads in runs of up to kHeadsPerPass: scores, softmax and value sums, then the gates.
    for (int64_t h0 = 0; h0 < group; h0 += kHeadsPerPass) {
      const int nq = static_cast<int>(std::min<int64_t>(kHeadsPerPass, group - h0));
      const float* qh[kHeadsPerPass];
      float* sc[kHeadsPerPass];
      float* oh[kHeadsPerPass];
      for (int i = 0; i < nq; ++i) {
        const int64_t h = kvh * group + h0 + i;
        qh[i] = q + t * qw + h * d;
        sc[i] = bf.sc.data() + (h0 + i) * nk;
        oh[i] = o + t * qw + h * d;
      }
      if (kv16)
        attend_fast(qh, nq, bf.kb.data(), bf.vb.data(), nk, d, scale, sc, oh);
      else if (fast)
        attend_fast(qh, nq, bf.kp.data(), bf.vp.data(), nk, d, scale, sc, oh);
      else
        attend_reference(qh, nq, bf.kp.data(), bf.vp.data(), nk, d, scale, sc, oh);
      // Output gate: softplus in fp32, per head or per element (elementwise on the finished head).
      for (int i = 0; i < nq; ++i) {
        const int64_t h = kvh * group + h0 + i;
        if (L.gate == GateMode::kPerHead) {
          const float gh = softplus(g[t * nh + h]);
          for (int64_t e = 0; e < d; ++e) oh[i][e] *= gh;
        } else if (L.gate == GateMode::kPerElement) {
          for (int64_t e = 0; e < d; ++e) oh[i][e] *= softplus(g[t * qw + h * d + e]);
        }
      }
    }
  };
  // The ranges cut at equal key counts (causal prefill is triangular).
  thread_local std::vector<int64_t> cost;  // [T·nkv + 1]
  cost.assign(1, 0);
  for (int64_t tg = 0; tg < T * nkv; ++tg)
    cost.push_back(cost.back() +
                   (lay.pos[static_cast<size_t>(tg / nkv)] - first_key(tg / nkv) + 1 + 8) * group);
  parallel_for(
      T * nkv,
      [&](int64_t b, int64_t e) {
        thread_local Buffers bf;
        for (int64_t tg = b; tg < e; ++tg) kv_group(tg, bf);
      },
      cost.data());
  // Sliding layers: the call's last W keys enter the ring after every query has read the old ones.
  if (sliding) {
    for (const AttnSeq& s : lay.seqs) {
      auto& c = *s.cache;
      const int64_t p0 = s.past, n = s.n;
      for (int64_t j = std::max(p0, p0 + n - W); j < p0 + n; ++j) {
        const int64_t row = s.start + (j - p0);
        std::memcpy(bytes(c.k.data(), (j % W) * kvw), kc + row * kvw * es, row_bytes);
        std::memcpy(bytes(c.v.data(), (j % W) * kvw), vc + row * kvw * es, row_bytes);
      }
    }
  }
  if (hooks && hooks->o_in) hooks->o_in(o, T);
  Scratch outs(Slot::kOut, static_cast<size_t>(T * H));
  float* out = outs.data();
  matmul(lw.o, o, T, out);
  for (int64_t i = 0; i < T * H; ++i) x[i] += out[i];
}

}  // namespace gridq::runtime::cpu
