// The attention kernels on their own: a paged full layer and a sliding ring, GQA groups of 6 and 9, head_dim
// 128 / 64 / 32, positions across several 256-key splits. Against a float64 softmax over the same BF16 keys
// and values, and bit for bit across every way a row can meet the kernel: in a 64-row prefill chunk (4-warp
// tiles), the same chunk with 1-warp tiles, alone, in chunks of 7, beside rows of another sequence, as one
// of 16 decode rows of 1-, 4- or 8-warp tiles, and in fused items (AttnArgs::fused) against split items.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::test {
namespace {

using detail::AttnArgs;
using detail::KvView;

struct Case {
  int d, nh, nkv, window;  // window 0: a full (paged) layer
};

// A KV cache for two sequences (slots 0, 1) holding positions [0, kLen) (pages) or the last ring slots
// (ring), with the host's copy of every position's K and V for the reference.
struct Cache {
  static constexpr int kLen = 900, kPageTokens = 16, kMaxPages = 64, kSeqs = 2;
  int kvw = 0, ring = 0;
  std::vector<uint16_t> k, v;  // host [seq][pos][kvw]
  DeviceBuffer pool, table;
  KvView view;

  Cache(const Case& c, Rng& r) {
    kvw = c.nkv * c.d;
    k = random_bf16(static_cast<size_t>(kSeqs) * kLen * kvw, 1.0f, r);
    v = random_bf16(k.size(), 1.0f, r);
    if (c.window > 0) {
      ring = c.window + detail::kMaxSliceRows;
      // ring per sequence: [K ring slots][V ring slots], each slot kvw elements; holds the last `ring`
      // positions before kLen.
      std::vector<uint16_t> host(static_cast<size_t>(kSeqs) * 2 * ring * kvw, 0);
      for (int s = 0; s < kSeqs; ++s)
        for (int j = kLen - ring; j < kLen; ++j)
          for (int e = 0; e < kvw; ++e) {
            const size_t src = (static_cast<size_t>(s) * kLen + j) * kvw + e;
            const size_t base =
                static_cast<size_t>(s) * 2 * ring * kvw + static_cast<size_t>(j % ring) * kvw + e;
            host[base] = k[src];
            host[base + static_cast<size_t>(ring) * kvw] = v[src];
          }
      pool = upload_vec(host, "ring");
      view.base = pool.as<uint16_t>();
      view.k_off = 0, view.v_off = static_cast<long long>(ring) * kvw;
      view.page_elems = 2LL * ring * kvw;
      view.page_tokens = ring;
      view.sliding = 1;
    } else {
      // Pages in a shuffled order, each [K page_tokens × kvw][V page_tokens × kvw].
      const int pages = kSeqs * kMaxPages;
      std::vector<int> perm(static_cast<size_t>(pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), r.g);
      const long long page_elems = 2LL * kPageTokens * kvw;
      std::vector<uint16_t> host(static_cast<size_t>(pages * page_elems), 0);
      for (int s = 0; s < kSeqs; ++s)
        for (int j = 0; j < kLen; ++j) {
          const long long page = perm[static_cast<size_t>(s * kMaxPages + j / kPageTokens)];
          for (int e = 0; e < kvw; ++e) {
            const size_t src = (static_cast<size_t>(s) * kLen + j) * kvw + e;
            const size_t dst = static_cast<size_t>(page * page_elems + (j % kPageTokens) * kvw + e);
            host[dst] = k[src];
            host[dst + static_cast<size_t>(kPageTokens) * kvw] = v[src];
          }
        }
      pool = upload_vec(host, "pages");
      table = upload_vec(perm, "page table");
      view.base = pool.as<uint16_t>();
      view.k_off = 0, view.v_off = static_cast<long long>(kPageTokens) * kvw;
      view.page_elems = page_elems;
      view.page_tokens = kPageTokens;
      view.page_table = table.as<int>();
      view.max_pages = kMaxPages;
    }
    view.kvw = kvw;
  }
};

// o FP32 [T, nh, d] for rows (slot, pos) with queries q [T, nh, d].
std::vector<float> run(const Case& c, const Cache& cache, const std::vector<int>& slot,
                       const std::vector<int>& pos, const std::vector<float>& q, int warps,
                       bool fused = false, int max_splits = 0) {
  const int T = static_cast<int>(pos.size());
  std::vector<int> rows(pos);
  rows.insert(rows.end(), slot.begin(), slot.end());
  DeviceBuffer rows_d = upload_vec(rows, "rows"), q_d = upload_vec(q, "q");
  AttnArgs a;
  a.q = q_d.as<float>();
  a.T = T, a.nh = c.nh, a.nkv = c.nkv, a.d = c.d, a.window = c.window;
  a.max_splits =
      max_splits > 0 ? max_splits : (Cache::kLen + detail::kAttnSplitKeys - 1) / detail::kAttnSplitKeys;
  a.tile_warps = warps;
  a.fused = fused;
  a.kv = cache.view;
  a.rows.pos = rows_d.as<int>();
  a.rows.seq_slot = rows_d.as<int>() + T;
  auto part = DeviceBuffer::alloc(static_cast<size_t>(T) * c.nh * a.max_splits * (c.d + 2) * 4, "partial");
  auto o = DeviceBuffer::alloc(static_cast<size_t>(T) * c.nh * c.d * 4, "o");
  EXPECT_TRUE(part.ok() && o.ok());
  poison(*part);
  poison(*o);
  a.partial = part->as<float>();
  a.o = o->as<float>();
  EXPECT_EQ(detail::raw_attention(a, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return download<float>(*o, static_cast<size_t>(T) * c.nh * c.d);
}

// Queries of (slot, pos) rows, a deterministic function of the row so any grouping sees the same values.
std::vector<float> queries(const Case& c, const std::vector<int>& slot, const std::vector<int>& pos) {
  std::vector<float> q;
  for (size_t t = 0; t < pos.size(); ++t) {
    Rng r(static_cast<uint64_t>(9000 + slot[t] * 100000 + pos[t]));
    for (int i = 0; i < c.nh * c.d; ++i) q.push_back(r.uniform(-2.0f, 2.0f));
  }
  return q;
}

void check_reference(const Case& c, const Cache& cache, const std::vector<int>& slot,
                     const std::vector<int>& pos, const std::vector<float>& q, const std::vector<float>& o) {
  const int g = c.nh / c.nkv;
  double worst = 0;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int h = 0; h < c.nh; ++h) {
      const int p = pos[t], lo = c.window > 0 ? std::max(0, p - c.window + 1) : 0, kvh = h / g;
      std::vector<double> s;
      for (int j = lo; j <= p; ++j) {
        double dot = 0;
        const size_t kb = (static_cast<size_t>(slot[t]) * Cache::kLen + j) * cache.kvw + kvh * c.d;
        for (int e = 0; e < c.d; ++e)
          dot += static_cast<double>(q[(t * c.nh + h) * c.d + e]) * bf16_to_f32(cache.k[kb + e]);
        s.push_back(dot / std::sqrt(static_cast<double>(c.d)));
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int e = 0; e < c.d; ++e) {
        double ref = 0;
        for (int j = lo; j <= p; ++j)
          ref += s[static_cast<size_t>(j - lo)] / sum *
                 bf16_to_f32(
                     cache.v[(static_cast<size_t>(slot[t]) * Cache::kLen + j) * cache.kvw + kvh * c.d + e]);
        const double err = std::fabs(ref - o[(t * c.nh + h) * c.d + e]);
        worst = std::max(worst, err);
        // BF16 q and P: a few 2^-9 relative on scores of |s| ≲ 4 and on weights summing to 1, values ≤ 1.
        ASSERT_LT(err, 2e-2) << "row " << t << " head " << h << " dim " << e << " pos " << p;
      }
    }
  std::printf("[attention] d %d heads %d/%d window %d: %zu rows, max |o - float64| %.3e\n", c.d, c.nh, c.nkv,
              c.window, pos.size(), worst);
}

void expect_same(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], 4) != 0;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << a.size() << " values differ";
}

