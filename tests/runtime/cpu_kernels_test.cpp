// The CPU backend's fast kernels against the plain definitions they replace, bit for bit: the vectorised
// activation contracts against core/act_qdq, every dot product against a scalar loop in the reference
// order, the fused CB rows against gridbook's reference decode, and the worker pool's coverage. Fresh
// random inputs each run (the seed is printed on failure), plus the edge values the roundings care about.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "core/act_qdq.h"
#include "core/numerics.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"
#include "runtime/cpu/act_contract.h"
#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/cb_rows.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {
namespace {

uint32_t fresh_seed() { return std::random_device{}(); }

// The reference order (dot_kernels.h) in plain scalar code.
template <typename Get>
float ref_dot(Get w, const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += w(i + j) * x[i + j];
  for (int j = 0; j < 16 && i < n; ++i, ++j) acc[j] += w(i) * x[i];
  for (int s = 8; s > 0; s /= 2)
    for (int j = 0; j < s; ++j) acc[j] += acc[j + s];
  return acc[0];
}

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// Rows that exercise the contracts: normal values over many scales, exact zeros of both signs, values on
// and next to rounding boundaries, subnormal-range magnitudes, and (optionally) inf / NaN.
std::vector<float> contract_row(std::mt19937& g, int64_t n, bool specials) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 9), ex(-30, 30);
  const float scale = std::ldexp(1.0f, ex(g));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    switch (kind(g)) {
      case 0:
        x = (g() & 1) ? 0.0f : -0.0f;
        break;
      case 1:
        x = scale * static_cast<float>(static_cast<int>(g() % 25) - 12) / 4.0f;
        break;  // grid ties
      case 2:
        x = std::nextafter(scale * 0.75f, (g() & 1) ? 0.0f : 1.0f);
        break;
      case 3:
        x = d(g) * scale * 1e-6f;
        break;
      default:
        x = d(g) * scale;
    }
  }
  if (specials && n > 3) {
    const float s[3] = {INFINITY, -INFINITY, NAN};
    v[g() % static_cast<size_t>(n)] = s[g() % 3];
  }
  return v;
}

TEST(CpuKernels, ActivationContractsMatchTheReference) {
  const uint32_t seed = fresh_seed();
  std::mt19937 g(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = 16 * (1 + g() % 40);
    const auto x = contract_row(g, n, trial % 10 == 0);
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    const float want_s = quantize_fp8_token_row_f32(x, codes);
    std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    const float s = fp8_token_values(x.data(), n, got.data());
    ASSERT_TRUE(same_bits(s, want_s)) << "seed " << seed << " trial " << trial;
    for (int64_t c = 0; c < n; ++c)
      ASSERT_TRUE(same_bits(got[static_cast<size_t>(c)], e4m3_to_f32(codes[static_cast<size_t>(c)])))
          << "fp8 values, seed " << seed << " trial " << trial << " c " << c << " x "
          << x[static_cast<size_t>(c)];
    ASSERT_TRUE(qdq_fp8_token_row_f32(x, want).ok());
    qdq_fp8_row(x.data(), n, got.data());
    for (int64_t c = 0; c < n; ++c)
      ASSERT_TRUE(same_bits(got[static_cast<size_t>(c)], want[static_cast<size_t>(c)]))
          << "fp8 qdq, seed " << seed << " trial " << trial << " c " << c;
    ASSERT_TRUE(qdq_fp4_row_f32(x, want).ok());
    qdq_fp4_row(x.data(), n, got.data());
    for (int64_t c = 0; c < n; ++c)
      ASSERT_TRUE(same_bits(got[static_cast<size_t>(c)], want[static_cast<size_t>(c)]))
          << "fp4 qdq, seed " << seed << " trial " << trial << " c " << c << " x "
          << x[static_cast<size_t>(c)];
  }
}

