// quant/cb_refine.cpp's refine_fp4 on the device: coordinate descent in the H metric after CB-GPTQ, one warp
// per row. The row's state (decoded ŵ, error e = w − ŵ, gradient g = Hd·e) lives in global memory; every
// element of g is updated by the accepted changes in the CPU's order (one lane per column), the entry
// search runs with lanes over entries and the CPU's tie rule, and the group-scale search with one lane per
// candidate code. Compiled with -fmad=false: the CPU's roundings.
#include "runtime/cuda/gptq/gptq_common.cuh"

namespace gridq::cuda::gptq {
namespace {

constexpr int kWarps = 4;

// λ[h] = damp[h]·tr(H)/C in place of damp (tr summed in column order), cold[h] = !(tr > 0); one thread each.
__global__ void refine_lambda(const float* __restrict__ H, int nH, int C, double* __restrict__ damp_lambda,
                              uint8_t* __restrict__ cold) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= nH) return;
  const float* Hh = H + static_cast<long long>(h) * C * C;
  double tr = 0.0;
  for (int j = 0; j < C; ++j) tr += Hh[static_cast<long long>(j) * C + j];
  damp_lambda[h] = damp_lambda[h] * tr / C;
  cold[h] = !(tr > 0.0);
}

// Hd = H + λI (cb_refine.cpp damped_h).
__global__ void refine_damped(const float* __restrict__ H, int C, const double* __restrict__ lambda,
                              double* __restrict__ Hd) {
  const int h = blockIdx.z, i = blockIdx.y;
  const float* Hh = H + static_cast<long long>(h) * C * C;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x) {
    const double v = Hh[static_cast<long long>(i) * C + j];
    Hd[(static_cast<long long>(h) * C + i) * C + j] = i == j ? v + lambda[h] : v;
  }
}

// Per slab v the entry norms n_k = t_k·Hd_SS·t_kᵀ.
__global__ void refine_norms(const double* __restrict__ Hd, int C, const double* __restrict__ book, int K,
                             double* __restrict__ nk) {
  const int h = blockIdx.y, v = blockIdx.x;
  const double* Hh = Hd + static_cast<long long>(h) * C * C;
  const int c0 = v * kSubDim;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {  // K20/K24: more entries than threads
    const double* T = entry(book, K, v & 1, k);
    double n2 = 0.0;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) n2 += T[i] * Hh[static_cast<long long>(c0 + i) * C + c0 + j] * T[j];
    nk[(static_cast<long long>(h) * (C / kSubDim) + v) * K + k] = n2;
  }
}

// ŵ from the indices and planes (cb_gptq.cpp decode_fp4) and e = w − ŵ, [M, R, C] float64.
__global__ void refine_decode(const float* __restrict__ W, long long n, int C,
                              const uint32_t* __restrict__ sub_idx, const uint8_t* __restrict__ planes,
                              const double* __restrict__ book, int K, V2Tables t, double* __restrict__ wh,
                              double* __restrict__ e) {
  for (long long x = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; x < n;
       x += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = x / C;
    const int col = static_cast<int>(x % C);
    const uint8_t* pl = planes + (row * (C / kSB) + col / kSB) * kPlaneBytes;
    const float s = t.scale[pl[0] * 16 + pl[1 + (col % kSB) / kGroup]];
    const int v = col / kSubDim;
    const double val = decoded(entry(book, K, v & 1, sub_idx[row * (C / kSubDim) + v])[col % kSubDim], s);
    wh[x] = val;
    e[x] = static_cast<double>(W[x]) - val;
  }
}

constexpr int kT = 64, kKc = 32, kTThreads = 256;

// g[m][r][j] = Σ_i Hd[j][i]·e[m][r][i], from +0 in i order (cb_refine.cpp `gradient`).
__global__ void __launch_bounds__(kTThreads)
    refine_gradient(const double* __restrict__ Hd, const double* __restrict__ e, int R, int C,
                    const int* __restrict__ h_of, double* __restrict__ g) {
  const int m = blockIdx.z;
  const double* Hh = Hd + static_cast<long long>(h_of[m]) * C * C;
  const double* E = e + static_cast<long long>(m) * R * C;
  const int r0 = blockIdx.y * kT, j0 = blockIdx.x * kT;
  __shared__ double Es[kKc][kT + 1], Hs[kKc][kT + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  double acc[4][4] = {};
  for (int i0 = 0; i0 < C; i0 += kKc) {
    __syncthreads();
    for (int x = tid; x < kKc * kT; x += kTThreads) {
      const int rr = x / kKc, k = x % kKc;
      Es[k][rr] = r0 + rr < R ? E[static_cast<long long>(r0 + rr) * C + i0 + k] : 0.0;
      Hs[k][rr] = j0 + rr < C ? Hh[static_cast<long long>(j0 + rr) * C + i0 + k] : 0.0;
    }
    __syncthreads();
    for (int k = 0; k < kKc; ++k)
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) acc[a][b] += Hs[k][tx * 4 + b] * Es[k][ty * 4 + a];
  }
  double* G = g + static_cast<long long>(m) * R * C;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int r = r0 + ty * 4 + a, j = j0 + tx * 4 + b;
      if (r < R && j < C) G[static_cast<long long>(r) * C + j] = acc[a][b];
    }
}

