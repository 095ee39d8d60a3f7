// The GPU NVFP4-CB encoders (runtime/cuda/gptq/gptq.h) against the CPU ones (quant/cb_gptq.h): CB-GPTQ and
// round-to-nearest must choose the same entries and the same v2 planes, byte for byte, for a batch that mixes
// matrices sharing a Hessian, a rank-deficient Hessian, a cold input (no tokens: plain nearest neighbour),
// a row count past the pilot's 256, zero groups, a zero superblock, and both supported rungs; act order
// through the device encoder (quantize --device cuda) gives the CPU's act-order bytes. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "../quant/quant_test_util.h"
#include "cuda_test_util.h"
#include "quant/cb_act_order.h"
#include "quant/cb_gptq.h"
#include "quant/cb_gptq_device.h"
#include "quant/cb_refine.h"
#include "quant/dense_book.h"
#include "quant/lattice_codebook.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/cuda/register.h"

namespace gridq::cuda::test {
namespace {

struct Case {
  int R = 0, C = 0;
  std::vector<int> h_of;
  std::vector<int64_t> n;             // tokens per Hessian
  std::vector<std::vector<float>> W;  // per matrix [R, C]
  std::vector<std::vector<float>> H;  // per Hessian [C, C]
  std::vector<std::vector<float>> q;  // per Hessian [C]
};

Case make_case(int R, int C, uint64_t seed) {
  Case c;
  c.R = R;
  c.C = C;
  c.h_of = {0, 0, 1, 1, 2};
  c.n = {3 * C, C / 2, 0};  // well conditioned, rank-deficient (damping decides), cold
  const quant::testing::Correlated gen(C, seed);
  for (size_t h = 0; h < c.n.size(); ++h) {
    if (c.n[h] > 0) {
      const auto X = gen.rows(c.n[h], seed + 10 + h);
      c.H.push_back(quant::testing::gram(X, c.n[h], C));
    } else {
      c.H.emplace_back(size_t(C) * C, 0.0f);
    }
    std::vector<float> q(C);
    for (int j = 0; j < C; ++j) q[j] = c.n[h] > 0 ? c.H[h][size_t(j) * C + j] / c.n[h] : 0.0f;
    c.q.push_back(q);
  }
  for (size_t m = 0; m < c.h_of.size(); ++m) {
    auto w = quant::testing::gaussian(size_t(R) * C, seed + 100 + m, 0.02);
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < C; ++j)
        if (j % 97 == 3) w[size_t(r) * C + j] *= 12.0f;           // outlier columns
      for (int j = 32; j < 48; ++j) w[size_t(r) * C + j] = 0.0f;  // a zero group in every row
    }
    for (int j = 256; j < 512; ++j) w[size_t(5) * C + j] = 0.0f;  // row 5: a zero superblock
    c.W.push_back(std::move(w));
  }
  return c;
}

template <class T>
DeviceBuffer upload_all(const std::vector<std::vector<T>>& parts) {
  size_t n = 0;
  for (const auto& p : parts) n += p.size();
  auto b = DeviceBuffer::alloc(n * sizeof(T), "test");
  EXPECT_TRUE(b.ok()) << b.message();
  size_t off = 0;
  for (const auto& p : parts) {
    EXPECT_TRUE(b->upload(p.data(), p.size() * sizeof(T), off).ok());
    off += p.size() * sizeof(T);
  }
  return std::move(*b);
}

// The case on the device, as one batch (the buffers stay owned by the struct).
struct DeviceCase {
  DeviceBuffer W, H, q;
  CbGptqBatch job;
  explicit DeviceCase(const Case& c) : W(upload_all(c.W)), H(upload_all(c.H)), q(upload_all(c.q)) {
    job.R = c.R;
    job.C = c.C;
    job.M = static_cast<int>(c.W.size());
    job.nH = static_cast<int>(c.H.size());
    job.W = W.as<float>();
    job.H = H.as<float>();
    job.q = q.as<float>();
    job.h_of = c.h_of;
    job.n_tokens = c.n;
  }
};

CbGptqBook device_book(const quant::DenseBook& book) {
  CbGptqBook gb;
  gb.K = book.entries[0];
  gb.t = book.flat();
  return gb;
}

