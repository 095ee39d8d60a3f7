// encode_fp4_on_device (cb_gptq_device.h): the NVFP4-CB encoders through the CUDA backend's hook, checked
// like the CPU ones, returned in the CPU encoders' form (codes, planes, decoded weights).
#include "quant/cb_gptq_device.h"

#include "runtime/device.h"

namespace gridq::quant {

Expected<Fp4CbEncoding> encode_fp4_on_device(const gridbook::Codebook& cb, const float* W, int R, int C,
                                             const float* H, int64_t n_tokens, const float* q,
                                             const CbGptqOptions& opt, int refine_passes, bool refine_scales,
                                             DeviceRefined* refined) {
  const runtime::CudaBackendHooks* hooks = runtime::cuda_backend_hooks();
  if (!hooks || !hooks->cb_fp4) return err("--device cuda: this gridq was built without the CUDA backend");
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP4, W, R, C, q));
  if (H && opt.block != gridbook::kSuperblock)
    return err("CB-GPTQ fp4: block is {}; it must be 256 (one superblock, scales searched per block)",
               opt.block);
  const DenseBook book = DenseBook::from(cb);
  if (book.n_sub != 2 || book.sub_dim != 4 || book.entries[0] != book.entries[1])
    return err("codebook {}: the device encoder needs two equal sub-tables of 4-vectors", cb.rung.name());
  const std::vector<double> t = book.flat();
  runtime::CbFp4Request rq;
  rq.W = W;
  rq.R = R;
  rq.C = C;
  rq.H = H;
  rq.n_tokens = n_tokens;
  rq.q = q;
  rq.K = book.entries[0];
  rq.book = t.data();
  rq.damp = opt.damp;
  rq.max_retries = opt.max_retries;
  rq.pilot_rows = opt.two_tier.pilot_rows;
  rq.refits = opt.two_tier.refits;
  rq.refine_passes = refined ? refine_passes : 0;
  rq.refine_scales = refine_scales;
  GRIDQ_ASSIGN_OR_RETURN(runtime::CbFp4Reply rp, hooks->cb_fp4(rq));
  const auto encoding = [&](const std::vector<uint32_t>& sub_idx, const std::vector<uint8_t>& planes) {
    const int nsb = C / gridbook::kSuperblock;
    Fp4CbEncoding enc;
    enc.rows = R;
    enc.cols = C;
    enc.used_identity = rp.identity;
    enc.damp_used = rp.damp_used;
    enc.planes.resize(size_t(R) * nsb);
    for (size_t i = 0; i < enc.planes.size(); ++i) {
      const uint8_t* p = &planes[i * runtime::CbFp4Reply::kPlaneBytes];
      enc.planes[i].E = p[0];
      for (int g = 0; g < gridbook::kFp4Groups; ++g) enc.planes[i].c[g] = p[1 + g];
    }
    enc.codes = compose_codes(book, sub_idx.data(), R, C);
    enc.w_hat = decode_fp4(book, sub_idx.data(), enc.planes.data(), R, C);
    return enc;
  };
  Fp4CbEncoding enc = encoding(rp.sub_idx, rp.planes);
  if (refined && rp.refined) {
    refined->ran = true;
    refined->enc = encoding(rp.refined_sub_idx, rp.refined_planes);
    refined->result.f_before = rp.f_before;
    refined->result.f_after = rp.f_after;
    refined->result.rounds = rp.rounds;
    refined->result.codes_changed = rp.codes_changed;
    refined->result.scales_changed = rp.scales_changed;
  }
  return enc;
}

}  // namespace gridq::quant