// f = Σ_j g_j·e_j in j order, one thread per row.
__global__ void refine_objective(const double* __restrict__ g, const double* __restrict__ e, long long rows,
                                 int C, double* __restrict__ f) {
  const long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double s = 0.0;
  for (int j = 0; j < C; ++j) s += g[r * C + j] * e[r * C + j];
  f[r] = s;
}

struct Row {  // one row's state, global memory
  const float* w;
  double *wh, *e, *g;
  const double* Hd;  // [C, C]
  int C;
};

// Δf of replacing columns [c0, c0 + n) by x: δ·Hd·δᵀ − 2·δ·g (cb_refine.cpp `delta_f`), by one lane.
__device__ double delta_f(const Row& s, int c0, int n, const double* x) {
  double dl[kGroup];
  for (int i = 0; i < n; ++i) dl[i] = x[i] - s.wh[c0 + i];
  double q = 0.0, lin = 0.0;
  for (int i = 0; i < n; ++i) {
    if (dl[i] == 0.0) continue;
    const double* h = s.Hd + static_cast<long long>(c0 + i) * s.C + c0;
    double a = 0.0;
    for (int j = 0; j < n; ++j) a += h[j] * dl[j];
    q += dl[i] * a;
    lin += dl[i] * s.g[c0 + i];
  }
  return q - 2.0 * lin;
}

