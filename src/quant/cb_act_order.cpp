#include "quant/cb_act_order.h"

#include <algorithm>
#include <numeric>

namespace gridq::quant {
namespace {

constexpr int kSB = gridbook::kSuperblock;
constexpr int kG = gridbook::kFp4Group;
constexpr int kGroupsPerSb = kSB / kG;
constexpr int kCwPerGroup = kG / gridbook::kVecDim;

// Indices 0..n-1 by descending key, ties to the lower index (stable).
std::vector<int> by_descending(const std::vector<double>& key) {
  std::vector<int> o(key.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key[a] > key[b]; });
  return o;
}

}  // namespace

std::vector<int> act_order_groups(const float* diag, int C) {
  const int ng = C / kG;
  const int nsb = C / kSB;
  std::vector<double> g(ng, 0.0), sb(nsb, 0.0);
  for (int j = 0; j < C; ++j) g[j / kG] += diag[j];
  for (int i = 0; i < ng; ++i) sb[i / kGroupsPerSb] += g[i];
  std::vector<int> perm;
  perm.reserve(ng);
  for (int b : by_descending(sb)) {
    std::vector<double> inner(g.begin() + b * kGroupsPerSb, g.begin() + (b + 1) * kGroupsPerSb);
    for (int i : by_descending(inner)) perm.push_back(b * kGroupsPerSb + i);
  }
  return perm;
}

Expected<Fp4CbEncoding> encode_fp4_act_order(const float* W, int R, int C, const float* H, const float* q,
                                             const Fp4GptqEncoder& encode) {
  if (R <= 0 || C <= 0 || C % kSB != 0)
    return err("weight [{}, {}]: CB needs rows > 0 and in_features % 256 == 0", R, C);
  std::vector<float> diag(C);
  for (int j = 0; j < C; ++j) diag[j] = H[size_t(j) * C + j];
  const std::vector<int> perm = act_order_groups(diag.data(), C);
  std::vector<int> col(C);  // permuted column i = source column col[i]
  for (int i = 0; i < C; ++i) col[i] = perm[i / kG] * kG + i % kG;
  std::vector<float> Wp(size_t(R) * C), Hp(size_t(C) * C), qp(C);
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < C; ++i) Wp[size_t(r) * C + i] = W[size_t(r) * C + col[i]];
  for (int i = 0; i < C; ++i) {
    qp[i] = q[col[i]];
    for (int j = 0; j < C; ++j) Hp[size_t(i) * C + j] = H[size_t(col[i]) * C + col[j]];
  }
  GRIDQ_ASSIGN_OR_RETURN(Fp4CbEncoding p, encode(Wp.data(), Hp.data(), qp.data()));
  if (p.rows != R || p.cols != C || p.planes.size() != size_t(R) * (C / kSB) ||
      p.codes.size() != size_t(R) * (C / gridbook::kVecDim) || p.w_hat.size() != size_t(R) * C)
    return err("act order: the encoder returned an encoding of [{}, {}] without its codes or w_hat", p.rows,
               p.cols);
  // Back to column order. Permuted group i is source group perm[i]; both lie in the same superblock position
  // of their order (whole superblocks moved), so the source superblock of group perm[i] takes the plane of
  // the permuted superblock i / 16, with the scale code of slot i % 16 moved to slot perm[i] % 16.
  Fp4CbEncoding e = p;
  const int nsb = C / kSB;
  const int ncw = C / gridbook::kVecDim;
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < C / kG; ++i) {
      const int src = perm[i];
      const gridbook::V2Plane& pp = p.planes[size_t(r) * nsb + i / kGroupsPerSb];
      gridbook::V2Plane& dst = e.planes[size_t(r) * nsb + src / kGroupsPerSb];
      dst.E = pp.E;
      dst.c[src % kGroupsPerSb] = pp.c[i % kGroupsPerSb];
      for (int w = 0; w < kCwPerGroup; ++w)
        e.codes[size_t(r) * ncw + src * kCwPerGroup + w] = p.codes[size_t(r) * ncw + i * kCwPerGroup + w];
      for (int j = 0; j < kG; ++j)
        e.w_hat[size_t(r) * C + src * kG + j] = p.w_hat[size_t(r) * C + i * kG + j];
    }
  }
  return e;
}

Expected<Fp4CbEncoding> encode_fp4_cb_gptq_act_order(const gridbook::Codebook& cb, const float* W, int R,
                                                     int C, const float* H, int64_t n_tokens, const float* q,
                                                     const CbGptqOptions& opt) {
  return encode_fp4_act_order(W, R, C, H, q, [&](const float* Wp, const float* Hp, const float* qp) {
    return encode_fp4_cb_gptq(cb, Wp, R, C, Hp, n_tokens, qp, opt);
  });
}

}  // namespace gridq::quant
