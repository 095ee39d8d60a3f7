// runtime::CudaBackendHooks::cb_fp4_batch (runtime/device.h): a chunk of a layer's routed experts encoded
// at once by the batched encoders of gptq.h, each candidate's holdout output-MSE on the device, and the
// output proxy of the candidates the caller keeps. Weights and Hessians are uploaded once per batch and stay
// on the device until the batch object goes.
#include <algorithm>
#include <optional>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/cuda/gptq/gptq_hook.h"
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda {
namespace {

using runtime::CbFp4BatchMatrix;
using runtime::CbFp4BatchRequest;
using runtime::DeviceCbBatch;

// Host → device on the batch's stream (non-blocking: a plain cudaMemcpy would not be ordered with it).
Status put(cudaStream_t s, void* dst, const void* src, size_t bytes) {
  GRIDQ_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  return {};
}

class CbBatch final : public DeviceCbBatch {
 public:
  static Expected<std::unique_ptr<CbBatch>> create(const CbFp4BatchRequest& r);
  const std::vector<CbFp4BatchMatrix>& matrices() const override { return out_; }
  Expected<std::vector<double>> half_traces(const std::vector<int>& which) override;

 private:
  CbBatch() = default;
  Status check(const CbFp4BatchRequest& r) const;
  Status upload(const CbFp4BatchRequest& r);
  // e = W − Ŵ [M, R, C] of one candidate of every matrix (sub_idx / planes from the host replies).
  Status decode_all(int which, DeviceBuffer& wh, DeviceBuffer& e);
  Status holdout(const CbFp4BatchRequest& r);
  const std::vector<uint32_t>& idx_of(int m, int which) const;
  // One matrix's sub-indices [R, C/4] and plane bytes [R, C/256, 17].
  size_t n_idx() const { return size_t(R_) * (C_ / gptq::kSubDim); }
  size_t n_planes() const { return size_t(R_) * (C_ / gptq::kSB) * gptq::kPlaneBytes; }
  const std::vector<uint8_t>& planes_of(int m, int which) const;
  // Candidate which[m] of every matrix into idx [M, R, C/4] and pl [M, R, C/256, 17] (zeros where which[m] <
  // 0 or the matrix lacks it): two copies per batch. A copy from pageable memory waits for the stream, and
  // while another batch's encoders hold the GPU, one copy per matrix made one host round trip per matrix.
  Status put_candidates(const std::vector<int>& which, DeviceBuffer& idx, DeviceBuffer& pl);

  std::optional<Stream> s_;  // created in create()
  int R_ = 0, C_ = 0, M_ = 0, nH_ = 0, K_ = 0;
  std::vector<int> h_of_;
  std::vector<int64_t> n_hold_;
  DeviceBuffer W_, H_, q_, book_;
  gptq::V2Tables t_{};
  bool gptq_ = false, rtn_ = false;
  std::vector<CbFp4BatchMatrix> out_;
};

Status CbBatch::check(const CbFp4BatchRequest& r) const {
  const size_t M = r.W.size(), nH = r.q.size();
  if (r.R <= 0 || r.C <= 0 || M == 0 || nH == 0 || r.s.K <= 0 || !r.s.book)
    return err("gpu cb batch: [{} × {}, {}] over {} inputs, K {}: every size > 0 and a book", M, r.R, r.C, nH,
               r.s.K);
  if (r.h_of.size() != M || r.n_tokens.size() != nH || r.hold.size() != nH || r.n_hold.size() != nH ||
      r.H.size() != nH)
    return err("gpu cb batch: h_of {} for {} matrices; n_tokens {}, H {}, hold {}, n_hold {} for {} inputs",
               r.h_of.size(), M, r.n_tokens.size(), r.H.size(), r.hold.size(), r.n_hold.size(), nH);
  for (size_t m = 0; m < M; ++m)
    if (!r.W[m] || r.h_of[m] < 0 || static_cast<size_t>(r.h_of[m]) >= nH)
      return err("gpu cb batch: matrix {} has no weights or names input {} of {}", m, r.h_of[m], nH);
  for (size_t h = 0; h < nH; ++h)
    if (!r.q[h] || !r.H[h] || r.n_hold[h] < 0 || (r.n_hold[h] > 0 && !r.hold[h]))
      return err("gpu cb batch: input {} lacks its importances, H or holdout rows", h);
  return {};
}

Status CbBatch::upload(const CbFp4BatchRequest& r) {
  const size_t RC = size_t(R_) * C_, CC = size_t(C_) * C_;
  GRIDQ_ASSIGN_OR_RETURN(W_, DeviceBuffer::alloc(M_ * RC * 4, "gpu cb batch weights"));
  for (int m = 0; m < M_; ++m) GRIDQ_RETURN_IF_ERROR(put(s_->get(), W_.as<float>() + m * RC, r.W[m], RC * 4));
  GRIDQ_ASSIGN_OR_RETURN(q_, DeviceBuffer::alloc(nH_ * size_t(C_) * 4, "gpu cb batch importances"));
  for (int h = 0; h < nH_; ++h)
    GRIDQ_RETURN_IF_ERROR(put(s_->get(), q_.as<float>() + h * size_t(C_), r.q[h], size_t(C_) * 4));
  GRIDQ_ASSIGN_OR_RETURN(H_, DeviceBuffer::alloc(nH_ * CC * 4, "gpu cb batch Hessians"));
  for (int h = 0; h < nH_; ++h)
    GRIDQ_RETURN_IF_ERROR(put(s_->get(), H_.as<float>() + h * CC, r.H[h], CC * 4));
  GRIDQ_ASSIGN_OR_RETURN(book_, DeviceBuffer::alloc(size_t(2) * K_ * 4 * 8, "gpu cb batch book"));
  GRIDQ_RETURN_IF_ERROR(put(s_->get(), book_.as(), r.s.book, size_t(2) * K_ * 4 * 8));
  return s_->sync();  // gptq.h's encoders upload their own tables with plain copies
}

const std::vector<uint32_t>& CbBatch::idx_of(int m, int which) const {
  const auto& x = out_[static_cast<size_t>(m)];
  return which == kGptq ? x.enc.sub_idx : which == kRefined ? x.enc.refined_sub_idx : x.rtn_sub_idx;
}
const std::vector<uint8_t>& CbBatch::planes_of(int m, int which) const {
  const auto& x = out_[static_cast<size_t>(m)];
  return which == kGptq ? x.enc.planes : which == kRefined ? x.enc.refined_planes : x.rtn_planes;
}

Status CbBatch::put_candidates(const std::vector<int>& which, DeviceBuffer& idx, DeviceBuffer& pl) {
  const size_t ni = n_idx(), np = n_planes();
  std::vector<uint32_t> hi(M_ * ni, 0);
  std::vector<uint8_t> hp(M_ * np, 0);
  for (int m = 0; m < M_; ++m) {
    const int w = which[static_cast<size_t>(m)];
    if (w < 0) continue;
    const auto& i = idx_of(m, w);
    const auto& p = planes_of(m, w);
    if (i.size() != ni || p.size() != np) continue;  // a matrix without this candidate (not refined)
    std::copy(i.begin(), i.end(), hi.begin() + static_cast<long>(m * ni));
    std::copy(p.begin(), p.end(), hp.begin() + static_cast<long>(m * np));
  }
  GRIDQ_RETURN_IF_ERROR(put(s_->get(), idx.as(), hi.data(), hi.size() * 4));
  // A copy from pageable memory returns once its source is staged: hi and hp may go right after.
  return put(s_->get(), pl.as(), hp.data(), hp.size());
}

Status CbBatch::decode_all(int which, DeviceBuffer& wh, DeviceBuffer& e) {
  const size_t RC = size_t(R_) * C_, ni = n_idx(), np = n_planes();
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer idx, DeviceBuffer::alloc(M_ * ni * 4, "gpu cb batch indices"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer pl, DeviceBuffer::alloc(M_ * np, "gpu cb batch planes"));
  GRIDQ_RETURN_IF_ERROR(put_candidates(std::vector<int>(static_cast<size_t>(M_), which), idx, pl));
  GRIDQ_CUDA(gptq::raw_refine_decode(W_.as<float>(), static_cast<long long>(M_ * RC), C_, idx.as<uint32_t>(),
                                     pl.as<uint8_t>(), book_.as<double>(), K_, t_, wh.as<double>(),
                                     e.as<double>(), s_->get()));
  return s_->sync();
}

// quant's holdout_output_mse per candidate: per-row sums on the device, the rows added in order here and
// divided by n·R, as the CPU does.
Status CbBatch::holdout(const CbFp4BatchRequest& r) {
  const int64_t t_max = *std::max_element(n_hold_.begin(), n_hold_.end());
  if (t_max <= 0) return {};
  std::vector<long long> row0(static_cast<size_t>(nH_));
  std::vector<int> nh(static_cast<size_t>(nH_));
  long long rows = 0;
  for (int h = 0; h < nH_; ++h) row0[h] = rows, nh[h] = static_cast<int>(n_hold_[h]), rows += n_hold_[h];
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer X, DeviceBuffer::alloc(size_t(rows) * C_ * 4, "gpu cb batch holdout"));
  for (int h = 0; h < nH_; ++h)
    if (nh[h] > 0)
      GRIDQ_RETURN_IF_ERROR(
          put(s_->get(), X.as<float>() + size_t(row0[h]) * C_, r.hold[h], size_t(nh[h]) * C_ * 4));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer meta, DeviceBuffer::alloc(size_t(nH_) * 12 + size_t(M_) * 4,
                                                                "gpu cb batch holdout index"));
  long long* row0_d = meta.as<long long>();
  int* nh_d = reinterpret_cast<int*>(row0_d + nH_);
  int* hof_d = nh_d + nH_;
  GRIDQ_RETURN_IF_ERROR(put(s_->get(), row0_d, row0.data(), size_t(nH_) * 8));
  GRIDQ_RETURN_IF_ERROR(put(s_->get(), nh_d, nh.data(), size_t(nH_) * 4));
  GRIDQ_RETURN_IF_ERROR(put(s_->get(), hof_d, h_of_.data(), size_t(M_) * 4));
  const size_t RC = size_t(R_) * C_;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer wh, DeviceBuffer::alloc(M_ * RC * 8, "gpu cb batch decoded"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer e, DeviceBuffer::alloc(M_ * RC * 8, "gpu cb batch errors"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer y2,
                         DeviceBuffer::alloc(size_t(M_) * R_ * t_max * 8, "gpu cb batch y²"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer acc, DeviceBuffer::alloc(size_t(M_) * R_ * 8, "gpu cb batch row sums"));
  std::vector<double> a(size_t(M_) * R_);
  const bool any_refined =
      std::any_of(out_.begin(), out_.end(), [](const CbFp4BatchMatrix& x) { return x.enc.refined; });
  for (int which : {kGptq, kRefined, kRtn}) {
    if ((which == kGptq && !gptq_) || (which == kRefined && !any_refined) || (which == kRtn && !rtn_))
      continue;
    GRIDQ_RETURN_IF_ERROR(decode_all(which, wh, e));
    GRIDQ_CUDA(gptq::raw_holdout_rows(e.as<double>(), M_, R_, C_, hof_d, X.as<float>(), row0_d, nh_d,
                                      static_cast<int>(t_max), y2.as<double>(), acc.as<double>(), s_->get()));
    GRIDQ_RETURN_IF_ERROR(s_->sync());
    GRIDQ_RETURN_IF_ERROR(acc.download(a.data(), a.size() * 8));
    for (int m = 0; m < M_; ++m) {
      const int64_t n = n_hold_[h_of_[m]];
      double total = 0.0;
      for (int row = 0; row < R_; ++row) total += a[size_t(m) * R_ + row];
      const double mse = n > 0 ? total / (static_cast<double>(n) * R_) : 0.0;
      auto& x = out_[static_cast<size_t>(m)];
      (which == kGptq ? x.mse_gptq : which == kRefined ? x.mse_refined : x.mse_rtn) = mse;
    }
  }
  return {};
}

Expected<std::unique_ptr<CbBatch>> CbBatch::create(const CbFp4BatchRequest& r) {
  std::unique_ptr<CbBatch> b(new CbBatch());
  GRIDQ_RETURN_IF_ERROR(b->check(r));
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  b->s_.emplace(std::move(stream));
  GRIDQ_ASSIGN_OR_RETURN(b->t_, device_v2_tables());
  b->R_ = r.R, b->C_ = r.C, b->K_ = r.s.K;
  b->M_ = static_cast<int>(r.W.size()), b->nH_ = static_cast<int>(r.q.size());
  b->h_of_ = r.h_of, b->n_hold_ = r.n_hold;
  b->gptq_ = r.gptq, b->rtn_ = r.rtn || !r.gptq;
  GRIDQ_RETURN_IF_ERROR(b->upload(r));
  CbGptqBatch job;
  job.R = r.R, job.C = r.C, job.M = b->M_, job.nH = b->nH_;
  job.W = b->W_.as<float>();
  job.H = r.gptq ? b->H_.as<float>() : nullptr;
  job.q = b->q_.as<float>();
  job.h_of = r.h_of;
  job.n_tokens = r.n_tokens;
  const CbGptqBook book = gptq_book(r.s);
  const CbGptqSettings o = gptq_settings(r.s);
  b->out_.resize(static_cast<size_t>(b->M_));
  if (r.gptq) {
    GRIDQ_ASSIGN_OR_RETURN(CbGptqResult g, cb_gptq_fp4(job, book, o, b->s_->get()));
    for (int m = 0; m < b->M_; ++m)
      b->out_[static_cast<size_t>(m)].enc = reply_of(g, m, r.h_of[m], r.R, r.C, o.refine_passes > 0);
  }
  if (b->rtn_) {
    GRIDQ_ASSIGN_OR_RETURN(CbGptqResult n, cb_rtn_fp4(job, book, o, b->s_->get()));
    for (int m = 0; m < b->M_; ++m) {
      runtime::CbFp4Reply x = reply_of(n, m, r.h_of[m], r.R, r.C, false);
      b->out_[static_cast<size_t>(m)].rtn_sub_idx = std::move(x.sub_idx);
      b->out_[static_cast<size_t>(m)].rtn_planes = std::move(x.planes);
    }
  }
  GRIDQ_RETURN_IF_ERROR(b->holdout(r));
  return b;
}

Expected<std::vector<double>> CbBatch::half_traces(const std::vector<int>& which) {
  if (which.size() != static_cast<size_t>(M_))
    return err("gpu cb batch: {} choices for {} matrices", which.size(), M_);
  const size_t RC = size_t(R_) * C_, CC = size_t(C_) * C_, ni = n_idx(), np = n_planes();
  for (int m = 0; m < M_; ++m) {
    const int w = which[static_cast<size_t>(m)];
    if (w >= 0 && (w > kRtn || idx_of(m, w).size() != ni || planes_of(m, w).size() != np))
      return err("gpu cb batch: matrix {} has no candidate {}", m, w);
  }
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer idx, DeviceBuffer::alloc(M_ * ni * 4, "gpu cb batch proxy indices"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer pl, DeviceBuffer::alloc(M_ * np, "gpu cb batch proxy planes"));
  GRIDQ_RETURN_IF_ERROR(put_candidates(which, idx, pl));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer wh, DeviceBuffer::alloc(RC * 8, "gpu cb batch proxy decoded"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer e, DeviceBuffer::alloc(RC * 8, "gpu cb batch proxy errors"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer v, DeviceBuffer::alloc(RC * 8, "gpu cb batch proxy rows"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer half,
                         DeviceBuffer::alloc((size_t(M_) + R_) * 8, "gpu cb batch proxy sums"));
  double* totals = half.as<double>() + R_;  // [M]; 0 for the matrices skipped
  GRIDQ_CUDA(cudaMemsetAsync(totals, 0, size_t(M_) * 8, s_->get()));
  for (int m = 0; m < M_; ++m) {  // launches only: no host round trip until the sums are read
    if (which[static_cast<size_t>(m)] < 0) continue;
    GRIDQ_CUDA(gptq::raw_refine_decode(
        W_.as<float>() + m * RC, static_cast<long long>(RC), C_, idx.as<uint32_t>() + m * ni,
        pl.as<uint8_t>() + m * np, book_.as<double>(), K_, t_, wh.as<double>(), e.as<double>(), s_->get()));
    GRIDQ_CUDA(gptq::raw_output_half_trace_err(e.as<double>(), H_.as<float>() + h_of_[m] * CC, R_, C_,
                                               v.as<double>(), half.as<double>(), totals + m, s_->get()));
  }
  std::vector<double> out(static_cast<size_t>(M_));
  GRIDQ_RETURN_IF_ERROR(s_->sync());
  GRIDQ_RETURN_IF_ERROR(half.download(out.data(), out.size() * 8, size_t(R_) * 8));
  return out;
}

}  // namespace

Expected<std::unique_ptr<runtime::DeviceCbBatch>> cb_fp4_batch_host(const runtime::CbFp4BatchRequest& r) {
  GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<CbBatch> b, CbBatch::create(r));
  return std::unique_ptr<runtime::DeviceCbBatch>(std::move(b));
}

}  // namespace gridq::cuda
