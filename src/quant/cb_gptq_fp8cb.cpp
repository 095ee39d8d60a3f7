// FP8-CB encoders (cb_gptq.h): round-to-nearest and CB-GPTQ with one E4M3 scale per row, and the packing.
#include <cmath>

#include "core/numerics.h"
#include "quant/cb_gptq.h"
#include "quant/hessian_factor.h"
#include "quant/scale_search_v2.h"
#include "runtime/device.h"

namespace gridq::quant {

namespace {

constexpr int kSB = gridbook::kSuperblock;

// fp8: w = bf16_rn(fl32(v · row_scale)).
std::vector<float> decode_fp8(const DenseBook& book, const uint32_t* sub_idx, const float* row_scale, int R,
                              int C) {
  const int d = book.sub_dim;
  const int nv = C / d;
  std::vector<float> w(size_t(R) * C);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < nv; ++v) {
      const double* t = &book.t[v % book.n_sub][size_t(sub_idx[size_t(r) * nv + v]) * d];
      for (int j = 0; j < d; ++j)
        w[size_t(r) * C + v * d + j] = bf16_round(static_cast<float>(t[j]) * row_scale[r]);
    }
  return w;
}

Fp8CbEncoding finish_fp8(const DenseBook& book, const uint32_t* sub_idx, std::vector<float> row_scale, int R,
                         int C) {
  Fp8CbEncoding enc;
  enc.rows = R;
  enc.cols = C;
  enc.codes = compose_codes(book, sub_idx, R, C);
  enc.w_hat = decode_fp8(book, sub_idx, row_scale.data(), R, C);
  enc.row_scale = std::move(row_scale);
  return enc;
}

}  // namespace

Expected<Fp8CbEncoding> encode_fp8cb_rtn(const gridbook::Codebook& cb, const float* W, int R, int C,
                                         const float* q, int refits) {
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP8, W, R, C, q));
  const DenseBook book = DenseBook::from(cb);
  const std::vector<double> Wd(W, W + int64_t(R) * C);
  std::vector<float> scale(R);
  fp8cb_row_scales(Wd.data(), C, R, C, q, book, refits, scale.data());
  const int nv = C / book.sub_dim;
  std::vector<uint32_t> sub_idx(size_t(R) * nv);
  std::vector<double> qd(q, q + C);
  double qs = 0.0;
  for (double v : qd) qs += v;
  if (!(qs > 0.0)) std::fill(qd.begin(), qd.end(), 1.0);  // same fallback as the scale search
#pragma omp parallel
  {
    std::vector<double> sc(nv);
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      std::fill(sc.begin(), sc.end(), static_cast<double>(scale[r]));
      nearest_entries(&Wd[size_t(r) * C], qd.data(), nv, sc.data(), book, &sub_idx[size_t(r) * nv]);
    }
  }
  return finish_fp8(book, sub_idx.data(), std::move(scale), R, C);
}

Expected<Fp8CbEncoding> encode_fp8cb_cb_gptq(const gridbook::Codebook& cb, const float* W, int R, int C,
                                             const float* H, int64_t n_tokens, const float* q,
                                             const CbGptqOptions& opt) {
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP8, W, R, C, q));
  if (opt.block <= 0 || opt.block % kSB != 0)
    return err("CB-GPTQ fp8: block {} is not a multiple of 256", opt.block);
  GRIDQ_ASSIGN_OR_RETURN(InverseFactor f,
                         inverse_cholesky_upper(H, C, n_tokens, opt.damp, opt.max_retries, "H"));
  const DenseBook book = DenseBook::from(cb);
  std::vector<float> scale(R);
  {
    const std::vector<double> Wd(W, W + int64_t(R) * C);
    fp8cb_row_scales(Wd.data(), C, R, C, q, book, opt.two_tier.refits, scale.data());
  }
  const int d = book.sub_dim;
  auto scale_fn = [&](int b0, int b1, const double*, double* slab_scale) {
    const int per = opt.block / d;
    for (int r = 0; r < R; ++r)
      for (int s = 0; s < (b1 - b0) / d; ++s) slab_scale[size_t(r) * per + s] = scale[r];
  };
  GptqCoreSpec spec;
  spec.rows = R;
  spec.cols = C;
  spec.block = opt.block;
  spec.bf16_decode = true;
  const GptqCoreResult res = gptq_core(W, f.identity ? nullptr : f.U.data(), book, spec, scale_fn);
  Fp8CbEncoding enc = finish_fp8(book, res.sub_idx.data(), std::move(scale), R, C);
  enc.used_identity = f.identity;
  enc.damp_used = f.damp_used;
  return enc;
}

