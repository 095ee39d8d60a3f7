// One 256-column block of quant/cb_gptq.cpp's gptq_core on the device: the per-step tables (A = U_SS⁻¹,
// T' = T·A, ‖T'‖²) shared by every row of a Hessian, the 64 sequential slab steps of each row (one warp per
// row: the transformed nearest entry with lanes over entries, the slab error, the feedback inside the
// block with lanes over columns), and the lazy trailing update W[:, b1:] −= Err·U[B, b1:] as a tiled product
// whose every element sums its 256 terms in order. Compiled with -fmad=false: the CPU's roundings.
#include "runtime/cuda/gptq/gptq_common.cuh"

namespace gridq::cuda::gptq {
namespace {

constexpr int kSteps = kSB / kSubDim;  // 64 slabs per block
constexpr int kWarps = 8;

__global__ void step_tables(const double* __restrict__ U, int C, int b, const uint8_t* __restrict__ identity,
                            const double* __restrict__ book, int K, double* __restrict__ Atab,
                            double* __restrict__ Tp, double* __restrict__ nk) {
  const int h = blockIdx.x, st = blockIdx.y;
  const int c = b * kSB + st * kSubDim;
  __shared__ double As[16];
  if (threadIdx.x == 0) {  // cb_gptq.cpp invert_upper_block, or the identity
    for (int i = 0; i < 16; ++i) As[i] = (identity[h] && i % 5 == 0) ? 1.0 : 0.0;
    if (!identity[h]) {
      const double* Us = U + static_cast<long long>(h) * C * C + static_cast<long long>(c) * C + c;
      for (int j = 0; j < 4; ++j) {
        As[j * 4 + j] = 1.0 / Us[static_cast<long long>(j) * C + j];
        for (int i = j - 1; i >= 0; --i) {
          double s = 0.0;
          for (int k = i + 1; k <= j; ++k) s += Us[static_cast<long long>(i) * C + k] * As[k * 4 + j];
          As[i * 4 + j] = -s / Us[static_cast<long long>(i) * C + i];
        }
      }
    }
  }
  __syncthreads();
  const long long slot = static_cast<long long>(h) * kSteps + st;
  if (threadIdx.x < 16) Atab[slot * 16 + threadIdx.x] = As[threadIdx.x];
  for (int k = threadIdx.x; k < K; k += blockDim.x) {  // K20/K24: more entries than threads
    const double* T = entry(book, K, st & 1, k);
    double n2 = 0.0;
    for (int j = 0; j < 4; ++j) {
      double s = 0.0;
      for (int i = 0; i <= j; ++i) s += T[i] * As[i * 4 + j];
      Tp[(slot * K + k) * 4 + j] = s;
      n2 += s * s;
    }
    nk[slot * K + k] = n2;
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    gptq_rows(double* __restrict__ W, int M, int R, int C, int b, const int* __restrict__ h_of,
              const uint8_t* __restrict__ identity, const double* __restrict__ U,
              const double* __restrict__ Atab, const double* __restrict__ Tp, const double* __restrict__ nk,
              const double* __restrict__ book, int K, const uint8_t* __restrict__ planes, V2Tables t,
              double* __restrict__ Err, uint32_t* __restrict__ sub_idx) {
  __shared__ double sws[kWarps][kSB];
  const int wid = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long warp = static_cast<long long>(blockIdx.x) * kWarps + wid;
  if (warp >= static_cast<long long>(M) * R) return;
  const int m = static_cast<int>(warp / R), r = static_cast<int>(warp % R);
  const int h = h_of[m];
  const bool ident = identity[h] != 0;
  const int b0 = b * kSB;
  double* sw = sws[wid];
  double* w = W + (static_cast<long long>(m) * R + r) * C + b0;
  for (int j = lane; j < kSB; j += 32) sw[j] = w[j];
  const uint8_t* pl = planes + ((static_cast<long long>(m) * R + r) * (C / kSB) + b) * kPlaneBytes;
  const int E = pl[0];
  const double* Uh = U + static_cast<long long>(h) * C * C;
  double* err = Err + (static_cast<long long>(m) * R + r) * kSB;
  uint32_t* idx = sub_idx + (static_cast<long long>(m) * R + r) * (C / kSubDim) + b0 / kSubDim;
  __syncwarp();
  for (int st = 0; st < kSteps; ++st) {
    const int cl = st * kSubDim;
    const long long slot = static_cast<long long>(h) * kSteps + st;
    const double* As = Atab + slot * 16;
    const double s = t.scale[E * 16 + pl[1 + st / 4]];
    double y[4];
    for (int j = 0; j < 4; ++j) {
      double a = 0.0;
      for (int i = 0; i <= j; ++i) a += (sw[cl + i] / s) * As[i * 4 + j];
      y[j] = a;
    }
    double best = INFINITY;
    int bk = K;
    for (int k = lane; k < K; k += 32) {
      const double* tp = Tp + (slot * K + k) * 4;
      double dot = 0.0;
      for (int j = 0; j < 4; ++j) dot += y[j] * tp[j];
      const double score = nk[slot * K + k] - 2.0 * dot;
      if (score < best) {
        best = score;
        bk = k;
      }
    }
    warp_argmin(best, bk);
    const double* T = entry(book, K, st & 1, bk);
    double qv[4], e[4];
    for (int j = 0; j < 4; ++j) qv[j] = decoded(T[j], static_cast<float>(s));
    for (int j = 0; j < 4; ++j) {
      double a = 0.0;
      for (int i = 0; i <= j; ++i) a += (sw[cl + i] - qv[i]) * As[i * 4 + j];
      e[j] = a;
    }
    if (lane == 0) {
      idx[st] = static_cast<uint32_t>(bk);
      for (int j = 0; j < 4; ++j) err[cl + j] = e[j];
    }
    if (!ident)
      for (int col = cl + kSubDim + lane; col < kSB; col += 32) {
        double a = 0.0;
        for (int i = 0; i < 4; ++i) a += e[i] * Uh[static_cast<long long>(b0 + cl + i) * C + b0 + col];
        sw[col] -= a;
      }
    __syncwarp();
  }
}

constexpr int kT = 64, kKc = 32, kTThreads = 256;

// W[m][r][b1 + c] −= Σ_{i<256} Err[m][r][i]·U[(b0 + i)][b1 + c], the sum from +0 in i order.
__global__ void __launch_bounds__(kTThreads)
    gptq_trailing(double* __restrict__ W, int R, int C, int b, const int* __restrict__ h_of,
                  const uint8_t* __restrict__ identity, const double* __restrict__ U,
                  const double* __restrict__ Err) {
  const int m = blockIdx.z;
  const int h = h_of[m];
  if (identity[h]) return;
  const int b0 = b * kSB, b1 = b0 + kSB;
  const int r0 = blockIdx.y * kT, c0 = b1 + blockIdx.x * kT;
  const double* Uh = U + static_cast<long long>(h) * C * C;
  const double* Em = Err + static_cast<long long>(m) * R * kSB;
  __shared__ double Es[kKc][kT + 1], Us[kKc][kT + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  double acc[4][4] = {};
  for (int k0 = 0; k0 < kSB; k0 += kKc) {
    __syncthreads();
    for (int e = tid; e < kKc * kT; e += kTThreads) {
      const int rr = e / kKc, k = e % kKc;
      Es[k][rr] = r0 + rr < R ? Em[static_cast<long long>(r0 + rr) * kSB + k0 + k] : 0.0;
      const int k2 = e / kT, cc = e % kT;
      Us[k2][cc] = c0 + cc < C ? Uh[static_cast<long long>(b0 + k0 + k2) * C + c0 + cc] : 0.0;
    }
    __syncthreads();
    for (int k = 0; k < kKc; ++k)
      for (int a = 0; a < 4; ++a)
        for (int q = 0; q < 4; ++q) acc[a][q] += Es[k][ty * 4 + a] * Us[k][tx * 4 + q];
  }
  double* Wm = W + static_cast<long long>(m) * R * C;
  for (int a = 0; a < 4; ++a)
    for (int q = 0; q < 4; ++q) {
      const int r = r0 + ty * 4 + a, c = c0 + tx * 4 + q;
      if (r < R && c < C) Wm[static_cast<long long>(r) * C + c] -= acc[a][q];
    }
}

}  // namespace

cudaError_t raw_step_tables(const double* U, int nH, int C, int b, const uint8_t* identity,
                            const double* book, int K, double* A, double* Tp, double* nk, cudaStream_t s) {
  step_tables<<<dim3(nH, kSteps), entry_threads(K), 0, s>>>(U, C, b, identity, book, K, A, Tp, nk);
  return cudaGetLastError();
}

cudaError_t raw_gptq_block(double* W, int M, int R, int C, int b, const int* h_of, const uint8_t* identity,
                           const double* U, const double* A, const double* Tp, const double* nk,
                           const double* book, int K, const uint8_t* planes, V2Tables t, double* Err,
                           uint32_t* sub_idx, cudaStream_t s) {
  const long long warps = static_cast<long long>(M) * R;
  gptq_rows<<<static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(
      W, M, R, C, b, h_of, identity, U, A, Tp, nk, book, K, planes, t, Err, sub_idx);
  return cudaGetLastError();
}

cudaError_t raw_gptq_trailing(double* W, int M, int R, int C, int b, const int* h_of, const uint8_t* identity,
                              const double* U, const double* Err, cudaStream_t s) {
  const int rest = C - (b + 1) * kSB;
  if (rest <= 0) return cudaSuccess;
  gptq_trailing<<<dim3(static_cast<unsigned>((rest + kT - 1) / kT), static_cast<unsigned>((R + kT - 1) / kT),
                       M),
                  kTThreads, 0, s>>>(W, R, C, b, h_of, identity, U, Err);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::gptq
