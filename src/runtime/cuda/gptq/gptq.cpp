// The GPU CB-GPTQ host side (gptq.h): buffers, the factorization with the CPU's retry rule, and the block
// loop (scale search on the compensated block → step tables → slab steps → lazy trailing update).
#include "runtime/cuda/gptq/gptq.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include "core/numerics.h"
#include "gridbook/scale_coding.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda {
namespace {

using gptq::kEMin;
using gptq::kMaxScales;
using gptq::kNE;
using gptq::kSB;

// The v2 code tables and every exponent window's sorted distinct scales, built on the host from
// gridbook/scale_coding.h and uploaded once per process (a few hundred KiB).
struct DeviceTables {
  DeviceBuffer scale, legal, lowest, win, win_n, win_idx, e4m3;
  gptq::V2Tables view() const {
    return {scale.as<float>(),   legal.as<uint8_t>(),   lowest.as<int8_t>(), win.as<double>(),
            win_n.as<int16_t>(), win_idx.as<int16_t>(), e4m3.as<float>()};
  }
};

template <class T>
Expected<DeviceBuffer> upload_vec(const std::vector<T>& v, const char* what) {
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer b,
                         DeviceBuffer::alloc(std::max<size_t>(v.size(), 1) * sizeof(T), what));
  if (!v.empty()) GRIDQ_RETURN_IF_ERROR(b.upload(v.data(), v.size() * sizeof(T)));
  return b;
}

Expected<DeviceTables> build_tables() {
  std::vector<float> scale(4096), e4m3(256);
  std::vector<uint8_t> legal(4096);
  std::vector<int8_t> lowest(256);
  for (int E = 0; E < 256; ++E) {
    lowest[E] = static_cast<int8_t>(gridbook::v2_lowest_legal_code(static_cast<uint8_t>(E)));
    for (int c = 0; c < 16; ++c) {
      legal[E * 16 + c] = gridbook::v2_legal(static_cast<uint8_t>(E), c) ? 1 : 0;
      scale[E * 16 + c] = gridbook::v2_scale(static_cast<uint8_t>(E), c);
    }
  }
  for (int b = 0; b < 256; ++b) e4m3[b] = e4m3_to_f32(static_cast<uint8_t>(b));
  std::vector<double> win(size_t(kNE) * kNE * kMaxScales, 0.0);
  std::vector<int16_t> win_n(size_t(kNE) * kNE, -1), win_idx(size_t(kNE) * kNE * kNE * 16, -1);
  for (int lo = 0; lo < kNE; ++lo)
    for (int hi = lo; hi < kNE && hi - lo < 15; ++hi) {  // the scale_search_v2.cpp candidate list of [lo, hi]
      std::vector<double> s;
      for (int E = lo + kEMin; E <= hi + kEMin; ++E)
        for (int c = 0; c < 16; ++c)
          if (legal[E * 16 + c]) s.push_back(scale[E * 16 + c]);
      std::sort(s.begin(), s.end());
      s.erase(std::unique(s.begin(), s.end()), s.end());
      if (s.size() > size_t(kMaxScales))
        return err("gpu cb-gptq: window [{}, {}] has {} scales", lo, hi, s.size());
      const size_t w = size_t(lo) * kNE + hi;
      win_n[w] = static_cast<int16_t>(s.size());
      std::copy(s.begin(), s.end(), win.begin() + w * kMaxScales);
      for (int E = lo + kEMin; E <= hi + kEMin; ++E)
        for (int c = 0; c < 16; ++c)
          if (legal[E * 16 + c])
            win_idx[(w * kNE + (E - kEMin)) * 16 + c] = static_cast<int16_t>(
                std::lower_bound(s.begin(), s.end(), double(scale[E * 16 + c])) - s.begin());
    }
  DeviceTables t;
  GRIDQ_ASSIGN_OR_RETURN(t.scale, upload_vec(scale, "v2 scale table"));
  GRIDQ_ASSIGN_OR_RETURN(t.legal, upload_vec(legal, "v2 legal table"));
  GRIDQ_ASSIGN_OR_RETURN(t.lowest, upload_vec(lowest, "v2 lowest-code table"));
  GRIDQ_ASSIGN_OR_RETURN(t.win, upload_vec(win, "v2 window scales"));
  GRIDQ_ASSIGN_OR_RETURN(t.win_n, upload_vec(win_n, "v2 window sizes"));
  GRIDQ_ASSIGN_OR_RETURN(t.win_idx, upload_vec(win_idx, "v2 window index"));
  GRIDQ_ASSIGN_OR_RETURN(t.e4m3, upload_vec(e4m3, "e4m3 table"));
  return t;
}