bool fp8cb_gptq_on_device_covers(const gridbook::Codebook& cb, const CbGptqOptions& opt) {
  return opt.block == kSB && cb.rung.grid == gridbook::Grid::FP8 && cb.rung.mode == gridbook::Mode::Product &&
         cb.rung.sub_dim() == 2;
}

Expected<FixedScaleGptq> fixed_scale_gptq_on_device(const float* W, int R, int C, const float* H,
                                                    int64_t n_tokens, const float* row_scale,
                                                    const DenseBook& book, bool bf16_decode, double damp,
                                                    int max_retries) {
  const runtime::CudaBackendHooks* hooks = runtime::cuda_backend_hooks();
  if (!hooks || !hooks->fp8_gptq) return err("--device cuda: this gridq was built without the CUDA backend");
  std::vector<double> tables;
  for (const auto& t : book.t) tables.insert(tables.end(), t.begin(), t.end());
  runtime::Fp8GptqRequest rq;
  rq.W = W;
  rq.R = R;
  rq.C = C;
  rq.H = H;
  rq.n_tokens = n_tokens;
  rq.scale = row_scale;
  rq.sub_dim = book.sub_dim;
  rq.entries = book.entries;
  rq.tables = tables.data();
  rq.bf16_decode = bf16_decode;
  rq.damp = damp;
  rq.max_retries = max_retries;
  GRIDQ_ASSIGN_OR_RETURN(runtime::Fp8GptqReply rp, hooks->fp8_gptq(rq));
  const size_t nv = size_t(C / book.sub_dim), n = size_t(R) * nv;
  if (rp.idx.size() != n) return err("GPTQ on the GPU: {} indices for [{}, {}]", rp.idx.size(), R, C);
  for (size_t i = 0; i < n; ++i) {
    const int sub = static_cast<int>((i % nv) % book.n_sub);
    if (rp.idx[i] >= book.entries[sub])
      return err("GPTQ on the GPU: index {} outside sub-table {}", rp.idx[i], sub);
  }
  FixedScaleGptq out;
  out.sub_idx.assign(rp.idx.begin(), rp.idx.end());
  out.identity = rp.identity;
  out.damp_used = rp.damp_used;
  return out;
}

Expected<Fp8CbEncoding> encode_fp8cb_cb_gptq_on_device(const gridbook::Codebook& cb, const float* W, int R,
                                                       int C, const float* H, int64_t n_tokens,
                                                       const float* q, const CbGptqOptions& opt) {
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP8, W, R, C, q));
  if (!fp8cb_gptq_on_device_covers(cb, opt))
    return err("CB-GPTQ fp8 on the GPU: block {} and {} ({}-vectors); it covers block 256 and 2-vectors",
               opt.block, cb.rung.name(), cb.rung.sub_dim());
  const DenseBook book = DenseBook::from(cb);
  std::vector<float> scale(R);
  {
    const std::vector<double> Wd(W, W + int64_t(R) * C);
    fp8cb_row_scales(Wd.data(), C, R, C, q, book, opt.two_tier.refits, scale.data());
  }
  GRIDQ_ASSIGN_OR_RETURN(FixedScaleGptq g, fixed_scale_gptq_on_device(W, R, C, H, n_tokens, scale.data(),
                                                                      book, true, opt.damp, opt.max_retries));
  Fp8CbEncoding enc = finish_fp8(book, g.sub_idx.data(), std::move(scale), R, C);
  enc.used_identity = g.identity;
  enc.damp_used = g.damp_used;
  return enc;
}

Expected<std::vector<uint8_t>> pack_fp8cb(const gridbook::Rung& rung, const Fp8CbEncoding& enc) {
  if (rung.grid != gridbook::Grid::FP8) return err("pack_fp8cb: rung {} is not an fp8 rung", rung.name());
  return pack_superblocks(rung, enc.rows, enc.cols, enc.codes,
                          [&](size_t, std::span<const uint64_t> codes, uint8_t* dst) {
                            return gridbook::encode_superblock_fp8(rung, codes, dst);
                          });
}

// ---- gate ----

}  // namespace gridq::quant