// Every row's planes and composed codes against the CPU encoding of the same matrix.
void expect_same(const quant::DenseBook& book, const CbGptqResult& g, int m, const quant::Fp4CbEncoding& cpu,
                 int R, int C, const char* what) {
  const int nsb = C / 256, nv = C / 4, ncw = C / 8;
  int bad_planes = 0, bad_codes = 0, first_r = -1;
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < nsb; ++b) {
      const uint8_t* p = &g.planes[((size_t(m) * R + r) * nsb + b) * 17];
      const gridbook::V2Plane& c = cpu.planes[size_t(r) * nsb + b];
      bool same = p[0] == c.E;
      for (int k = 0; k < 16; ++k) same = same && p[1 + k] == c.c[k];
      if (!same && bad_planes++ == 0) first_r = r;
    }
    for (int v = 0; v < ncw; ++v) {
      const uint32_t* si = &g.sub_idx[(size_t(m) * R + r) * nv + v * 2];
      if (book.compose(si) != cpu.codes[size_t(r) * ncw + v] && bad_codes++ == 0 && first_r < 0) first_r = r;
    }
  }
  EXPECT_EQ(bad_planes, 0) << what << " matrix " << m << ": planes differ (first row " << first_r << ")";
  EXPECT_EQ(bad_codes, 0) << what << " matrix " << m << ": codewords differ (first row " << first_r << ")";
}

TEST(CudaCbGptq, SameBytesAsTheCpuEncoders) {
  REQUIRE_GPU();
  auto stream = Stream::create();
  ASSERT_OK(stream);
  // K20 / K24 (1024 / 4096 entries: fewer rows a CTA, entry loops past 1024 threads) on fewer rows: the
  // CPU's encoders are the slow side of the comparison.
  for (const auto& [rung_name, rows] : {std::pair{"NVFP4_CB_K16", 300}, std::pair{"NVFP4_CB_K12", 300},
                                        std::pair{"NVFP4_CB_K20", 48}, std::pair{"NVFP4_CB_K24", 16}}) {
    auto rung = gridbook::parse_rung_name(rung_name, 2);
    ASSERT_OK(rung);
    auto cb = quant::lattice_codebook(*rung);
    ASSERT_OK(cb);
    const quant::DenseBook book = quant::DenseBook::from(*cb);
    const CbGptqBook gb = device_book(book);
    const Case c = make_case(rows, 512, 7);
    const DeviceCase dc(c);
    const CbGptqBatch& job = dc.job;
    const CbGptqSettings opt;
    auto g = cb_gptq_fp4(job, gb, opt, stream->get());
    ASSERT_OK(g);
    auto rtn = cb_rtn_fp4(job, gb, opt, stream->get());
    ASSERT_OK(rtn);
    EXPECT_EQ(g->identity, (std::vector<uint8_t>{0, 0, 1}));
    for (int m = 0; m < job.M; ++m) {
      const int h = c.h_of[m];
      auto cpu =
          quant::encode_fp4_cb_gptq(*cb, c.W[m].data(), c.R, c.C, c.H[h].data(), c.n[h], c.q[h].data());
      ASSERT_OK(cpu);
      EXPECT_EQ(cpu->damp_used, g->damp_used[h]) << rung_name << " H " << h;
      expect_same(book, *g, m, *cpu, c.R, c.C, (std::string(rung_name) + " cb-gptq").c_str());
      auto cpu_rtn = quant::encode_fp4_rtn(*cb, c.W[m].data(), c.R, c.C, c.q[h].data());
      ASSERT_OK(cpu_rtn);
      expect_same(book, *rtn, m, *cpu_rtn, c.R, c.C, (std::string(rung_name) + " rtn").c_str());
    }
  }
}

void refinement_case(const gridbook::Codebook& cb, int rows, cudaStream_t stream);

// The refinement after CB-GPTQ (quant/cb_refine.h, the laguna recipe's 8 passes with scales): the same
// refined entries and planes, and the same objectives and counts, as refine_fp4 on the CPU's encoding.
TEST(CudaCbGptq, RefinementSameBytesAsTheCpu) {
  REQUIRE_GPU();
  auto stream = Stream::create();
  ASSERT_OK(stream);
  auto k24 = quant::lattice_codebook(*gridbook::parse_rung_name("NVFP4_CB_K24", 2));
  ASSERT_OK(k24);
  // K24: the entry norms of 4096 entries, more than a CTA's threads.
  for (const auto& [cb, rows] : {std::pair{quant::testing::k16(), 96}, std::pair{*k24, 16}})
    refinement_case(cb, rows, stream->get());
}