TEST(CpuKernels, DotProductsKeepTheReferenceOrder) {
  const uint32_t seed = fresh_seed();
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t n : {1, 7, 16, 33, 128, 256, 512, 1000}) {
    std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(4 * n)), x256(static_cast<size_t>(n));
    std::vector<uint16_t> wb(static_cast<size_t>(4 * n));
    std::vector<uint8_t> w8(static_cast<size_t>(4 * n));
    for (auto& v : x) v = d(g);
    for (size_t i = 0; i < x.size(); ++i) x256[i] = x[i] * 256.0f;
    for (auto& v : w) v = d(g);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(w[i]);
    for (auto& b : w8) {
      do b = static_cast<uint8_t>(g());
      while ((b & 0x7F) == 0x7F);
    }
    const float* rf[4] = {w.data(), w.data() + n, w.data() + 2 * n, w.data() + 3 * n};
    const uint16_t* rb[4] = {wb.data(), wb.data() + n, wb.data() + 2 * n, wb.data() + 3 * n};
    const uint8_t* r8[4] = {w8.data(), w8.data() + n, w8.data() + 2 * n, w8.data() + 3 * n};
    float y4[4], yb[4], y8[4], y8x[4];
    dot4(x.data(), rf, n, y4);
    dot4_bf16(x.data(), rb, n, yb, 4 * n);
    dot4_e4m3(x.data(), r8, n, y8);
    dot_e4m3_x256(r8, 4, x.data(), x256.data(), n, y8x, 4 * n);
    for (int r = 0; r < 4; ++r) {
      const float want_f = ref_dot([&](int64_t i) { return rf[r][i]; }, x.data(), n);
      const float want_b = ref_dot([&](int64_t i) { return bf16_to_f32(rb[r][i]); }, x.data(), n);
      const float want_8 = ref_dot([&](int64_t i) { return e4m3_to_f32(r8[r][i]); }, x.data(), n);
      EXPECT_TRUE(same_bits(y4[r], want_f) && same_bits(dot(rf[r], x.data(), n), want_f))
          << seed << " n " << n;
      EXPECT_TRUE(same_bits(yb[r], want_b) && same_bits(dot_bf16(rb[r], x.data(), n, n), want_b))
          << seed << " n " << n;
      EXPECT_TRUE(same_bits(y8[r], want_8) && same_bits(dot_e4m3(r8[r], x.data(), n), want_8))
          << seed << " n " << n;
      EXPECT_TRUE(same_bits(y8x[r], want_8)) << "x256, seed " << seed << " n " << n << " r " << r;
      float one;
      dot_e4m3_x256(r8 + r, 1, x.data(), x256.data(), n, &one);
      EXPECT_TRUE(same_bits(one, want_8)) << "x256 single row, seed " << seed << " n " << n;
    }
    // Attention's value sum: as fill(0) then axpy per row, in scalar code.
    for (int64_t d : {8, 64, 128, 200}) {
      if (d > n) continue;
      const float a[4] = {x[0], x[n / 2], -x[n - 1], 0.25f};
      std::vector<float> got(static_cast<size_t>(d)), want(static_cast<size_t>(d), 0.0f);
      weighted_sum(a, rf, 4, d, got.data());
      for (int j = 0; j < 4; ++j)
        for (int64_t e = 0; e < d; ++e) want[static_cast<size_t>(e)] += a[j] * rf[j][e];
      for (int64_t e = 0; e < d; ++e)
        EXPECT_TRUE(same_bits(got[static_cast<size_t>(e)], want[static_cast<size_t>(e)]))
            << "weighted_sum d " << d;
    }
    // A NaN code takes the plain path: the same NaN as the reference.
    w8[3] = 0xFF;
    float yn[4];
    dot_e4m3_x256(r8, 4, x.data(), x256.data(), n, yn, 0);
    EXPECT_TRUE(std::isnan(yn[0]) || n <= 3);
  }
}

// A K16 matrix of random codes and legal scales, v1 or v2 planes, over random tables on the E2M1 grid.
struct CbMatrix {
  gridbook::Rung rung;
  gridbook::Codebook book;
  std::vector<uint8_t> data;
  QMatrix m;
};

// shared_books: every sub-table the same (as in the lattice books: Codebook::subs_identical).
CbMatrix make_k16(std::mt19937& g, int layout, int64_t R, int64_t C, bool shared_books = false) {
  CbMatrix cm;
  cm.rung = *gridbook::parse_rung_name("NVFP4_CB_K16", layout);
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<std::vector<float>> tables;
  const auto split = gridbook::sub_split(cm.rung);
  for (int i = 0; i < split.n; ++i) {
    std::vector<float> t(static_cast<size_t>((1 << split.width[i]) * cm.rung.sub_dim()));
    for (auto& v : t) v = grid[g() % 8] * ((g() & 1) ? -1.0f : 1.0f);
    if (shared_books && i > 0) t = tables[0];
    tables.push_back(std::move(t));
  }
  cm.book = *gridbook::Codebook::from_tables(cm.rung, tables);
  EXPECT_EQ(shared_books, cm.book.subs_identical);
  const int64_t rb = gridbook::row_bytes(cm.rung, C);
  cm.data.assign(static_cast<size_t>(R * rb), 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t sb = 0; sb < C / 256; ++sb) {
      std::vector<uint64_t> codes(32);
      for (auto& c : codes) c = g() & 0xFFFF;
      uint8_t* out = cm.data.data() + r * rb + sb * cm.rung.type_size();
      if (layout == 1) {
        uint8_t scales[16];
        for (auto& s : scales) s = static_cast<uint8_t>(0x20 + g() % 40);
        EXPECT_TRUE(gridbook::encode_superblock_fp4_v1(cm.rung, codes, scales, out).ok());
      } else {
        uint8_t E = 0, c[16];
        do E = static_cast<uint8_t>(110 + g() % 20);
        while (gridbook::v2_lowest_legal_code(E) < 0);
        for (auto& ci : c) {
          do ci = static_cast<uint8_t>(g() % 16);
          while (!gridbook::v2_legal(E, ci));
        }
        EXPECT_TRUE(gridbook::encode_superblock_fp4_v2(cm.rung, codes, E, c, out).ok());
      }
    }
  cm.m.format = WeightFormat::kCB;
  cm.m.rows = R;
  cm.m.cols = C;
  cm.m.data = cm.data.data();
  cm.m.row_bytes = rb;
  cm.m.rung = &cm.rung;
  cm.m.codebook = &cm.book;
  cm.m.act_bits = 4;
  return cm;
}

