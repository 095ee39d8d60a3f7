#include "quant/cb_gptq.h"

#include <cmath>
#include <limits>

#include "core/numerics.h"
#include "quant/hessian_factor.h"

namespace gridq::quant {
namespace {

constexpr int kSB = gridbook::kSuperblock;

// Inverse of the upper-triangular d×d block U[c..c+d, c..c+d] (row-major, ld = C) by back substitution.
void invert_upper_block(const double* U, int64_t ld, int d, double* A /*[d, d]*/) {
  for (int i = 0; i < d * d; ++i) A[i] = 0.0;
  for (int j = 0; j < d; ++j) {  // column j of A: solve U·a = e_j
    A[j * d + j] = 1.0 / U[j * ld + j];
    for (int i = j - 1; i >= 0; --i) {
      double s = 0.0;
      for (int k = i + 1; k <= j; ++k) s += U[i * ld + k] * A[k * d + j];
      A[i * d + j] = -s / U[i * ld + i];
    }
  }
}

Status check_finite(const float* p, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return err("{}: element {} is not finite", what, i);
  return Status();
}

Status check_importance(const float* q, int C) {
  for (int j = 0; j < C; ++j)
    if (!std::isfinite(q[j]) || q[j] < 0.0f)
      return err("importance q: column {} is {}; q must be finite and >= 0", j, q[j]);
  return Status();
}

Status check_shape(const gridbook::Codebook& cb, gridbook::Grid grid, int R, int C) {
  if (cb.rung.grid != grid || cb.rung.mode != gridbook::Mode::Product)
    return err("codebook {}: this encoder needs a product {} rung", cb.rung.name(),
               grid == gridbook::Grid::FP4 ? "NVFP4_CB" : "FP8_CB");
  if (grid == gridbook::Grid::FP4 && cb.rung.layout_version != 2)
    return err("codebook {}: the fp4 encoder writes two-tier v2 planes; layout_version is {}", cb.rung.name(),
               cb.rung.layout_version);
  if (R <= 0 || C <= 0 || C % kSB != 0)
    return err("weight [{}, {}]: CB needs rows > 0 and in_features % 256 == 0", R, C);
  return Status();
}

std::vector<double> to_double(const float* W, int64_t n) { return std::vector<double>(W, W + n); }

}  // namespace

Status check_cb_inputs(const gridbook::Codebook& cb, gridbook::Grid grid, const float* W, int R, int C,
                       const float* q) {
  GRIDQ_RETURN_IF_ERROR(check_shape(cb, grid, R, C));
  GRIDQ_RETURN_IF_ERROR(check_finite(W, int64_t(R) * C, "weight"));
  return check_importance(q, C);
}

std::vector<uint64_t> compose_codes(const DenseBook& book, const uint32_t* sub_idx, int R, int C) {
  const int ncw = C / gridbook::kVecDim;
  std::vector<uint64_t> codes(size_t(R) * ncw);
  for (int64_t i = 0; i < int64_t(R) * ncw; ++i) codes[i] = book.compose(sub_idx + i * book.n_sub);
  return codes;
}

// fp4: w = bf16_rn(v · scale_g) from the sub-indices and planes.
std::vector<float> decode_fp4(const DenseBook& book, const uint32_t* sub_idx, const gridbook::V2Plane* planes,
                              int R, int C) {
  const int d = book.sub_dim;
  const int nv = C / d;
  std::vector<float> w(size_t(R) * C);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < nv; ++v) {
      const int col = v * d;
      const gridbook::V2Plane& p = planes[size_t(r) * (C / kSB) + col / kSB];
      const float s = gridbook::v2_scale(p.E, p.c[(col % kSB) / gridbook::kFp4Group]);
      const double* t = &book.t[v % book.n_sub][size_t(sub_idx[size_t(r) * nv + v]) * d];
      for (int j = 0; j < d; ++j) w[size_t(r) * C + col + j] = bf16_round(static_cast<float>(t[j]) * s);
    }
  return w;
}