Expected<gptq::V2Tables> tables() {
  static std::mutex mu;
  static DeviceTables* t = nullptr;  // kept for the process (device memory is released with the context)
  std::lock_guard<std::mutex> lock(mu);
  if (!t) {
    GRIDQ_ASSIGN_OR_RETURN(DeviceTables built, build_tables());
    t = new DeviceTables(std::move(built));
  }
  return t->view();
}

Status check_job(const CbGptqBatch& j, const CbGptqBook& book, const CbGptqSettings& o, bool need_h) {
  if (book.K != 64 && book.K != 256 && book.K != 1024 && book.K != 4096)
    return err(
        "gpu cb-gptq: sub-tables of {} entries; the device encoder supports 64 (K12), 256 (K16), 1024 (K20) "
        "and 4096 (K24) (use --device cpu for the others)",
        book.K);
  if (book.t.size() != size_t(2) * book.K * 4)
    return err("gpu cb-gptq: book has {} values, expected 2·K·4", book.t.size());
  if (j.R <= 0 || j.C <= 0 || j.C % kSB != 0 || j.M <= 0 || j.nH <= 0)
    return err("gpu cb-gptq: batch [{} × {}, {}] with {} Hessians; rows > 0, in_features % 256 == 0", j.M,
               j.R, j.C, j.nH);
  if (j.h_of.size() != size_t(j.M) || j.n_tokens.size() != size_t(j.nH))
    return err("gpu cb-gptq: h_of has {} entries for {} matrices, n_tokens {} for {} Hessians", j.h_of.size(),
               j.M, j.n_tokens.size(), j.nH);
  for (int h : j.h_of)
    if (h < 0 || h >= j.nH) return err("gpu cb-gptq: h_of names Hessian {} of {}", h, j.nH);
  if (!j.W || !j.q || (need_h && !j.H))
    return err("gpu cb-gptq: W, q{} must be device pointers", need_h ? ", H" : "");
  if (o.max_window < 1 || o.max_window > 14 || o.pilot_rows < 1 || o.refits < 0)
    return err("gpu cb-gptq: max_window {} (1..14), pilot_rows {} (>= 1), refits {} (>= 0)", o.max_window,
               o.pilot_rows, o.refits);
  return {};
}