TEST(CpuKernels, CbRowsMatchTheReferenceDecode) {
  const uint32_t seed = fresh_seed();
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int layout : {1, 2}) {
    const int64_t R = 7, C = 512;
    CbMatrix cm = make_k16(g, layout, R, C);
    std::vector<float> x(static_cast<size_t>(C)), row(static_cast<size_t>(C)), y(static_cast<size_t>(R));
    for (auto& v : x) v = d(g);
    cb_dot_rows(cm.m, 0, 4, x.data(), y.data());
    cb_dot_rows(cm.m, 4, 3, x.data(), y.data() + 4);
    for (int64_t r = 0; r < R; ++r) {
      std::vector<uint16_t> ref(static_cast<size_t>(C));
      gridbook::decode_row(cm.rung, cm.book, cm.data.data() + r * cm.m.row_bytes, C, 0.0f, ref.data());
      decode_cb_row(cm.m, r, row.data());
      for (int64_t c = 0; c < C; ++c)
        ASSERT_TRUE(same_bits(row[static_cast<size_t>(c)], bf16_to_f32(ref[static_cast<size_t>(c)])))
            << "layout " << layout << " seed " << seed << " r " << r << " c " << c;
      const float want =
          ref_dot([&](int64_t i) { return bf16_to_f32(ref[static_cast<size_t>(i)]); }, x.data(), C);
      EXPECT_TRUE(same_bits(y[static_cast<size_t>(r)], want))
          << "layout " << layout << " seed " << seed << " r " << r;
    }
  }
}

// Attention's multi-head kernels: the bits of one call per head (which the test above checks against the
// reference order), for every head count of a pass, widths with and without a tail.
TEST(CpuKernels, MultiHeadAttentionKernelsAreTheSingleHeadCalls) {
  const uint32_t seed = fresh_seed();
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
  };
  for (int64_t n : {128, 72}) {
    for (int nq = 1; nq <= kHeadsPerPass; ++nq) {
      const int64_t nv = 37;
      std::vector<std::vector<float>> q, a, k, v;
      for (int i = 0; i < nq; ++i) q.push_back(fill(n)), a.push_back(fill(nv));
      for (int64_t j = 0; j < nv; ++j) k.push_back(fill(n)), v.push_back(fill(n));
      const float *qp[kHeadsPerPass], *ap[kHeadsPerPass], *kp[4], *vp[64];
      for (int i = 0; i < nq; ++i)
        qp[i] = q[static_cast<size_t>(i)].data(), ap[i] = a[static_cast<size_t>(i)].data();
      for (int r = 0; r < 4; ++r) kp[r] = k[static_cast<size_t>(r)].data();
      for (int64_t j = 0; j < nv; ++j) vp[j] = v[static_cast<size_t>(j)].data();
      float s[kHeadsPerPass * 4], s1[4];
      dot4_heads(qp, nq, kp, 4, n, s);
      std::vector<std::vector<float>> out(static_cast<size_t>(nq),
                                          std::vector<float>(static_cast<size_t>(n)));
      float* op[kHeadsPerPass];
      for (int i = 0; i < nq; ++i) op[i] = out[static_cast<size_t>(i)].data();
      weighted_sum_heads(ap, nq, vp, nv, n, op);
      std::vector<float> want(static_cast<size_t>(n));
      for (int i = 0; i < nq; ++i) {
        dot4(qp[i], kp, n, s1);
        for (int r = 0; r < 4; ++r)
          EXPECT_TRUE(same_bits(s[i * 4 + r], s1[r])) << "seed " << seed << " n " << n << " nq " << nq;
        weighted_sum(ap[i], vp, nv, n, want.data());
        EXPECT_EQ(0, std::memcmp(want.data(), op[i], static_cast<size_t>(n) * sizeof(float)))
            << "seed " << seed << " n " << n << " nq " << nq;
      }
    }
  }
}