GptqCoreResult gptq_core(const float* W, const double* U, const DenseBook& book, const GptqCoreSpec& spec,
                         const BlockScaleFn& scales) {
  const int R = spec.rows;
  const int C = spec.cols;
  const int d = book.sub_dim;
  const int nslab = C / d;
  const int block = spec.block;
  const int per_block = block / d;                        // slabs per full block
  std::vector<double> Wd = to_double(W, int64_t(R) * C);  // [R, C] compensated weights
  GptqCoreResult res;
  res.sub_idx.assign(size_t(R) * nslab, 0);
  res.Q.assign(size_t(R) * C, 0.0);
  std::vector<double> slab_scale(size_t(R) * per_block);  // [R, block / d]
  int maxK = 0;
  for (int K : book.entries) maxK = std::max(maxK, K);
  // Per-step tables of one block, shared by all rows: A = U_SS⁻¹ [d, d], T' = T·A [K, d], ‖T'_k‖² [K].
  std::vector<double> A(size_t(per_block) * d * d), Tp(size_t(per_block) * maxK * d),
      nk(size_t(per_block) * maxK);

  for (int b0 = 0; b0 < C; b0 += block) {
    const int b1 = std::min(C, b0 + block);
    const int nb = b1 - b0;
    scales(b0, b1, Wd.data(), slab_scale.data());
    for (int st = 0; st < nb / d; ++st) {
      const int c = b0 + st * d;
      const int sub = (c / d) % book.n_sub;
      const double* T = book.t[sub].data();  // [K, d]
      double* As = &A[size_t(st) * d * d];
      if (U) {
        invert_upper_block(U + int64_t(c) * C + c, C, d, As);
      } else {
        for (int i = 0; i < d * d; ++i) As[i] = (i % (d + 1) == 0) ? 1.0 : 0.0;
      }
      for (int k = 0; k < book.entries[sub]; ++k) {
        double n2 = 0.0;
        for (int j = 0; j < d; ++j) {
          double s = 0.0;
          for (int i = 0; i <= j; ++i) s += T[size_t(k) * d + i] * As[i * d + j];
          Tp[(size_t(st) * maxK + k) * d + j] = s;
          n2 += s * s;
        }
        nk[size_t(st) * maxK + k] = n2;
      }
    }
    // Rows are independent given the shared step tables: one parallel region per block.
#pragma omp parallel
    {
      std::vector<double> Err(nb);           // this row's slab errors · A over the block
      std::vector<double> acc(C - b1, 0.0);  // trailing-update accumulator
#pragma omp for schedule(static)
      for (int r = 0; r < R; ++r) {
        double* w = &Wd[size_t(r) * C];
        for (int st = 0; st < nb / d; ++st) {
          const int c = b0 + st * d;
          const int sub = (c / d) % book.n_sub;
          const int K = book.entries[sub];
          const double* T = book.t[sub].data();
          const double* As = &A[size_t(st) * d * d];
          const double* Tps = &Tp[size_t(st) * maxK * d];
          const double* nks = &nk[size_t(st) * maxK];
          const double s = slab_scale[size_t(r) * per_block + st];
          double y[8], qv[8], e[8];
          for (int j = 0; j < d; ++j) {
            double a = 0.0;
            for (int i = 0; i <= j; ++i) a += (w[c + i] / s) * As[i * d + j];
            y[j] = a;
          }
          double best = std::numeric_limits<double>::infinity();
          int bk = 0;
          for (int k = 0; k < K; ++k) {
            double dot = 0.0;
            for (int j = 0; j < d; ++j) dot += y[j] * Tps[size_t(k) * d + j];
            const double score = nks[k] - 2.0 * dot;
            if (score < best) {
              best = score;
              bk = k;
            }
          }
          res.sub_idx[size_t(r) * nslab + c / d] = static_cast<uint32_t>(bk);
          for (int j = 0; j < d; ++j) {
            const double t = T[size_t(bk) * d + j];
            qv[j] = spec.bf16_decode
                        ? static_cast<double>(bf16_round(static_cast<float>(t) * static_cast<float>(s)))
                        : t * s;
            res.Q[size_t(r) * C + c + j] = qv[j];
          }
          for (int j = 0; j < d; ++j) {
            double a = 0.0;
            for (int i = 0; i <= j; ++i) a += (w[c + i] - qv[i]) * As[i * d + j];
            e[j] = a;
            Err[c - b0 + j] = a;
          }
          if (U) {  // feedback inside the block: W[S_end:b1] −= e·U[S, S_end:b1]
            for (int col = c + d; col < b1; ++col) {
              double a = 0.0;
              for (int i = 0; i < d; ++i) a += e[i] * U[int64_t(c + i) * C + col];
              w[col] -= a;
            }
          }
        }
        if (U && b1 < C) {
          // Lazy trailing update W[b1:] −= Err[B]·U[B, b1:], each element summed over B in column order.
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int i = 0; i < nb; ++i) {
            const double ei = Err[i];
            const double* u = U + int64_t(b0 + i) * C + b1;
            for (int col = 0; col < C - b1; ++col) acc[col] += ei * u[col];
          }
          for (int col = 0; col < C - b1; ++col) w[b1 + col] -= acc[col];
        }
      }
    }
  }
  return res;
}

