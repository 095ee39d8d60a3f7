#include "quant/encode_tensor.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/numerics.h"
#include "io/sha256.h"
#include "quant/cb_act_order.h"
#include "quant/cb_gptq.h"
#include "quant/cb_gptq_device.h"
#include "quant/cb_refine.h"
#include "quant/fp8_weights.h"
#include "quant/output_proxy.h"

namespace gridq::quant {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Holdout output-MSE of an encoding: the one it carries (computed where it was made: the device batch), else
// computed here.
template <class Enc>
double holdout_mse_of(const Enc& e, const float* Xh, int64_t n_hold, const float* W, int R, int C) {
  if constexpr (std::is_same_v<Enc, Fp4CbEncoding>) {
    if (e.holdout_mse) return *e.holdout_mse;
  }
  if constexpr (std::is_same_v<Enc, Fp8Weights>) {
    const std::vector<float> hat = dequantize_fp8(e);
    return holdout_output_mse(Xh, n_hold, W, hat.data(), R, C);
  } else {
    return holdout_output_mse(Xh, n_hold, W, e.w_hat.data(), R, C);
  }
}

// The rule's encoder for every quantized format: CB-GPTQ, gated on held-out output-MSE against the
// no-feedback encoding when holdout rows exist (quantizer.md §5 line 11), or RTN alone (holdout_mse_of
// gives each side's number); the outcome goes into st.gate / st.mse_*.
template <class Enc, class Gptq, class Rtn>
Expected<Enc> run_encoder(bool gptq, bool gate, const Gptq& run_gptq, const Rtn& run_rtn, const float* Xh,
                          int64_t n_hold, const float* W, int R, int C, LinearStats& st) {
  if (!gptq) {
    st.gate = "rtn";
    return run_rtn();
  }
  GRIDQ_ASSIGN_OR_RETURN(Enc g, run_gptq());
  if (!gate) {
    st.gate = "ungated";
    return g;
  }
  GRIDQ_ASSIGN_OR_RETURN(Enc nn, run_rtn());
  st.mse_gptq = holdout_mse_of(g, Xh, n_hold, W, R, C);
  st.mse_nn = holdout_mse_of(nn, Xh, n_hold, W, R, C);
  if (*st.mse_gptq <= *st.mse_nn) {
    st.gate = "kept_gptq";
    return g;
  }
  st.gate = "kept_nn";
  return nn;
}

// CB-GPTQ refinement of an fp4 encoding (cb_refine.h), kept only if it does not raise the holdout
// output-MSE (the refinement lowers the H-weighted error on the calibration rows by construction; the
// holdout rows are what it is judged on). Without holdout rows the refined encoding is kept.
Expected<Fp4CbEncoding> refined_fp4(Fp4CbEncoding g, const gridbook::Codebook& cb, const float* W, int R,
                                    int C, const float* H, const float* Xh, int64_t n_hold,
                                    const CbGptqParams& p, LinearStats& st, DeviceRefined* dev) {
  if (p.refine_passes <= 0 || g.used_identity) return g;
  Fp4CbEncoding r;
  RefineResult rr;
  if (dev && dev->ran) {  // refined on the GPU with the same bytes (cb_gptq_device.h)
    r = std::move(dev->enc);
    rr = dev->result;
  } else {
    r = g;
    RefineOptions ro;
    ro.passes = p.refine_passes;
    ro.scales = p.refine_scales;
    ro.damp = g.damp_used;
    GRIDQ_ASSIGN_OR_RETURN(rr, refine_fp4(cb, W, H, R, C, ro, r));
  }
  bool keep = true;
  nlohmann::json j = {{"f_before", rr.f_before},
                      {"f_after", rr.f_after},
                      {"rounds", rr.rounds},
                      {"codes_changed", rr.codes_changed},
                      {"scales_changed", rr.scales_changed}};
  if (n_hold > 0) {
    const double m0 = holdout_mse_of(g, Xh, n_hold, W, R, C);
    const double m1 = holdout_mse_of(r, Xh, n_hold, W, R, C);
    keep = m1 <= m0;
    j["holdout_mse_before"] = m0;
    j["holdout_mse_after"] = m1;
  }
  j["kept"] = keep;
  st.refine = std::move(j);
  return keep ? std::move(r) : std::move(g);
}

}  // namespace