void check_case(const Case& c) {
  Rng r(static_cast<uint64_t>(c.d * 1000 + c.nh * 10 + c.window));
  Cache cache(c, r);
  // A 64-row chunk ending at the cache's last position: crosses the 768 split boundary and, for the
  // sliding layer, starts where the window is full.
  const int n = detail::kMaxSliceRows, p0 = Cache::kLen - n;
  std::vector<int> slot(static_cast<size_t>(n), 1), pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), p0);
  const auto q = queries(c, slot, pos);
  const auto chunk4 = run(c, cache, slot, pos, q, 4);
  check_reference(c, cache, slot, pos, q, chunk4);
  expect_same(chunk4, run(c, cache, slot, pos, q, 1), "64-row chunk: 1-warp vs 4-warp tiles");
  expect_same(chunk4, run(c, cache, slot, pos, q, 8), "64-row chunk: 8-warp vs 4-warp tiles");
  const size_t per = static_cast<size_t>(c.nh) * c.d;
  std::vector<float> pieces;
  for (int t0 = 0; t0 < n; t0 += 7) {  // chunks of 7, the last one shorter
    const int t1 = std::min(n, t0 + 7);
    std::vector<int> s7(slot.begin() + t0, slot.begin() + t1), p7(pos.begin() + t0, pos.begin() + t1);
    const auto o7 = run(c, cache, s7, p7, queries(c, s7, p7), 1);
    pieces.insert(pieces.end(), o7.begin(), o7.end());
  }
  expect_same(chunk4, pieces, "chunks of 7 vs one chunk");
  for (int t : {0, 17, 63}) {  // alone, and as decode rows beside another sequence's row
    std::vector<int> s1{1}, p1{pos[static_cast<size_t>(t)]};
    const std::vector<float> want(chunk4.begin() + t * per, chunk4.begin() + (t + 1) * per);
    expect_same(want, run(c, cache, s1, p1, queries(c, s1, p1), 1), "alone vs in the chunk");
    std::vector<int> s2{0, 1}, p2{Cache::kLen - 1 - t, pos[static_cast<size_t>(t)]};
    const auto o2 = run(c, cache, s2, p2, queries(c, s2, p2), 1);
    expect_same(want, std::vector<float>(o2.begin() + per, o2.end()), "beside another sequence");
  }
  // A decode step of 16 rows, each its own run (the two sequences in turn, scattered positions: several
  // tiles and split counts in one launch): 1-, 4- and 8-warp tiles bit for bit, and each row as it is alone
  // (decode steps run 4-warp tiles; a decode row beside a prefill chunk runs 8-warp ones).
  std::vector<int> sd, pd;
  for (int t = 0; t < 16; ++t) {
    sd.push_back(t % 2);
    pd.push_back(t % 2 ? Cache::kLen - 1 - 37 * t : 5 + 53 * t);
  }
  const auto qd = queries(c, sd, pd);
  const auto dec1 = run(c, cache, sd, pd, qd, 1);
  expect_same(dec1, run(c, cache, sd, pd, qd, 4), "16 decode rows: 4-warp vs 1-warp tiles");
  expect_same(dec1, run(c, cache, sd, pd, qd, 8), "16 decode rows: 8-warp vs 1-warp tiles");
  for (int t : {0, 7, 15}) {
    std::vector<int> s1{sd[static_cast<size_t>(t)]}, p1{pd[static_cast<size_t>(t)]};
    const std::vector<float> want(dec1.begin() + t * per, dec1.begin() + (t + 1) * per);
    for (int w : {1, 4, 8})
      expect_same(want, run(c, cache, s1, p1, queries(c, s1, p1), w), "decode row alone vs in the step");
  }
  // Fused items (a tile's splits folded in the kernel, no merge) against split items + merge, bit for bit:
  // the chunk, the decode step, and (full layer) a 300-row chunk in one launch against 64-row split chunks.
  expect_same(chunk4, run(c, cache, slot, pos, q, 4, true), "64-row chunk: fused vs split items");
  expect_same(chunk4, run(c, cache, slot, pos, q, 8, true), "64-row chunk: fused 8-warp vs split items");
  expect_same(dec1, run(c, cache, sd, pd, qd, 4, true), "16 decode rows: fused vs split items");
  if (c.window == 0) {
    const int nl = 300;
    std::vector<int> sl(static_cast<size_t>(nl), 1), pl(static_cast<size_t>(nl));
    std::iota(pl.begin(), pl.end(), Cache::kLen - nl);
    const auto fused = run(c, cache, sl, pl, queries(c, sl, pl), 8, true);
    std::vector<float> split;
    for (int t0 = 0; t0 < nl; t0 += n) {
      const int t1 = std::min(nl, t0 + n);
      std::vector<int> sc(sl.begin() + t0, sl.begin() + t1), pc(pl.begin() + t0, pl.begin() + t1);
      const auto oc = run(c, cache, sc, pc, queries(c, sc, pc), 4);
      split.insert(split.end(), oc.begin(), oc.end());
    }
    expect_same(split, fused, "300-row fused chunk vs 64-row split chunks");
  }
  // Early positions: fewer keys than one block, a single split.
  std::vector<int> s0{0, 0, 0}, pe{0, 1, 2};
  const auto qe = queries(c, s0, pe);
  if (c.window == 0) check_reference(c, cache, s0, pe, qe, run(c, cache, s0, pe, qe, 4));
}