void refinement_case(const gridbook::Codebook& cb, int rows, cudaStream_t stream) {
  SCOPED_TRACE(cb.rung.name());
  const quant::DenseBook book = quant::DenseBook::from(cb);
  const CbGptqBook gb = device_book(book);
  const Case c = make_case(rows, 512, 11);
  const DeviceCase dc(c);
  const CbGptqBatch& job = dc.job;
  CbGptqSettings opt;
  opt.refine_passes = 8;
  opt.refine_scales = true;
  auto g = cb_gptq_fp4(job, gb, opt, stream);
  ASSERT_OK(g);
  ASSERT_EQ(g->refine_skipped.size(), size_t(job.M));
  int refined = 0;
  for (int m = 0; m < job.M; ++m) {
    const int h = c.h_of[m];
    auto cpu = quant::encode_fp4_cb_gptq(cb, c.W[m].data(), c.R, c.C, c.H[h].data(), c.n[h], c.q[h].data());
    ASSERT_OK(cpu);
    EXPECT_EQ(g->refine_skipped[m] != 0, cpu->used_identity) << "matrix " << m;
    if (cpu->used_identity) continue;
    quant::RefineOptions ro;
    ro.passes = 8;
    ro.scales = true;
    ro.damp = cpu->damp_used;
    auto rr = quant::refine_fp4(cb, c.W[m].data(), c.H[h].data(), c.R, c.C, ro, *cpu);
    ASSERT_OK(rr);
    EXPECT_EQ(g->refine_f_before[m], rr->f_before) << "matrix " << m;
    EXPECT_EQ(g->refine_f_after[m], rr->f_after) << "matrix " << m;
    EXPECT_EQ(g->refine_rounds[m], rr->rounds) << "matrix " << m;
    EXPECT_EQ(g->refine_codes[m], rr->codes_changed) << "matrix " << m;
    EXPECT_EQ(g->refine_scales[m], rr->scales_changed) << "matrix " << m;
    EXPECT_GT(rr->codes_changed, 0) << "matrix " << m << ": the case should exercise the refinement";
    CbGptqResult view;
    view.sub_idx = g->refined_sub_idx;
    view.planes = g->refined_planes;
    expect_same(book, view, m, *cpu, c.R, c.C, "refined");
    ++refined;
  }
  EXPECT_EQ(refined, 4);
}

// Act order (quant/cb_act_order.h) around the device encoder, as encode_tensor runs it under --device cuda:
// the same codes, planes and Ŵ as the CPU's act order, for each kind of Hessian of the case.
TEST(CudaCbGptq, ActOrderSameBytesAsTheCpu) {
  REQUIRE_GPU();
  register_backend();
  const gridbook::Codebook cb = quant::testing::k16();
  const Case c = make_case(40, 768, 13);
  for (size_t m : {size_t(0), size_t(2), size_t(4)}) {  // well conditioned, rank-deficient, cold
    const int h = c.h_of[m];
    const float* W = c.W[m].data();
    auto cpu = quant::encode_fp4_cb_gptq_act_order(cb, W, c.R, c.C, c.H[h].data(), c.n[h], c.q[h].data());
    ASSERT_OK(cpu);
    auto gpu = quant::encode_fp4_act_order(
        W, c.R, c.C, c.H[h].data(), c.q[h].data(), [&](const float* Wp, const float* Hp, const float* qp) {
          return quant::encode_fp4_on_device(cb, Wp, c.R, c.C, Hp, c.n[h], qp, quant::CbGptqOptions{});
        });
    ASSERT_OK(gpu);
    EXPECT_TRUE(cpu->codes == gpu->codes) << "matrix " << m;
    EXPECT_TRUE(cpu->w_hat == gpu->w_hat) << "matrix " << m;
    EXPECT_EQ(cpu->damp_used, gpu->damp_used) << "matrix " << m;
    int bad_planes = 0;
    for (size_t i = 0; i < cpu->planes.size(); ++i)
      bad_planes += cpu->planes[i].E != gpu->planes[i].E || cpu->planes[i].c != gpu->planes[i].c;
    EXPECT_EQ(bad_planes, 0) << "matrix " << m;
  }
}

}  // namespace
}  // namespace gridq::cuda::test