CbGptqOptions gptq_options(const EncodeParams& p) {
  CbGptqOptions o;
  o.damp = p.cb_gptq.damp;
  o.block = p.cb_gptq.block;
  o.two_tier.pilot_rows = p.two_tier.pilot_rows;
  o.two_tier.refits = p.two_tier.refits;
  return o;
}

nlohmann::json LinearStats::to_json() const {
  nlohmann::json j = {{"format", format}, {"encoder", encoder}, {"gate", gate}};
  if (!input.empty()) {
    j["input"] = input;
    j["n"] = n;
    j["n_hold"] = n_hold;
    j["cold"] = cold;
    j["damp"] = damp;
    j["half_trace"] = half_trace;
  }
  if (mse_gptq) j["holdout_mse_gptq"] = *mse_gptq;
  if (mse_nn) j["holdout_mse_nn"] = *mse_nn;
  if (identity) j["identity"] = {{"kind", identity_kind}, {"value", *identity}};
  if (!refine.is_null()) j["refine"] = refine;
  return j;
}

std::string w_hat_bf16_sha256(std::span<const float> w_hat) {
  std::vector<uint8_t> b(w_hat.size() * 2);
  for (size_t i = 0; i < w_hat.size(); ++i) {
    const uint16_t h = f32_to_bf16(w_hat[i]);
    b[2 * i] = static_cast<uint8_t>(h & 0xFF);
    b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
  return io::sha256_hex(b);
}

Expected<std::vector<float>> source_to_f32(const SourceWeight& w) {
  int64_t n = 1;
  for (int64_t d : w.shape) n *= d;
  const size_t es = io::dtype_size(w.dtype);
  if (w.bytes.size() != static_cast<size_t>(n) * es)
    return err("tensor '{}': {} bytes but shape {} of {} needs {}", w.name, w.bytes.size(),
               shape_str(w.shape), io::dtype_name(w.dtype), static_cast<size_t>(n) * es);
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* p = w.bytes.data();
  switch (w.dtype) {
    case io::DType::BF16:
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 20))
      for (int64_t i = 0; i < n; ++i)
        out[i] = bf16_to_f32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    case io::DType::F16:
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 20))
      for (int64_t i = 0; i < n; ++i)
        out[i] = f16_to_f32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    case io::DType::F32:
      std::memcpy(out.data(), p, out.size() * sizeof(float));
      break;
    default:
      return err("tensor '{}': dtype {} cannot be quantized (BF16, F16 or F32 only)", w.name,
                 io::dtype_name(w.dtype));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return err("tensor '{}': element {} is not finite", w.name, i);
  }
  return out;
}

