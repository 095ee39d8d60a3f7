// encode_fp4_on_device and encode_fp4_batch_on_device (cb_gptq_device.h): the NVFP4-CB encoders through the
// CUDA backend's hooks, checked like the CPU ones, returned in the CPU encoders' form (codes, planes, decoded
// weights).
#include "quant/cb_gptq_device.h"

#include "runtime/device.h"

namespace gridq::quant {

namespace {

// The CPU encoders' form of a device encoding: composed codewords and decoded weights, or (`lazy`, a batch
// candidate) the sub-indices that decode_candidate turns into them if the candidate is kept.
Fp4CbEncoding fp4_encoding(const DenseBook& book, int R, int C, const std::vector<uint32_t>& sub_idx,
                           const std::vector<uint8_t>& planes, bool identity, double damp,
                           bool lazy = false) {
  const int nsb = C / gridbook::kSuperblock;
  Fp4CbEncoding enc;
  enc.rows = R;
  enc.cols = C;
  enc.used_identity = identity;
  enc.damp_used = damp;
  enc.planes.resize(size_t(R) * nsb);
  for (size_t i = 0; i < enc.planes.size(); ++i) {
    const uint8_t* p = &planes[i * runtime::CbFp4Reply::kPlaneBytes];
    enc.planes[i].E = p[0];
    for (int g = 0; g < gridbook::kFp4Groups; ++g) enc.planes[i].c[g] = p[1 + g];
  }
  if (lazy) {
    enc.sub_idx = sub_idx;
    return enc;
  }
  enc.codes = compose_codes(book, sub_idx.data(), R, C);
  enc.w_hat = decode_fp4(book, sub_idx.data(), enc.planes.data(), R, C);
  return enc;
}

runtime::CbFp4Settings device_settings(const DenseBook& book, const std::vector<double>& t,
                                       const CbGptqOptions& opt, int refine_passes, bool refine_scales) {
  runtime::CbFp4Settings s;
  s.K = book.entries[0];
  s.book = t.data();
  s.damp = opt.damp;
  s.max_retries = opt.max_retries;
  s.pilot_rows = opt.two_tier.pilot_rows;
  s.refits = opt.two_tier.refits;
  s.refine_passes = refine_passes;
  s.refine_scales = refine_scales;
  return s;
}

RefineResult refine_result(const runtime::CbFp4Reply& rp) {
  RefineResult r;
  r.f_before = rp.f_before;
  r.f_after = rp.f_after;
  r.rounds = rp.rounds;
  r.codes_changed = rp.codes_changed;
  r.scales_changed = rp.scales_changed;
  return r;
}

// The hooks and the book the device encoders take (two equal sub-tables of 4-vectors), or why not.
Expected<const runtime::CudaBackendHooks*> device_hooks(const gridbook::Codebook& cb,
                                                        const CbGptqOptions& opt, bool gptq, bool batch) {
  const runtime::CudaBackendHooks* hooks = runtime::cuda_backend_hooks();
  if (!hooks || !(batch ? static_cast<bool>(hooks->cb_fp4_batch) : static_cast<bool>(hooks->cb_fp4)))
    return err("--device cuda: this gridq was built without the CUDA backend");
  if (gptq && opt.block != gridbook::kSuperblock)
    return err("CB-GPTQ fp4: block is {}; it must be 256 (one superblock, scales searched per block)",
               opt.block);
  const DenseBook book = DenseBook::from(cb);
  if (book.n_sub != 2 || book.sub_dim != 4 || book.entries[0] != book.entries[1])
    return err("codebook {}: the device encoder needs two equal sub-tables of 4-vectors", cb.rung.name());
  return hooks;
}

}  // namespace

void decode_candidate(const gridbook::Codebook& cb, Fp4CbEncoding& enc) {
  if (enc.sub_idx.empty()) return;
  const DenseBook book = DenseBook::from(cb);
  enc.codes = compose_codes(book, enc.sub_idx.data(), enc.rows, enc.cols);
  enc.w_hat = decode_fp4(book, enc.sub_idx.data(), enc.planes.data(), enc.rows, enc.cols);
  std::vector<uint32_t>().swap(enc.sub_idx);
}

bool device_encodes(const gridbook::Rung& rung) {
  return rung.grid == gridbook::Grid::FP4 && rung.layout_version == 2 &&
         rung.mode == gridbook::Mode::Product &&
         (rung.k == 12 || rung.k == 16 || rung.k == 20 || rung.k == 24);
}

Expected<Fp4CbEncoding> encode_fp4_on_device(const gridbook::Codebook& cb, const float* W, int R, int C,
                                             const float* H, int64_t n_tokens, const float* q,
                                             const CbGptqOptions& opt, int refine_passes, bool refine_scales,
                                             DeviceRefined* refined) {
  GRIDQ_ASSIGN_OR_RETURN(const runtime::CudaBackendHooks* hooks, device_hooks(cb, opt, H != nullptr, false));
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP4, W, R, C, q));
  const DenseBook book = DenseBook::from(cb);
  const std::vector<double> t = book.flat();
  runtime::CbFp4Request rq;
  rq.W = W;
  rq.R = R;
  rq.C = C;
  rq.H = H;
  rq.n_tokens = n_tokens;
  rq.q = q;
  rq.s = device_settings(book, t, opt, refined ? refine_passes : 0, refine_scales);
  GRIDQ_ASSIGN_OR_RETURN(runtime::CbFp4Reply rp, hooks->cb_fp4(rq));
  Fp4CbEncoding enc = fp4_encoding(book, R, C, rp.sub_idx, rp.planes, rp.identity, rp.damp_used);
  if (refined && rp.refined) {
    refined->ran = true;
    refined->enc = fp4_encoding(book, R, C, rp.refined_sub_idx, rp.refined_planes, rp.identity, rp.damp_used);
    refined->result = refine_result(rp);
  }
  return enc;
}