// The BF16 fast path's CB rows (cb_rows.h): the bits of the BF16 kernels on the rows decoded to BF16,
// whatever the token count (registers at decode for v2, decoded rows otherwise) and the row block.
TEST(CpuKernels, CbRowsOnTheBf16PathAreTheBf16KernelsOnTheDecodedRows) {
  if (!have_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const uint32_t seed = fresh_seed();
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int variant = 0; variant < 3; ++variant) {
    const int layout = variant == 0 ? 1 : 2;
    const bool shared = variant == 2;  // one table for both sub-indices: the lattice books' decoder
    const int64_t R = 7, C = 512, T = 5;
    CbMatrix cm = make_k16(g, layout, R, C, shared);
    std::vector<uint16_t> rows(static_cast<size_t>(R * C)), ref(static_cast<size_t>(C)),
        xb(static_cast<size_t>(T * C));
    for (auto& v : xb) v = f32_to_bf16(d(g));
    for (int64_t r = 0; r < R; ++r) {
      decode_cb_row_bf16(cm.m, r, rows.data() + r * C);
      gridbook::decode_row(cm.rung, cm.book, cm.data.data() + r * cm.m.row_bytes, C, 0.0f, ref.data());
      ASSERT_EQ(0, std::memcmp(ref.data(), rows.data() + r * C, static_cast<size_t>(C) * 2)) << "row " << r;
    }
    for (int64_t n : {1, 2, 3, 5}) {
      std::vector<float> want(static_cast<size_t>(n * R)), got(static_cast<size_t>(n * R));
      for (int64_t r0 = 0; r0 < R; r0 += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, R - r0));
        bf16_dot_rows(rows.data() + r0 * C, C, nr, xb.data(), n, want.data() + r0, R);
        cb_dot_rows_bf16(cm.m, r0, nr, xb.data(), n, got.data() + r0, R);
      }
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(same_bits(got[i], want[i]))
            << "layout " << layout << " shared " << shared << " tokens " << n << " i " << i;
      // All rows in one call (the matmul's row range): the same bits.
      std::fill(got.begin(), got.end(), 0.0f);
      cb_dot_rows_bf16(cm.m, 0, static_cast<int>(R), xb.data(), n, got.data(), R);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(same_bits(got[i], want[i]))
            << "one call, layout " << layout << " shared " << shared << " tokens " << n << " i " << i;
    }
  }
}

TEST(CpuKernels, PoolRunsEveryTaskOnceWhateverTheThreadCount) {
  const int saved = pool_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (int64_t n : {1, 2, 5, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<int64_t> cost(static_cast<size_t>(n + 1), 0);
      for (int64_t i = 0; i < n; ++i) cost[static_cast<size_t>(i + 1)] = cost[static_cast<size_t>(i)] + i % 7;
      for (const int64_t* c :
           {static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(cost.data())})
        for (int rep = 0; rep < 50; ++rep) {
          parallel_for(
              n,
              [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                  hits[static_cast<size_t>(i)].fetch_add(1);
                  parallel_for(2, [](int64_t, int64_t) {});  // nested: runs inline
                }
              },
              c);
        }
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 100) << threads << " " << n;
    }
  }
  omp_set_num_threads(saved);
}

// Regression (a server segfault): jobs of few chunks alternating with jobs of many, back to back. A worker
// that arrived late for a finished job used to validate its claim against the next job's chunk count while
// that job was being published, then ran a chunk with the finished job's function (its caller's frame gone)
// and counted it as the new job's, so the new job could also return before its last chunk ran. Here every
// task must run exactly once, inside its own parallel_for. Before the fix this failed (or crashed) on every
// run at 3 and 4 threads on a 2-core machine.
TEST(CpuKernels, PoolNeverRunsAChunkOfAFinishedJob) {
  const int saved = pool_threads();
  for (int threads : {3, 4}) {
    omp_set_num_threads(threads);
    std::atomic<int64_t> current{-1}, outside{0}, wrong{0};
    std::vector<std::atomic<int>> hits(64);
    for (int64_t it = 0; it < 400000; ++it) {
      const int64_t n = it % 2 ? 64 : 2;
      for (int64_t i = 0; i < n; ++i) hits[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
      current.store(it);
      parallel_for(n, [&, it](int64_t b, int64_t e) {
        if (current.load() != it) outside.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      current.store(-1);
      for (int64_t i = 0; i < n; ++i) wrong += hits[static_cast<size_t>(i)].load() != 1;
    }
    EXPECT_EQ(outside.load(), 0) << threads << " threads: chunks run outside their parallel_for";
    EXPECT_EQ(wrong.load(), 0) << threads << " threads: tasks not run exactly once";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace gridq::runtime::cpu
