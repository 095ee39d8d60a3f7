// H = Σ xᵀx by blocks of rows (see hessian_accum.h). Bound: FMA throughput; a block's rows are packed into
// panels so the 6×16 register tile streams both operands from L1, and only tiles touching the upper
// triangle are computed (H is symmetric; the lower triangle is mirrored at the end).
#include "quant/hessian_accum.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gridq::quant {

namespace {

constexpr int64_t kMr = 6;   // H rows per register tile (broadcast operand)
constexpr int64_t kNr = 16;  // H columns per register tile (two 8-lane vectors)

// acc[kMr][kNr] = Σ_t pi[t][ii] * pj[t][jj], t ascending, one fused multiply-add per term.
__attribute__((target("avx2,fma"))) void tile_avx2(const float* pi, const float* pj, int64_t B, float* acc) {
  // Twelve named accumulators: an array of __m256 would live on the stack and serialise on store forwarding.
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
         c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t t = 0; t < B; ++t) {
    const __m256 b0 = _mm256_loadu_ps(pj + t * kNr), b1 = _mm256_loadu_ps(pj + t * kNr + 8);
    const float* a = pi + t * kMr;
    __m256 v = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(v, b0, c00);
    c01 = _mm256_fmadd_ps(v, b1, c01);
    v = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(v, b0, c10);
    c11 = _mm256_fmadd_ps(v, b1, c11);
    v = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(v, b0, c20);
    c21 = _mm256_fmadd_ps(v, b1, c21);
    v = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(v, b0, c30);
    c31 = _mm256_fmadd_ps(v, b1, c31);
    v = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(v, b0, c40);
    c41 = _mm256_fmadd_ps(v, b1, c41);
    v = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(v, b0, c50);
    c51 = _mm256_fmadd_ps(v, b1, c51);
  }
  const __m256 out[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t ii = 0; ii < kMr; ++ii) {
    _mm256_storeu_ps(acc + ii * kNr, out[ii][0]);
    _mm256_storeu_ps(acc + ii * kNr + 8, out[ii][1]);
  }
}

// The same sums term by term with std::fma: bit-identical to tile_avx2 (each lane is one fma chain).
void tile_portable(const float* pi, const float* pj, int64_t B, float* acc) {
  std::fill(acc, acc + kMr * kNr, 0.0f);
  for (int64_t t = 0; t < B; ++t)
    for (int64_t ii = 0; ii < kMr; ++ii)
      for (int64_t jj = 0; jj < kNr; ++jj)
        acc[ii * kNr + jj] = std::fma(pi[t * kMr + ii], pj[t * kNr + jj], acc[ii * kNr + jj]);
}

bool use_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

}  // namespace

// H is allocated at the first block, so an accumulator moved onto the device (on_device) never held one.
HessianAccumulator::HessianAccumulator(int cols) : cols_(cols) {}

Expected<HessianAccumulator> HessianAccumulator::on_device(int cols) {
  const runtime::CudaBackendHooks* hooks = runtime::cuda_backend_hooks();
  if (!hooks || !hooks->hessian) return err("device Hessians: this gridq was built without the CUDA backend");
  HessianAccumulator a(cols);
  GRIDQ_ASSIGN_OR_RETURN(auto store, hooks->hessian(cols));
  a.dev_ = std::move(store);
  return a;
}

void HessianAccumulator::add_device(const float* x, int64_t n) {
  if (dev_status_.ok() && n > 0) dev_status_ = dev_->add_blocks(x, n);
}

void HessianAccumulator::add_rows(const float* x, int64_t n, const float* scale) {
  const int64_t C = cols_;
  if (n <= 0 || C == 0) return;
  pending_.resize(static_cast<size_t>((n_pending_ + n) * C));
  float* dst = pending_.data() + n_pending_ * C;
  if (scale) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < C; ++c) dst[r * C + c] = x[r * C + c] * scale[r];
  } else {
    std::memcpy(dst, x, static_cast<size_t>(n * C) * sizeof(float));
  }
  n_ += n;
  n_pending_ += n;
  if (n_pending_ > kMaxPendingRows) absorb();
}

void HessianAccumulator::absorb() {
  const int64_t C = cols_, full = n_pending_ / kBlockRows * kBlockRows;
  if (full == 0) return;
  if (dev_) {
    add_device(pending_.data(), full);
  } else {
    for (int64_t r = 0; r < full; r += kBlockRows) add_block(pending_.data() + r * C, kBlockRows);
  }
  std::memmove(pending_.data(), pending_.data() + full * C,
               static_cast<size_t>((n_pending_ - full) * C) * sizeof(float));
  n_pending_ -= full;
  pending_.resize(static_cast<size_t>(n_pending_ * C));
}