Expected<DeviceFp4Batch> encode_fp4_batch_on_device(const gridbook::Codebook& cb, int R, int C,
                                                    const std::vector<const float*>& W,
                                                    const std::vector<int>& h_of,
                                                    const std::vector<const InputStats*>& in,
                                                    const CbGptqOptions& opt, int refine_passes,
                                                    bool refine_scales, bool gptq, bool rtn) {
  GRIDQ_ASSIGN_OR_RETURN(const runtime::CudaBackendHooks* hooks, device_hooks(cb, opt, gptq, true));
  if (W.size() != h_of.size())
    return err("device batch: {} matrices, {} input indices", W.size(), h_of.size());
  for (size_t m = 0; m < W.size(); ++m) {
    if (h_of[m] < 0 || static_cast<size_t>(h_of[m]) >= in.size() || !in[static_cast<size_t>(h_of[m])])
      return err("device batch: matrix {} names input {} of {}", m, h_of[m], in.size());
    const InputStats& s = *in[static_cast<size_t>(h_of[m])];
    if (s.cols != C || s.H.size() != size_t(C) * C || s.imatrix.size() != size_t(C) ||
        s.holdout.size() != size_t(s.n_hold) * C)
      return err("device batch: input '{}' does not have {} features with H, imatrix and holdout", s.name, C);
    GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP4, W[m], R, C, s.imatrix.data()));
  }
  const DenseBook book = DenseBook::from(cb);
  const std::vector<double> t = book.flat();
  runtime::CbFp4BatchRequest rq;
  rq.R = R;
  rq.C = C;
  rq.W = W;
  rq.h_of = h_of;
  for (const InputStats* s : in) {
    rq.H.push_back(s->H.data());
    rq.n_tokens.push_back(s->n);
    rq.q.push_back(s->imatrix.data());
    rq.hold.push_back(s->n_hold > 0 ? s->holdout.data() : nullptr);
    rq.n_hold.push_back(s->n_hold);
  }
  rq.s = device_settings(book, t, opt, gptq ? refine_passes : 0, refine_scales);
  rq.gptq = gptq;
  rq.rtn = rtn;
  DeviceFp4Batch out;
  GRIDQ_ASSIGN_OR_RETURN(out.dev, hooks->cb_fp4_batch(rq));
  const auto& ms = out.dev->matrices();
  out.m.resize(ms.size());
  // Every candidate in the CPU encoders' form, one matrix per thread; only the kept one is decoded later
  // (encode_tensor → decode_candidate).
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t m = 0; m < ms.size(); ++m) {
    const runtime::CbFp4BatchMatrix& x = ms[m];
    const bool has_hold = in[static_cast<size_t>(h_of[m])]->n_hold > 0;
    auto tag = [&](Fp4CbEncoding e, int which, double mse) {
      e.candidate = which;
      if (has_hold) e.holdout_mse = mse;
      return e;
    };
    DeviceFp4Candidates& c = out.m[m];
    if (gptq) {
      c.gptq =
          tag(fp4_encoding(book, R, C, x.enc.sub_idx, x.enc.planes, x.enc.identity, x.enc.damp_used, true),
              runtime::DeviceCbBatch::kGptq, x.mse_gptq);
      if (x.enc.refined) {
        c.refined.ran = true;
        c.refined.enc = tag(fp4_encoding(book, R, C, x.enc.refined_sub_idx, x.enc.refined_planes,
                                         x.enc.identity, x.enc.damp_used, true),
                            runtime::DeviceCbBatch::kRefined, x.mse_refined);
        c.refined.result = refine_result(x.enc);
      }
    }
    if (rtn || !gptq)
      c.rtn = tag(fp4_encoding(book, R, C, x.rtn_sub_idx, x.rtn_planes, false, 0.0, true),
                  runtime::DeviceCbBatch::kRtn, x.mse_rtn);
  }
  return out;
}

}  // namespace gridq::quant