Expected<EncodedTensor> encode_tensor(const SourceWeight& w, const InputStats* in, const EncodeParams& p,
                                      const gridbook::Codebook* cb, const std::vector<float>* W32,
                                      const DeviceFp4Candidates* pre) {
  EncodedTensor out;
  out.format = p.format;
  out.stats.tensor = w.name;
  out.stats.format = p.format;
  if (p.format == "BF16") {  // "not quantized": the source bytes unchanged, never a cast
    out.shape = w.shape;
    out.dtype = w.dtype;
    out.data.assign(w.bytes.begin(), w.bytes.end());
    out.stats.encoder = "copy";
    out.stats.gate = "copy";
    return out;
  }
  const bool fp8_dynamic = p.format == "FP8_DYNAMIC";
  if (p.cb_gptq.act_order && p.encoder == "cb_gptq" && p.format.rfind("NVFP4_CB_", 0) != 0)
    return err("tensor '{}': encoders.cb_gptq.act_order is implemented for NVFP4_CB_* rules only ({} here)",
               w.name, p.format);
  if (!fp8_dynamic && !is_cb_format(p.format))
    return err("tensor '{}': unknown format '{}' (BF16, FP8_DYNAMIC, NVFP4_CB_K*, FP8_CB_K*)", w.name,
               p.format);
  if (p.encoder != "cb_gptq" && p.encoder != "rtn")
    return err("tensor '{}': unknown encoder '{}' (cb_gptq or rtn)", w.name, p.encoder);
  if (w.shape.size() != 2)
    return err("tensor '{}': {} needs a 2-D weight [R, C], the shape is {}", w.name, p.format,
               shape_str(w.shape));
  if (!in) return err("tensor '{}': {} needs the statistics of its input (none captured)", w.name, p.format);
  const int64_t R64 = w.shape[0], C64 = w.shape[1];
  if (R64 <= 0 || C64 <= 0 || R64 > INT32_MAX || C64 > INT32_MAX)
    return err("tensor '{}': shape {} is not encodable", w.name, shape_str(w.shape));
  const int R = static_cast<int>(R64), C = static_cast<int>(C64);
  if (in->cols != C)
    return err("tensor '{}': weight has C = {} columns but its input '{}' has {} features (wrong capture)",
               w.name, C, in->name, in->cols);
  if (in->n < 0 || in->H.size() != size_t(C) * C || in->imatrix.size() != size_t(C) ||
      in->holdout.size() != size_t(in->n_hold) * C)
    return err("input '{}': statistics have inconsistent sizes (H {}, imatrix {}, holdout {} for C = {})",
               in->name, in->H.size(), in->imatrix.size(), in->holdout.size(), C);

  std::vector<float> own;
  if (!W32) {
    GRIDQ_ASSIGN_OR_RETURN(own, source_to_f32(w));
    W32 = &own;
  }
  const float* W = W32->data();
  const float* H = in->H.data();
  const float* q = in->imatrix.data();
  const float* Xh = in->holdout.data();
  const int64_t n_hold = in->n_hold;
  const bool gptq = p.encoder == "cb_gptq";
  const bool gate = gptq && p.cb_gptq.holdout_gate && n_hold > 0;

  out.rows = R64;
  out.cols = C64;
  out.shape = {R64, C64};
  LinearStats& st = out.stats;
  st.encoder = p.encoder;
  st.input = in->name;
  st.n = in->n;
  st.n_hold = n_hold;
  st.cold = in->n == 0;

  std::optional<double> chosen_mse;  // the kept encoding's holdout MSE, when it carries one
  if (pre && (fp8_dynamic || !is_cb_format(p.format) || p.format.rfind("NVFP4_CB_", 0) != 0))
    return err("tensor '{}': device candidates are for NVFP4-CB rules, not {}", w.name, p.format);
  if (fp8_dynamic) {
    out.dtype = io::DType::F8_E4M3;
    const auto run_gptq = [&] {
      st.damp = in->n > 0 ? p.cb_gptq.damp : 0.0;
      // --device cuda: on the GPU where its blocks are the recipe's (the same bytes), else on the CPU.
      return p.device_encode && fp8_gptq_on_device_covers(C, p.cb_gptq.block)
                 ? quantize_fp8_per_channel_gptq_on_device(W, R, C, H, in->n, p.cb_gptq.damp)
                 : quantize_fp8_per_channel_gptq(W, R, C, H, in->n, p.cb_gptq.damp, p.cb_gptq.block);
    };
    const auto run_rtn = [&] { return quantize_fp8_per_channel(W, R, C); };
    GRIDQ_ASSIGN_OR_RETURN(Fp8Weights chosen,
                           run_encoder<Fp8Weights>(gptq, gate, run_gptq, run_rtn, Xh, n_hold, W, R, C, st));
    out.w_hat = dequantize_fp8(chosen);
    out.data = std::move(chosen.q);
    out.scale = std::move(chosen.scale);
  } else {
    if (!cb) return err("tensor '{}': {} needs a codebook", w.name, p.format);
    const gridbook::Rung rung = cb->rung;
    if (rung.name() != p.format)
      return err("tensor '{}': codebook is {} but the format is {}", w.name, rung.name(), p.format);
    out.rung = rung;
    out.dtype = io::DType::U8;
    const CbGptqOptions opt = gptq_options(p);
    // CB-GPTQ's damping as used (it may be raised on retries) goes into the stats.
    const auto with_damp = [&](auto enc) {
      if (enc.ok()) st.damp = enc->damp_used;
      return enc;
    };
    if (rung.grid == gridbook::Grid::FP4) {
      if (rung.layout_version != 2)
        return err("tensor '{}': {} with v1 scale coding is not implemented by the encoder (use two_tier)",
                   w.name, p.format);
      const bool on_gpu = p.device_encode && device_encodes(rung);
      // The encoder of the problem in its processing order: on the GPU under --device cuda (the same
      // bytes); act order permutes around it on the host.
      const auto gptq_in_order = [&](const float* Wo, const float* Ho, const float* qo) {
        return on_gpu ? encode_fp4_on_device(*cb, Wo, R, C, Ho, in->n, qo, opt)
                      : encode_fp4_cb_gptq(*cb, Wo, R, C, Ho, in->n, qo, opt);
      };
      const auto run_gptq = [&]() -> Expected<Fp4CbEncoding> {
        // The device's own refinement (DeviceRefined) is of the encoding in column order: not with act
        // order, whose refinement runs on the host after the permutation back (refined_fp4).
        const bool dev = (on_gpu && !p.cb_gptq.act_order) || pre;
        DeviceRefined refined;
        if (pre && !pre->gptq) return err("tensor '{}': the device batch has no CB-GPTQ encoding", w.name);
        GRIDQ_ASSIGN_OR_RETURN(
            Fp4CbEncoding g,
            with_damp(pre   ? Expected<Fp4CbEncoding>(*pre->gptq)
                      : dev ? encode_fp4_on_device(*cb, W, R, C, H, in->n, q, opt, p.cb_gptq.refine_passes,
                                                   p.cb_gptq.refine_scales, &refined)
                      : p.cb_gptq.act_order ? encode_fp4_act_order(W, R, C, H, q, gptq_in_order)
                                            : gptq_in_order(W, H, q)));
        if (pre) refined = pre->refined;
        return refined_fp4(std::move(g), *cb, W, R, C, H, Xh, n_hold, p.cb_gptq, st,
                           dev ? &refined : nullptr);
      };
      const auto run_rtn = [&]() -> Expected<Fp4CbEncoding> {
        if (pre) {
          if (!pre->rtn) return err("tensor '{}': the device batch has no RTN encoding", w.name);
          return *pre->rtn;
        }
        return on_gpu ? encode_fp4_on_device(*cb, W, R, C, nullptr, 0, q, opt)
                      : encode_fp4_rtn(*cb, W, R, C, q, opt.two_tier);
      };
      GRIDQ_ASSIGN_OR_RETURN(Fp4CbEncoding enc, run_encoder<Fp4CbEncoding>(gptq, gate, run_gptq, run_rtn, Xh,
                                                                           n_hold, W, R, C, st));
      decode_candidate(*cb, enc);
      GRIDQ_ASSIGN_OR_RETURN(out.data, pack_fp4_v2(rung, enc));
      chosen_mse = enc.holdout_mse;
      out.device_candidate = enc.candidate;
      out.w_hat = std::move(enc.w_hat);
    } else {
      // --device cuda: on the GPU where it covers the rung and the recipe's block (the same bytes).
      const bool dev = p.device_encode && fp8cb_gptq_on_device_covers(*cb, opt);
      const auto run_gptq = [&] {
        return with_damp(dev ? encode_fp8cb_cb_gptq_on_device(*cb, W, R, C, H, in->n, q, opt)
                             : encode_fp8cb_cb_gptq(*cb, W, R, C, H, in->n, q, opt));
      };
      const auto run_rtn = [&] { return encode_fp8cb_rtn(*cb, W, R, C, q, opt.two_tier.refits); };
      GRIDQ_ASSIGN_OR_RETURN(Fp8CbEncoding enc, run_encoder<Fp8CbEncoding>(gptq, gate, run_gptq, run_rtn, Xh,
                                                                           n_hold, W, R, C, st));
      GRIDQ_ASSIGN_OR_RETURN(out.data, pack_fp8cb(rung, enc));
      out.scale = std::move(enc.row_scale);
      out.w_hat = std::move(enc.w_hat);
    }
  }
  // The NN-only number is what the chosen encoding is judged against; for RTN it is the chosen one.
  if (n_hold > 0 && !st.mse_nn) {
    const double mse = chosen_mse ? *chosen_mse : holdout_output_mse(Xh, n_hold, W, out.w_hat.data(), R, C);
    if (gptq) {
      st.mse_gptq = mse;
    } else {
      st.mse_nn = mse;
    }
  }
  if (out.device_candidate >= 0) return out;  // the caller's batch gives its output proxy
  GRIDQ_ASSIGN_OR_RETURN(st.half_trace,
                         output_half_trace_on(p.device_encode, W, out.w_hat.data(), R, C, H, w.name.c_str()));
  return out;
}

}  // namespace gridq::quant