TEST(CudaAttention, FullLayerPagesGqa6) {
  REQUIRE_GPU();
  check_case({128, 12, 2, 0});
}
TEST(CudaAttention, SlidingRingGqa9) {
  REQUIRE_GPU();
  check_case({128, 18, 2, 200});
}
TEST(CudaAttention, HeadDim64And32) {
  REQUIRE_GPU();
  check_case({64, 8, 2, 0});
  check_case({32, 6, 3, 150});
}

// A split buffer sized for a long max_model_len (the engine's max_splits: 4096 splits for 1M positions, the
// merge's shared memory at the 48 KB line beside its static bytes; 8192 past it) changes only the partials'
// stride: the same bits as a buffer sized for the cache. (An H200's KV pool holds Laguna-S-2.1's 1M
// positions, and the merge's launch was refused there: its shared-memory opt-in ignored the static bytes.)
TEST(CudaAttention, SplitBufferForLongContextsSameBits) {
  REQUIRE_GPU();
  const Case c{128, 12, 2, 0};
  Rng r(77);
  const Cache cache(c, r);
  std::vector<int> slot{0, 1, 1}, pos{Cache::kLen - 1, 300, 5};
  const auto q = queries(c, slot, pos);
  const auto want = run(c, cache, slot, pos, q, 4);
  expect_same(want, run(c, cache, slot, pos, q, 4, false, 4096), "4096 splits vs the cache's");
  expect_same(want, run(c, cache, slot, pos, q, 4, false, 8192), "8192 splits vs the cache's");
}

}  // namespace
}  // namespace gridq::cuda::test