void HessianAccumulator::add_block(const float* x, int64_t B) {
  const int64_t C = cols_;
  const int64_t n_ip = (C + kMr - 1) / kMr, n_jp = (C + kNr - 1) / kNr;
  // Panels: pack_i [n_ip][B][kMr], pack_j [n_jp][B][kNr], zero-padded past C.
  thread_local std::vector<float> pack_i, pack_j;
  pack_i.assign(static_cast<size_t>(n_ip * B * kMr), 0.0f);
  pack_j.assign(static_cast<size_t>(n_jp * B * kNr), 0.0f);
  for (int64_t t = 0; t < B; ++t) {
    const float* row = x + t * C;
    for (int64_t ip = 0; ip < n_ip; ++ip) {
      const int64_t c0 = ip * kMr, w = std::min(kMr, C - c0);
      float* dst = pack_i.data() + (ip * B + t) * kMr;
      for (int64_t k = 0; k < w; ++k) dst[k] = row[c0 + k];
    }
    for (int64_t jp = 0; jp < n_jp; ++jp) {
      const int64_t c0 = jp * kNr, w = std::min(kNr, C - c0);
      float* dst = pack_j.data() + (jp * B + t) * kNr;
      for (int64_t k = 0; k < w; ++k) dst[k] = row[c0 + k];
    }
  }
  // Every tile that holds some (i, j) with j >= i; the j panel stays in L1 across its i panels.
  const bool avx2 = use_avx2();
  if (h_.empty()) h_.assign(static_cast<size_t>(C * C), 0.0f);
  float* H = h_.data();
  alignas(32) float acc[kMr * kNr];
  for (int64_t jp = 0; jp < n_jp; ++jp) {
    const float* pj = pack_j.data() + jp * B * kNr;
    for (int64_t ip = 0; ip < n_ip && ip * kMr <= jp * kNr + kNr - 1; ++ip) {
      const float* pi = pack_i.data() + ip * B * kMr;
      if (avx2)
        tile_avx2(pi, pj, B, acc);
      else
        tile_portable(pi, pj, B, acc);
      for (int64_t ii = 0; ii < kMr; ++ii) {
        const int64_t i = ip * kMr + ii;
        if (i >= C) break;
        for (int64_t jj = 0; jj < kNr; ++jj) {
          const int64_t j = jp * kNr + jj;
          if (j >= i && j < C) H[i * C + j] += acc[ii * kNr + jj];
        }
      }
    }
  }
}

std::vector<float> HessianAccumulator::finish() {
  absorb();
  if (n_pending_ > 0) {
    if (dev_)
      add_device(pending_.data(), n_pending_);
    else
      add_block(pending_.data(), n_pending_);
  }
  n_pending_ = 0;
  pending_ = {};
  if (dev_) {
    auto up = dev_status_.ok() ? dev_->upper() : Expected<std::vector<float>>(dev_status_);
    dev_.reset();
    if (!up.ok()) {
      dev_status_ = up.status();
      return {};
    }
    h_ = std::move(*up);
  }
  const int64_t C = cols_;
  if (h_.empty()) h_.assign(static_cast<size_t>(C * C), 0.0f);  // no rows: H = 0
  // Lower := upper, in 64×64 tiles (a row-by-row transpose misses the cache on every store at C = 3072).
  constexpr int64_t kT = 64;
  for (int64_t i0 = 0; i0 < C; i0 += kT)
    for (int64_t j0 = i0; j0 < C; j0 += kT)
      for (int64_t i = i0; i < std::min(C, i0 + kT); ++i)
        for (int64_t j = std::max(i + 1, j0); j < std::min(C, j0 + kT); ++j)
          h_[static_cast<size_t>(j * C + i)] = h_[static_cast<size_t>(i * C + j)];
  return std::move(h_);
}

int64_t HessianAccumulator::bytes() const {
  return static_cast<int64_t>((h_.capacity() + pending_.capacity()) * sizeof(float));
}

void HoldoutRows::add(const float* x) {
  const int64_t k = seen_++;
  if (k % stride_ != 0) return;
  if (count() == cap_) {
    // Keep every other kept row (those at multiples of 2·stride) and double the stride.
    const int64_t n = count();
    int64_t w = 0;
    for (int64_t r = 0; r < n; r += 2, ++w)
      std::memmove(rows_.data() + w * cols_, rows_.data() + r * cols_,
                   static_cast<size_t>(cols_) * sizeof(float));
    rows_.resize(static_cast<size_t>(w * cols_));
    stride_ *= 2;
    if (k % stride_ != 0) return;
  }
  rows_.insert(rows_.end(), x, x + cols_);
}

}  // namespace gridq::quant