// ---- fp4 ----

Expected<Fp4CbEncoding> encode_fp4_rtn(const gridbook::Codebook& cb, const float* W, int R, int C,
                                       const float* q, const TwoTierOptions& opt) {
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP4, W, R, C, q));
  const DenseBook book = DenseBook::from(cb);
  const std::vector<double> Wd = to_double(W, int64_t(R) * C);
  const double m2 = pilot_m2(Wd.data(), C, R, C, q, book, opt);
  const int nsb = C / kSB;
  const int nv_sb = kSB / book.sub_dim;
  Fp4CbEncoding enc;
  enc.rows = R;
  enc.cols = C;
  enc.planes.resize(size_t(R) * nsb);
  std::vector<uint32_t> sub_idx(size_t(R) * (C / book.sub_dim));
  std::vector<gridbook::V2Plane> planes(R);
  std::vector<uint32_t> idx(size_t(R) * nv_sb);
  for (int b = 0; b < nsb; ++b) {
    two_tier_search_superblock(Wd.data() + b * kSB, C, R, q + b * kSB, book, m2, opt, planes.data(),
                               idx.data());
    for (int r = 0; r < R; ++r) {
      enc.planes[size_t(r) * nsb + b] = planes[r];
      for (int v = 0; v < nv_sb; ++v)
        sub_idx[size_t(r) * (C / book.sub_dim) + size_t(b) * nv_sb + v] = idx[size_t(r) * nv_sb + v];
    }
  }
  enc.codes = compose_codes(book, sub_idx.data(), R, C);
  enc.w_hat = decode_fp4(book, sub_idx.data(), enc.planes.data(), R, C);
  return enc;
}