// Accepts x over [c0, c0 + n): ŵ = x, e = w − x, g −= Hd[:, cols]·δ (every lane its columns of g).
__device__ void accept(const Row& s, int c0, int n, const double* x, int lane) {
  for (int i = 0; i < n; ++i) {
    const double delta = x[i] - s.wh[c0 + i];
    __syncwarp();
    if (delta == 0.0) continue;
    const double* h = s.Hd + static_cast<long long>(c0 + i) * s.C;
    for (int j = lane; j < s.C; j += 32) s.g[j] -= delta * h[j];
    __syncwarp();
    if (lane == 0) {
      s.wh[c0 + i] = x[i];
      s.e[c0 + i] = static_cast<double>(s.w[c0 + i]) - x[i];
    }
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    refine_rows(const float* __restrict__ W, int M, int R, int C, const int* __restrict__ h_of,
                const uint8_t* __restrict__ skip, const double* __restrict__ Hd,
                const double* __restrict__ nk, const double* __restrict__ book, int K, V2Tables t, int passes,
                int scales, double* wh, double* e, double* g, uint32_t* __restrict__ sub_idx,
                uint8_t* __restrict__ planes, int* __restrict__ stats) {
  const int wid = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long warp = static_cast<long long>(blockIdx.x) * kWarps + wid;
  if (warp >= static_cast<long long>(M) * R) return;
  const int m = static_cast<int>(warp / R);
  const int h = h_of[m];
  if (skip[m]) return;
  const long long row = warp;
  Row s{W + row * C, wh + row * C, e + row * C, g + row * C, Hd + static_cast<long long>(h) * C * C, C};
  const int nv = C / kSubDim;
  uint32_t* idx = sub_idx + row * nv;
  uint8_t* pl = planes + row * (C / kSB) * kPlaneBytes;
  const double* nkh = nk + static_cast<long long>(h) * nv * K;
  int rounds = 0, n_codes = 0, n_scales = 0;
  for (int round = 0; round < passes; ++round) {
    rounds = round + 1;
    int changed = 0;
    for (int v = 0; v < nv; ++v) {  // codes pass, scales fixed
      const int c0 = v * kSubDim;
      const uint8_t* p = pl + (c0 / kSB) * kPlaneBytes;
      const float sc = t.scale[p[0] * 16 + p[1 + (c0 % kSB) / kGroup]];
      double b[4];
      for (int i = 0; i < 4; ++i) {
        double a = s.g[c0 + i];
        for (int j = 0; j < 4; ++j) a += s.Hd[static_cast<long long>(c0 + i) * C + c0 + j] * s.wh[c0 + j];
        b[i] = a;
      }
      const double sd = sc;
      double best = INFINITY;
      int bk = K;
      for (int k = lane; k < K; k += 32) {
        const double* T = entry(book, K, v & 1, k);
        double dot = 0.0;
        for (int i = 0; i < 4; ++i) dot += T[i] * b[i];
        const double score = sd * sd * nkh[static_cast<long long>(v) * K + k] - 2.0 * sd * dot;
        if (score < best) {
          best = score;
          bk = k;
        }
      }
      warp_argmin(best, bk);
      if (!(best < INFINITY)) bk = 0;
      if (static_cast<uint32_t>(bk) == idx[v]) continue;
      double x[4];
      const double* T = entry(book, K, v & 1, bk);
      for (int i = 0; i < 4; ++i) x[i] = decoded(T[i], sc);
      if (!(delta_f(s, c0, 4, x) < 0.0)) continue;
      accept(s, c0, 4, x, lane);
      if (lane == 0) idx[v] = static_cast<uint32_t>(bk);
      __syncwarp();
      ++changed;
      ++n_codes;
    }
    for (int grp = 0; scales && grp < C / kGroup; ++grp) {  // scales pass, codes fixed
      const int c0 = grp * kGroup;
      uint8_t* p = pl + (c0 / kSB) * kPlaneBytes;
      const int gi = (c0 % kSB) / kGroup;
      const int E = p[0], cur = p[1 + gi];
      double tv[kGroup], x[kGroup];
      for (int j = 0; j < kGroup; ++j) {
        const int v = (c0 + j) / kSubDim;
        tv[j] = entry(book, K, v & 1, idx[v])[(c0 + j) % kSubDim];
      }
      double df = INFINITY;  // lane c scores code c
      if (lane < 16 && lane != cur && t.legal[E * 16 + lane]) {
        const float sc = t.scale[E * 16 + lane];
        for (int j = 0; j < kGroup; ++j) x[j] = decoded(tv[j], sc);
        df = delta_f(s, c0, kGroup, x);
        if (!(df < 0.0)) df = INFINITY;  // only a strict drop is taken
      }
      int bc = lane;
      warp_argmin(df, bc);
      if (!(df < INFINITY)) continue;
      const float sc = t.scale[E * 16 + bc];
      for (int j = 0; j < kGroup; ++j) x[j] = decoded(tv[j], sc);
      accept(s, c0, kGroup, x, lane);
      if (lane == 0) p[1 + gi] = static_cast<uint8_t>(bc);
      __syncwarp();
      ++changed;
      ++n_scales;
    }
    if (changed == 0) break;
  }
  if (lane == 0) {
    stats[row * 3] = rounds;
    stats[row * 3 + 1] = n_codes;
    stats[row * 3 + 2] = n_scales;
  }
}

}  // namespace

cudaError_t raw_refine_prepare(const float* H, int nH, int C, double* damp, const double* book, int K,
                               double* Hd, double* nk, uint8_t* cold, cudaStream_t s) {
  refine_lambda<<<(nH + 127) / 128, 128, 0, s>>>(H, nH, C, damp, cold);
  refine_damped<<<dim3(static_cast<unsigned>((C + 255) / 256), C, nH), 256, 0, s>>>(H, C, damp, Hd);
  refine_norms<<<dim3(C / kSubDim, nH), entry_threads(K), 0, s>>>(Hd, C, book, K, nk);
  return cudaGetLastError();
}

cudaError_t raw_refine_decode(const float* W, long long n, int C, const uint32_t* sub_idx,
                              const uint8_t* planes, const double* book, int K, V2Tables t, double* wh,
                              double* e, cudaStream_t s) {
  refine_decode<<<4096, 256, 0, s>>>(W, n, C, sub_idx, planes, book, K, t, wh, e);
  return cudaGetLastError();
}

cudaError_t raw_refine_objective(const double* Hd, const double* e, int M, int R, int C, const int* h_of,
                                 double* g, double* f, cudaStream_t s) {
  refine_gradient<<<dim3(static_cast<unsigned>((C + kT - 1) / kT), static_cast<unsigned>((R + kT - 1) / kT),
                         M),
                    kTThreads, 0, s>>>(Hd, e, R, C, h_of, g);
  const long long rows = static_cast<long long>(M) * R;
  refine_objective<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, s>>>(g, e, rows, C, f);
  return cudaGetLastError();
}

cudaError_t raw_refine_rows(const float* W, int M, int R, int C, const int* h_of, const uint8_t* skip,
                            const double* Hd, const double* nk, const double* book, int K, V2Tables t,
                            int passes, int scales, double* wh, double* e, double* g, uint32_t* sub_idx,
                            uint8_t* planes, int* stats, cudaStream_t s) {
  const long long warps = static_cast<long long>(M) * R;
  refine_rows<<<static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(
      W, M, R, C, h_of, skip, Hd, nk, book, K, t, passes, scales, wh, e, g, sub_idx, planes, stats);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::gptq