size_t device_used() {
  size_t free_b = 0, total_b = 0;
  return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? total_b - free_b : 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// The damped inverse-Cholesky factor per Hessian into U, with quant/hessian_factor.cpp's rules: identity
// for no tokens or a zero diagonal, errors for non-finite entries or a negative mean diagonal, and damping
// ×10 per failed attempt (either Cholesky), at most max_retries times.
Status gptq_factor(const CbGptqBatch& j, const CbGptqSettings& o, cudaStream_t s, DeviceBuffer& U,
                   DeviceBuffer& identity_dev, CbGptqResult& res) {
  const size_t nH = size_t(j.nH), CC = size_t(j.C) * j.C;
  GRIDQ_ASSIGN_OR_RETURN(U, DeviceBuffer::alloc(nH * CC * 8, "gpu cb-gptq U"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer L, DeviceBuffer::alloc(nH * CC * 8, "gpu cb-gptq factor workspace"));
  GRIDQ_ASSIGN_OR_RETURN(identity_dev, DeviceBuffer::alloc(nH, "gpu cb-gptq identity flags"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer flags, DeviceBuffer::alloc(3 * nH, "gpu cb-gptq flags"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer mean, DeviceBuffer::alloc(nH * 8, "gpu cb-gptq mean diag"));
  std::vector<long long> nt(j.n_tokens.begin(), j.n_tokens.end());
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer nt_dev, upload_vec(nt, "gpu cb-gptq token counts"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer damp_dev, DeviceBuffer::alloc(nH * 8, "gpu cb-gptq damping"));
  res.device_bytes_peak = std::max(res.device_bytes_peak, device_used());
  uint8_t* bad = flags.as<uint8_t>();
  uint8_t* fail = bad + nH;
  uint8_t* active = fail + nH;
  std::vector<uint8_t> done(nH, 0), act(nH), f(nH);
  res.identity.assign(nH, 0);
  res.damp_used.assign(nH, 0.0);
  std::vector<double> damp(nH, o.damp);
  for (int attempt = 0; attempt <= o.max_retries; ++attempt) {
    GRIDQ_RETURN_IF_ERROR(damp_dev.upload(damp.data(), nH * 8));
    GRIDQ_CUDA(gptq::raw_factor_init(j.H, j.nH, j.C, nt_dev.as<long long>(), damp_dev.as<double>(),
                                     L.as<double>(), mean.as<double>(), identity_dev.as<uint8_t>(), bad, s));
    if (attempt == 0) {
      std::vector<uint8_t> b(nH);
      GRIDQ_CUDA(cudaMemcpyAsync(b.data(), bad, nH, cudaMemcpyDeviceToHost, s));
      GRIDQ_CUDA(
          cudaMemcpyAsync(res.identity.data(), identity_dev.as<uint8_t>(), nH, cudaMemcpyDeviceToHost, s));
      GRIDQ_CUDA(cudaStreamSynchronize(s));
      for (size_t h = 0; h < nH; ++h) {
        if (b[h] == 1) return err("H {}: an entry is not finite; a Hessian must be finite", h);
        if (b[h] == 2) return err("H {}: mean of diag(H) < 0; H must be positive semi-definite", h);
        if (res.identity[h]) done[h] = 1;
      }
    }
    int n_active = 0;
    for (size_t h = 0; h < nH; ++h) n_active += (act[h] = done[h] ? 0 : 1);
    if (n_active == 0) return {};
    auto run = [&](auto&& step) -> Status {  // one stage over the active Hessians; drops those that fail
      GRIDQ_CUDA(cudaMemcpyAsync(active, act.data(), nH, cudaMemcpyHostToDevice, s));
      GRIDQ_CUDA(cudaMemsetAsync(fail, 0, nH, s));
      GRIDQ_CUDA(step());
      GRIDQ_CUDA(cudaMemcpyAsync(f.data(), fail, nH, cudaMemcpyDeviceToHost, s));
      GRIDQ_CUDA(cudaStreamSynchronize(s));
      for (size_t h = 0; h < nH; ++h) act[h] = act[h] && !f[h];
      return {};
    };
    GRIDQ_RETURN_IF_ERROR(
        run([&] { return gptq::raw_cholesky(L.as<double>(), j.nH, j.C, active, fail, s); }));
    for (size_t h = 0; h < nH; ++h)
      if (act[h]) GRIDQ_CUDA(cudaMemsetAsync(U.as<double>() + h * CC, 0, CC * 8, s));
    GRIDQ_RETURN_IF_ERROR(run([&] {
      const cudaError_t e = gptq::raw_inverse_gram(L.as<double>(), U.as<double>(), j.nH, j.C, active, s);
      return e != cudaSuccess ? e : gptq::raw_cholesky(L.as<double>(), j.nH, j.C, active, fail, s);
    }));
    GRIDQ_RETURN_IF_ERROR(run(
        [&] { return gptq::raw_upper_from_lower(L.as<double>(), U.as<double>(), j.nH, j.C, active, s); }));
    for (size_t h = 0; h < nH; ++h) {
      if (act[h]) {
        done[h] = 1;
        res.damp_used[h] = damp[h];
      } else if (!done[h]) {
        damp[h] *= 10.0;
      }
    }
  }
  for (size_t h = 0; h < nH; ++h)
    if (!done[h])
      return err(
          "H {}: damped Cholesky failed with damping {} and {} retries (x10 each); H is not positive "
          "definite",
          h, o.damp, o.max_retries);
  return {};
}

namespace {

struct Common {
  DeviceBuffer W, book, h_of, m2, numden, planes, sub_idx;
  gptq::V2Tables t{};
};

Expected<Common> prepare(const CbGptqBatch& j, const CbGptqBook& book, const CbGptqSettings& o,
                         cudaStream_t s) {
  Common c;
  GRIDQ_ASSIGN_OR_RETURN(c.t, tables());
  const size_t n = size_t(j.M) * j.R * j.C;
  GRIDQ_ASSIGN_OR_RETURN(c.W, DeviceBuffer::alloc(n * 8, "gpu cb-gptq weights (float64)"));
  GRIDQ_CUDA(gptq::raw_widen(j.W, static_cast<long long>(n), c.W.as<double>(), s));
  GRIDQ_ASSIGN_OR_RETURN(c.book, upload_vec(book.t, "gpu cb-gptq book"));
  GRIDQ_ASSIGN_OR_RETURN(c.h_of, upload_vec(j.h_of, "gpu cb-gptq h_of"));
  const int rows = std::min(j.R, o.pilot_rows);
  GRIDQ_ASSIGN_OR_RETURN(c.m2, DeviceBuffer::alloc(size_t(j.M) * 8, "gpu cb-gptq m2"));
  GRIDQ_ASSIGN_OR_RETURN(c.numden, DeviceBuffer::alloc(size_t(j.M) * rows * 16, "gpu cb-gptq pilot sums"));
  GRIDQ_CUDA(gptq::raw_pilot_m2(c.W.as<double>(), j.M, j.R, j.C, rows, c.h_of.as<int>(), j.q,
                                c.book.as<double>(), book.K, c.t, c.numden.as<double>(), c.m2.as<double>(),
                                s));
  GRIDQ_ASSIGN_OR_RETURN(c.planes, DeviceBuffer::alloc(size_t(j.M) * j.R * (j.C / kSB) * gptq::kPlaneBytes,
                                                       "gpu cb-gptq planes"));
  GRIDQ_ASSIGN_OR_RETURN(c.sub_idx,
                         DeviceBuffer::alloc(size_t(j.M) * j.R * (j.C / 4) * 4, "gpu cb-gptq indices"));
  return c;
}

Status fetch(const CbGptqBatch& j, const Common& c, cudaStream_t s, CbGptqResult& res) {
  res.sub_idx.resize(size_t(j.M) * j.R * (j.C / 4));
  res.planes.resize(size_t(j.M) * j.R * (j.C / kSB) * gptq::kPlaneBytes);
  GRIDQ_CUDA(cudaMemcpyAsync(res.sub_idx.data(), c.sub_idx.as<uint32_t>(), res.sub_idx.size() * 4,
                             cudaMemcpyDeviceToHost, s));
  GRIDQ_CUDA(cudaMemcpyAsync(res.planes.data(), c.planes.as<uint8_t>(), res.planes.size(),
                             cudaMemcpyDeviceToHost, s));
  GRIDQ_CUDA(cudaStreamSynchronize(s));
  return {};
}

// refine_fp4 after CB-GPTQ, in place on c.planes / c.sub_idx (fetched before). U's storage becomes Hd and
// the compensated weights' storage ŵ: both are spent by then.
Status refine_all(const CbGptqBatch& j, const CbGptqBook& book, const CbGptqSettings& o, cudaStream_t s,
                  DeviceBuffer& U, Common& c, CbGptqResult& res) {
  const size_t M = size_t(j.M), rows = M * j.R, n = rows * j.C;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer damp, upload_vec(res.damp_used, "gpu refine damping"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer nk,
                         DeviceBuffer::alloc(size_t(j.nH) * (j.C / 4) * book.K * 8, "gpu refine norms"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer cold, DeviceBuffer::alloc(size_t(j.nH), "gpu refine cold flags"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer e, DeviceBuffer::alloc(n * 8, "gpu refine errors"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::alloc(n * 8, "gpu refine gradients"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer f, DeviceBuffer::alloc(rows * 16, "gpu refine objectives"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer stats, DeviceBuffer::alloc(rows * 12, "gpu refine counts"));
  res.device_bytes_peak = std::max(res.device_bytes_peak, device_used());
  double* Hd = U.as<double>();
  double* wh = c.W.as<double>();
  GRIDQ_CUDA(gptq::raw_refine_prepare(j.H, j.nH, j.C, damp.as<double>(), c.book.as<double>(), book.K, Hd,
                                      nk.as<double>(), cold.as<uint8_t>(), s));
  std::vector<uint8_t> cold_h(size_t(j.nH));
  GRIDQ_CUDA(cudaMemcpyAsync(cold_h.data(), cold.as<uint8_t>(), cold_h.size(), cudaMemcpyDeviceToHost, s));
  GRIDQ_CUDA(cudaStreamSynchronize(s));
  res.refine_skipped.resize(M);
  std::vector<uint8_t> skip(M);
  for (size_t m = 0; m < M; ++m) {
    res.refine_skipped[m] = res.identity[j.h_of[m]];
    skip[m] = res.identity[j.h_of[m]] || cold_h[j.h_of[m]];
  }
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer skip_dev, upload_vec(skip, "gpu refine skips"));
  GRIDQ_CUDA(gptq::raw_refine_decode(j.W, static_cast<long long>(n), j.C, c.sub_idx.as<uint32_t>(),
                                     c.planes.as<uint8_t>(), c.book.as<double>(), book.K, c.t, wh,
                                     e.as<double>(), s));
  double* f0 = f.as<double>();
  double* f1 = f0 + rows;
  GRIDQ_CUDA(
      gptq::raw_refine_objective(Hd, e.as<double>(), j.M, j.R, j.C, c.h_of.as<int>(), g.as<double>(), f0, s));
  GRIDQ_CUDA(cudaMemsetAsync(stats.as<int>(), 0, rows * 12, s));
  GRIDQ_CUDA(gptq::raw_refine_rows(j.W, j.M, j.R, j.C, c.h_of.as<int>(), skip_dev.as<uint8_t>(), Hd,
                                   nk.as<double>(), c.book.as<double>(), book.K, c.t, o.refine_passes,
                                   o.refine_scales ? 1 : 0, wh, e.as<double>(), g.as<double>(),
                                   c.sub_idx.as<uint32_t>(), c.planes.as<uint8_t>(), stats.as<int>(), s));
  GRIDQ_CUDA(
      gptq::raw_refine_objective(Hd, e.as<double>(), j.M, j.R, j.C, c.h_of.as<int>(), g.as<double>(), f1, s));
  std::vector<double> fh(rows * 2);
  std::vector<int> st(rows * 3);
  GRIDQ_CUDA(cudaMemcpyAsync(fh.data(), f0, rows * 16, cudaMemcpyDeviceToHost, s));
  GRIDQ_CUDA(cudaMemcpyAsync(st.data(), stats.as<int>(), rows * 12, cudaMemcpyDeviceToHost, s));
  CbGptqResult refined;
  GRIDQ_RETURN_IF_ERROR(fetch(j, c, s, refined));
  res.refined_sub_idx = std::move(refined.sub_idx);
  res.refined_planes = std::move(refined.planes);
  res.refine_f_before.assign(M, 0.0);
  res.refine_f_after.assign(M, 0.0);
  res.refine_rounds.assign(M, 0);
  res.refine_codes.assign(M, 0);
  res.refine_scales.assign(M, 0);
  for (size_t m = 0; m < M; ++m) {
    if (skip[m]) continue;  // cold: zero objectives and no change, as refine_fp4 returns
    for (size_t r = m * j.R; r < (m + 1) * j.R; ++r) {  // rows in order, as refine_fp4 sums them
      res.refine_f_before[m] += fh[r];
      res.refine_f_after[m] += fh[rows + r];
      res.refine_rounds[m] = std::max(res.refine_rounds[m], st[r * 3]);
      res.refine_codes[m] += st[r * 3 + 1];
      res.refine_scales[m] += st[r * 3 + 2];
    }
  }
  return {};
}

}  // namespace

Expected<gptq::V2Tables> device_v2_tables() { return tables(); }

Expected<CbGptqResult> cb_gptq_fp4(const CbGptqBatch& j, const CbGptqBook& book, const CbGptqSettings& o,
                                   cudaStream_t s) {
  GRIDQ_RETURN_IF_ERROR(check_job(j, book, o, true));
  CbGptqResult res;
  auto t0 = std::chrono::steady_clock::now();
  DeviceBuffer U, identity;
  GRIDQ_RETURN_IF_ERROR(gptq_factor(j, o, s, U, identity, res));
  GRIDQ_CUDA(cudaStreamSynchronize(s));
  res.seconds_factor = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  GRIDQ_ASSIGN_OR_RETURN(Common c, prepare(j, book, o, s));
  const size_t steps = size_t(j.nH) * (kSB / 4);
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer A, DeviceBuffer::alloc(steps * 16 * 8, "gpu cb-gptq step inverses"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer Tp,
                         DeviceBuffer::alloc(steps * book.K * 4 * 8, "gpu cb-gptq step tables"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer nk, DeviceBuffer::alloc(steps * book.K * 8, "gpu cb-gptq step norms"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer Err,
                         DeviceBuffer::alloc(size_t(j.M) * j.R * kSB * 8, "gpu cb-gptq slab errors"));
  res.device_bytes_peak = std::max(res.device_bytes_peak, device_used());
  const int* h_of = c.h_of.as<int>();
  const uint8_t* id = identity.as<uint8_t>();
  for (int b = 0; b < j.C / kSB; ++b) {
    GRIDQ_CUDA(gptq::raw_two_tier(c.W.as<double>(), j.M, j.R, j.C, b, h_of, j.q, c.m2.as<double>(),
                                  c.book.as<double>(), book.K, c.t, o.max_window, o.refits,
                                  c.planes.as<uint8_t>(), nullptr, s));
    GRIDQ_CUDA(gptq::raw_step_tables(U.as<double>(), j.nH, j.C, b, id, c.book.as<double>(), book.K,
                                     A.as<double>(), Tp.as<double>(), nk.as<double>(), s));
    GRIDQ_CUDA(gptq::raw_gptq_block(c.W.as<double>(), j.M, j.R, j.C, b, h_of, id, U.as<double>(),
                                    A.as<double>(), Tp.as<double>(), nk.as<double>(), c.book.as<double>(),
                                    book.K, c.planes.as<uint8_t>(), c.t, Err.as<double>(),
                                    c.sub_idx.as<uint32_t>(), s));
    GRIDQ_CUDA(gptq::raw_gptq_trailing(c.W.as<double>(), j.M, j.R, j.C, b, h_of, id, U.as<double>(),
                                       Err.as<double>(), s));
  }
  GRIDQ_RETURN_IF_ERROR(fetch(j, c, s, res));
  res.seconds_encode = seconds_since(t0);
  if (o.refine_passes > 0) {
    t0 = std::chrono::steady_clock::now();
    A = DeviceBuffer();  // the step tables are spent
    Tp = DeviceBuffer();
    Err = DeviceBuffer();
    GRIDQ_RETURN_IF_ERROR(refine_all(j, book, o, s, U, c, res));
    res.seconds_refine = seconds_since(t0);
  }
  return res;
}

Expected<CbGptqResult> cb_rtn_fp4(const CbGptqBatch& j, const CbGptqBook& book, const CbGptqSettings& o,
                                  cudaStream_t s) {
  GRIDQ_RETURN_IF_ERROR(check_job(j, book, o, false));
  CbGptqResult res;
  const auto t0 = std::chrono::steady_clock::now();
  GRIDQ_ASSIGN_OR_RETURN(Common c, prepare(j, book, o, s));
  for (int b = 0; b < j.C / kSB; ++b)
    GRIDQ_CUDA(gptq::raw_two_tier(c.W.as<double>(), j.M, j.R, j.C, b, c.h_of.as<int>(), j.q,
                                  c.m2.as<double>(), c.book.as<double>(), book.K, c.t, o.max_window, o.refits,
                                  c.planes.as<uint8_t>(), c.sub_idx.as<uint32_t>(), s));
  GRIDQ_RETURN_IF_ERROR(fetch(j, c, s, res));
  res.identity.assign(size_t(j.nH), 1);
  res.damp_used.assign(size_t(j.nH), 0.0);
  res.seconds_encode = seconds_since(t0);
  return res;
}

}  // namespace gridq::cuda