Expected<Fp4CbEncoding> encode_fp4_cb_gptq(const gridbook::Codebook& cb, const float* W, int R, int C,
                                           const float* H, int64_t n_tokens, const float* q,
                                           const CbGptqOptions& opt) {
  GRIDQ_RETURN_IF_ERROR(check_cb_inputs(cb, gridbook::Grid::FP4, W, R, C, q));
  if (opt.block != kSB)
    return err("CB-GPTQ fp4: block is {}; it must be 256 (one superblock, scales searched per block)",
               opt.block);
  GRIDQ_ASSIGN_OR_RETURN(InverseFactor f,
                         inverse_cholesky_upper(H, C, n_tokens, opt.damp, opt.max_retries, "H"));
  const DenseBook book = DenseBook::from(cb);
  const double m2 = [&] {
    const std::vector<double> Wd = to_double(W, int64_t(std::min(R, opt.two_tier.pilot_rows)) * C);
    return pilot_m2(Wd.data(), C, std::min(R, opt.two_tier.pilot_rows), C, q, book, opt.two_tier);
  }();
  const int nsb = C / kSB;
  const int d = book.sub_dim;
  Fp4CbEncoding enc;
  enc.rows = R;
  enc.cols = C;
  enc.used_identity = f.identity;
  enc.damp_used = f.damp_used;
  enc.planes.resize(size_t(R) * nsb);
  std::vector<gridbook::V2Plane> planes(R);
  auto scale_fn = [&](int b0, int /*b1*/, const double* Wc, double* slab_scale) {
    two_tier_search_superblock(Wc + b0, C, R, q + b0, book, m2, opt.two_tier, planes.data(), nullptr);
    for (int r = 0; r < R; ++r) {
      enc.planes[size_t(r) * nsb + b0 / kSB] = planes[r];
      for (int s = 0; s < kSB / d; ++s)
        slab_scale[size_t(r) * (kSB / d) + s] =
            gridbook::v2_scale(planes[r].E, planes[r].c[s * d / gridbook::kFp4Group]);
    }
  };
  GptqCoreSpec spec;
  spec.rows = R;
  spec.cols = C;
  spec.block = kSB;
  spec.bf16_decode = true;
  const GptqCoreResult res = gptq_core(W, f.identity ? nullptr : f.U.data(), book, spec, scale_fn);
  enc.codes = compose_codes(book, res.sub_idx.data(), R, C);
  enc.w_hat = decode_fp4(book, res.sub_idx.data(), enc.planes.data(), R, C);
  return enc;
}

Expected<std::vector<uint8_t>> pack_superblocks(const gridbook::Rung& rung, int rows, int cols,
                                                const std::vector<uint64_t>& codes,
                                                const SuperblockEncoder& encode) {
  const int nsb = cols / kSB;
  const int ts = rung.type_size();
  std::vector<uint8_t> out(size_t(rows) * nsb * ts);
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < nsb; ++b) {
      const size_t sb = size_t(r) * nsb + b;
      std::span<const uint64_t> c(codes.data() + sb * gridbook::kCodewords, gridbook::kCodewords);
      GRIDQ_RETURN_IF_ERROR(encode(sb, c, out.data() + sb * ts));
    }
  return out;
}

Expected<std::vector<uint8_t>> pack_fp4_v2(const gridbook::Rung& rung, const Fp4CbEncoding& enc) {
  if (rung.grid != gridbook::Grid::FP4 || rung.layout_version != 2)
    return err("pack_fp4_v2: rung {} is not an fp4 v2 rung", rung.name());
  return pack_superblocks(rung, enc.rows, enc.cols, enc.codes,
                          [&](size_t sb, std::span<const uint64_t> codes, uint8_t* dst) {
                            const gridbook::V2Plane& p = enc.planes[sb];
                            return gridbook::encode_superblock_fp4_v2(rung, codes, p.E, p.c.data(), dst);
                          });
}

// ---- fp8-cb ----

Expected<Fp4CbEncoding> encode_fp4_gated(const gridbook::Codebook& cb, const float* W, int R, int C,
                                         const float* H, int64_t n_tokens, const float* q,
                                         const float* X_hold, int64_t n_hold, const CbGptqOptions& opt,
                                         GateOutcome* outcome) {
  GRIDQ_ASSIGN_OR_RETURN(Fp4CbEncoding g, encode_fp4_cb_gptq(cb, W, R, C, H, n_tokens, q, opt));
  GRIDQ_ASSIGN_OR_RETURN(Fp4CbEncoding nn, encode_fp4_rtn(cb, W, R, C, q, opt.two_tier));
  GateOutcome o;
  o.mse_gptq = holdout_output_mse(X_hold, n_hold, W, g.w_hat.data(), R, C);
  o.mse_nn = holdout_output_mse(X_hold, n_hold, W, nn.w_hat.data(), R, C);
  o.kept_gptq = o.mse_gptq <= o.mse_nn;
  if (outcome) *outcome = o;
  return o.kept_gptq ? std::move(g) : std::move(nn);
}

}  // namespace gridq::quant
