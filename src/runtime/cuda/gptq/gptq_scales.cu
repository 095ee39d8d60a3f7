// The two-tier v2 scale search of quant/scale_search_v2.cpp on the device: the pilot (m2) and the
// superblock search (analytic s0, exponent window, E, per-group codes, refits), one warp per row. The CPU
// scores candidates through moments A_vk, B_vk per sub-vector; here the warp computes them into shared memory
// one sub-vector at a time (lanes over entries) and then every lane scores its own candidate scales against
// all entries in ascending k — the CPU's sequence of operations and tie rules per value, so the chosen
// planes are the CPU's. Compiled with -fmad=false.

#include "runtime/cuda/gptq/gptq_common.cuh"

namespace gridq::cuda::gptq {
namespace {

// Rows (one warp each) per CTA: 8 for sub-tables of up to 256 entries (K12, K16); fewer for K20 (1024) and
// K24 (4096), whose per-warp moment arrays would not fit eight to a CTA (two_tier_rows: 37 KB and 86 KB a
// warp). A warp's row and its arithmetic do not depend on the count. Those two also declare one CTA per SM
// (their shared memory allows no more), which lets ptxas keep them out of local memory; K12 / K16 keep the
// compiler's own choice (0).
template <int K>
constexpr int warps_for() {
  return K <= 256 ? 8 : K <= 1024 ? 4 : 2;
}

// ---- pilot ----

// Per warp, in dynamic shared memory: A, B [K] of one sub-vector, the group's w and qe [16].
template <int K>
constexpr int pilot_doubles() {
  return 2 * K + 2 * kGroup;
}

template <int K>
__global__ void __launch_bounds__(warps_for<K>() * 32, K > 256 ? 1 : 0)
    pilot_rows(const double* __restrict__ W, int M, int R, int C, int rows, const int* __restrict__ h_of,
               const float* __restrict__ q, const double* __restrict__ book, V2Tables t,
               double* __restrict__ numden) {
  extern __shared__ double smem[];
  const int wid = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long warp = static_cast<long long>(blockIdx.x) * warps_for<K>() + wid;
  if (warp >= static_cast<long long>(M) * rows) return;
  const int m = static_cast<int>(warp / rows), r = static_cast<int>(warp % rows);
  const double* w = W + (static_cast<long long>(m) * R + r) * C;
  const float* qr = q + static_cast<long long>(h_of[m]) * C;
  double* A = smem + wid * pilot_doubles<K>();
  double* B = A + K;
  double* sw = B + K;        // [kGroup]
  double* sq = sw + kGroup;  // [kGroup]
  const double L = 6.0 - 2.0 * (lane & 15) / 15.0;
  double num = 0.0, den = 0.0;
  for (int g = 0; g < C / kGroup; ++g) {
    const double wv = lane < kGroup ? w[g * kGroup + lane] : 0.0;
    double amax = fabs(wv);
    for (int off = 16; off; off >>= 1) amax = fmax(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (amax == 0.0) continue;
    double qs = 0.0;
    for (int j = 0; j < kGroup; ++j) qs += qr[g * kGroup + j];
    __syncwarp();
    if (lane < kGroup) {
      sw[lane] = wv;
      sq[lane] = qs > 0.0 ? static_cast<double>(qr[g * kGroup + lane]) : 1.0;
    }
    const double s = e4m3_round(amax / L, t.e4m3);
    const bool valid = lane < kGroup && s != 0.0;
    const double s2 = s * s, ts = 2.0 * s;
    double e = 0.0;
    for (int v = 0; v < kGroup / kSubDim; ++v) {
      const int sub = (g * (kGroup / kSubDim) + v) & 1;
      __syncwarp();
      for (int k = lane; k < K; k += 32) moments(entry(book, K, sub, k), &sw[v * 4], &sq[v * 4], A[k], B[k]);
      __syncwarp();
      if (valid) {
        double best = INFINITY;
        for (int k = 0; k < K; ++k) {
          const double x = s2 * A[k] - ts * B[k];
          if (x < best) best = x;
        }
        e += best;
      }
    }
    double key = valid ? e : INFINITY;
    int idx = lane;
    warp_argmin(key, idx);  // the first minimum over the 16 candidates in order
    if (!(key < INFINITY)) continue;
    const double bs = __shfl_sync(0xffffffffu, s, idx);
    for (int v = 0; v < kGroup / kSubDim; ++v) {
      const int sub = (g * (kGroup / kSubDim) + v) & 1;
      const int k = best_entry_k(book, K, sub, &sw[v * 4], &sq[v * 4], bs, lane);
      const double* te = entry(book, K, sub, k);
      for (int j = 0; j < kSubDim; ++j) {
        num += sq[v * 4 + j] * te[j] * te[j];
        den += sq[v * 4 + j];
      }
    }
  }
  if (lane == 0) {
    numden[warp * 2] = num;
    numden[warp * 2 + 1] = den;
  }
}

__global__ void pilot_reduce(const double* __restrict__ numden, int M, int rows, double* __restrict__ m2) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  double n = 0.0, d = 0.0;
  for (int r = 0; r < rows; ++r) {
    n += numden[(static_cast<long long>(m) * rows + r) * 2];
    d += numden[(static_cast<long long>(m) * rows + r) * 2 + 1];
  }
  m2[m] = (!(d > 0.0) || !(n > 0.0)) ? 1.0 : n / d;
}

// ---- superblock search ----

struct Smem {  // per warp, in dynamic shared memory
  static constexpr int kDoubles(int K) { return 2 * kSB + 2 * K + kGroup * kMaxScales + kGroup; }
};

// The exponent window of one row (scale_search_v2.cpp step 3), computed by every lane alike.
__device__ void exponent_window(const double* s0, int max_window, int& lo, int& hi) {
  double v[kGroup];
  int n = 0;
  for (int g = 0; g < kGroup; ++g)
    if (s0[g] > 0.0 && isfinite(s0[g])) {
      int i = n++;
      for (; i > 0 && v[i - 1] > s0[g]; --i) v[i] = v[i - 1];
      v[i] = s0[g];
    }
  lo = hi = 118;  // gridbook::kV2ZeroSuperblockE
  if (n == 0) return;
  lo = min(max(ceil_log2(v[0] / 3.75) + 126, kEMin), kEMax);
  hi = min(max(floor_log2(1.5 * v[n - 1]) + 128, kEMin), kEMax);
  if (lo > hi) {
    const int x = lo;
    lo = hi;
    hi = x;
  }
  if (hi - lo + 1 > max_window) {  // keep the max_window exponents nearest the median's (ties: lower E)
    const int center = floor_log2(v[(n - 1) / 2]) + 127;
    int nlo = kEMax + 1, nhi = kEMin - 1;
    for (int E = lo; E <= hi; ++E) {
      int rank = 0;
      for (int F = lo; F <= hi; ++F) {
        const int dF = abs(F - center), dE = abs(E - center);
        rank += (dF < dE || (dF == dE && F < E)) ? 1 : 0;
      }
      if (rank < max_window) {
        nlo = min(nlo, E);
        nhi = max(nhi, E);
      }
    }
    lo = nlo;
    hi = nhi;
  }
}

template <int K>
__global__ void __launch_bounds__(warps_for<K>() * 32, K > 256 ? 1 : 0)
    two_tier_rows(const double* __restrict__ W, int M, int R, int C, int b, const int* __restrict__ h_of,
                  const float* __restrict__ q, const double* __restrict__ m2v,
                  const double* __restrict__ book, V2Tables t, int max_window, int refits,
                  uint8_t* __restrict__ planes, uint32_t* __restrict__ sub_idx) {
  extern __shared__ double smem[];
  const int wid = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long warp = static_cast<long long>(blockIdx.x) * warps_for<K>() + wid;
  if (warp >= static_cast<long long>(M) * R) return;
  const int m = static_cast<int>(warp / R), r = static_cast<int>(warp % R);
  double* sw = smem + wid * Smem::kDoubles(K);
  double* sq = sw + kSB;
  double* A = sq + kSB;
  double* B = A + K;
  double* eg = B + K;                     // [16, kMaxScales]
  double* s0 = eg + kGroup * kMaxScales;  // [16]
  const double* w = W + (static_cast<long long>(m) * R + r) * C + b * kSB;
  const float* qr = q + static_cast<long long>(h_of[m]) * C + b * kSB;
  bool nonzero = false;
  for (int j = lane; j < kSB; j += 32) {
    sw[j] = w[j];
    nonzero = nonzero || sw[j] != 0.0;
  }
  if (lane < kGroup) {
    double s = 0.0;
    for (int j = 0; j < kGroup; ++j) s += qr[lane * kGroup + j];
    s0[lane] = s;  // the group's Σ q for now
  }
  __syncwarp();
  for (int j = lane; j < kSB; j += 32) sq[j] = s0[j / kGroup] > 0.0 ? static_cast<double>(qr[j]) : 1.0;
  const bool all_zero = !__any_sync(0xffffffffu, nonzero);
  __syncwarp();

  int E = 118;
  int code[kGroup];
  for (int g = 0; g < kGroup; ++g) code[g] = 0;
  if (!all_zero) {
    bool gzero = true;
    if (lane < kGroup) {  // step 2: analytic group scales
      double num = 0.0, den = 0.0;
      for (int j = lane * kGroup; j < (lane + 1) * kGroup; ++j) {
        num += sq[j] * sw[j] * sw[j];
        den += sq[j];
        gzero = gzero && sw[j] == 0.0;
      }
      s0[lane] = sqrt(num / (m2v[m] * den));
    }
    const unsigned zero_mask = __ballot_sync(0xffffffffu, lane < kGroup && gzero);
    __syncwarp();
    int lo, hi;
    exponent_window(s0, max_window, lo, hi);
    const int wi = (lo - kEMin) * kNE + (hi - kEMin);
    const int ns = t.win_n[wi];
    const double* list = t.win + static_cast<long long>(wi) * kMaxScales;
    double sc[4];
    double s2[4], ts[4];  // s², 2s of this lane's candidates (unused slots score a dummy scale)
    for (int u = 0; u < 4; ++u) {
      sc[u] = lane + 32 * u < ns ? list[lane + 32 * u] : 1.0;
      s2[u] = sc[u] * sc[u];
      ts[u] = 2.0 * sc[u];
    }
    for (int g = 0; g < kGroup; ++g) {  // e_g(s) for every candidate s of the window
      double acc[4] = {0.0, 0.0, 0.0, 0.0};
      for (int v = g * 4; v < g * 4 + 4; ++v) {
        __syncwarp();
        for (int k = lane; k < K; k += 32)
          moments(entry(book, K, v & 1, k), sw + v * 4, sq + v * 4, A[k], B[k]);
        const double cv = sub_c(sw + v * 4, sq + v * 4);
        __syncwarp();
        // Entries outer, this lane's (up to 4) candidate scales inner: one read of A_k, B_k serves them
        // all; each scale still sees the entries in ascending k.
        double best[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
        for (int k = 0; k < K; ++k) {
          const double a = A[k], bb = B[k];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const double x = s2[u] * a - ts[u] * bb;
            best[u] = x < best[u] ? x : best[u];
          }
        }
        for (int u = 0; u < 4; ++u) acc[u] += cv + best[u];
      }
      for (int u = 0; u < 4; ++u)
        if (lane + 32 * u < ns) eg[g * kMaxScales + lane + 32 * u] = acc[u];
    }
    __syncwarp();
    // Step 4: E = first argmin of the superblock error; lane l scores E = lo + l.
    double total = INFINITY;
    if (lane <= hi - lo) {
      const int e = lo + lane;
      const int16_t* ix = t.win_idx + (static_cast<long long>(wi) * kNE + (e - kEMin)) * 16;
      double tot = 0.0;
      bool any = false;
      for (int g = 0; g < kGroup; ++g) {
        double mn = INFINITY;
        for (int c = 0; c < 16; ++c)
          if (t.legal[e * 16 + c]) {
            const double x = eg[g * kMaxScales + ix[c]];
            mn = x < mn ? x : mn;
            any = true;
          }
        tot += mn;
      }
      if (any) total = tot;
    }
    int be = lane;
    warp_argmin(total, be);
    E = total < INFINITY ? lo + be : lo;
    // Step 5 and the refits, group by group (warp-uniform; the refits' nearest entries lane-parallel).
    const int16_t* ix = t.win_idx + (static_cast<long long>(wi) * kNE + (E - kEMin)) * 16;
    const int lowest = t.lowest[E];
    for (int g = 0; g < kGroup; ++g) {
      if (zero_mask >> g & 1) {
        code[g] = lowest;
        continue;
      }
      double best = INFINITY;
      int bc = lowest;
      for (int c = 0; c < 16; ++c) {
        if (!t.legal[E * 16 + c]) continue;
        const double x = eg[g * kMaxScales + ix[c]];
        if (x < best) {
          best = x;
          bc = c;
        }
      }
      for (int it = 0; it < refits; ++it) {
        const double s = t.scale[E * 16 + bc];
        double num = 0.0, den = 0.0;
        for (int v = g * 4; v < g * 4 + 4; ++v) {
          const int k = best_entry_k(book, K, v & 1, sw + v * 4, sq + v * 4, s, lane);
          const double* te = entry(book, K, v & 1, k);
          for (int j = 0; j < kSubDim; ++j) {
            num += sq[v * 4 + j] * te[j] * sw[v * 4 + j];
            den += sq[v * 4 + j] * te[j] * te[j];
          }
        }
        if (!(den > 0.0)) break;
        const double star = num / den;
        int nc = -1;
        double nd = INFINITY;
        for (int c = 0; c < 16; ++c) {
          if (!t.legal[E * 16 + c]) continue;
          const double dist = fabs(static_cast<double>(t.scale[E * 16 + c]) - star);
          if (dist <= nd) {
            nd = dist;
            nc = c;
          }
        }
        const double x = eg[g * kMaxScales + ix[nc]];
        if (x < best) {
          best = x;
          bc = nc;
        } else {
          break;
        }
      }
      code[g] = bc;
    }
  }
  const int nsb = C / kSB;
  uint8_t* pl = planes + ((static_cast<long long>(m) * R + r) * nsb + b) * kPlaneBytes;
  if (lane == 0) {
    pl[0] = static_cast<uint8_t>(E);
    for (int g = 0; g < kGroup; ++g) pl[1 + g] = static_cast<uint8_t>(code[g]);
  }
  if (sub_idx) {  // the q-weighted nearest entry of every sub-vector at the chosen scales
    uint32_t* out = sub_idx + (static_cast<long long>(m) * R + r) * (C / kSubDim) + b * (kSB / kSubDim);
    for (int v = 0; v < kSB / kSubDim; ++v) {
      const double s = t.scale[E * 16 + code[v / 4]];
      const int k = best_entry_k(book, K, v & 1, sw + v * 4, sq + v * 4, s, lane);
      if (lane == 0) out[v] = static_cast<uint32_t>(k);
    }
  }
}

template <int K>
cudaError_t launch_two_tier(const double* W, int M, int R, int C, int b, const int* h_of, const float* q,
                            const double* m2, const double* book, V2Tables t, int max_window, int refits,
                            uint8_t* planes, uint32_t* sub_idx, cudaStream_t s) {
  constexpr int kW = warps_for<K>();
  const long long warps = static_cast<long long>(M) * R;
  return launch_smem(two_tier_rows<K>, static_cast<unsigned>((warps + kW - 1) / kW), kW * 32,
                     sizeof(double) * kW * Smem::kDoubles(K), s, W, M, R, C, b, h_of, q, m2, book, t,
                     max_window, refits, planes, sub_idx);
}

template <int K>
cudaError_t launch_pilot(const double* W, int M, int R, int C, int rows, const int* h_of, const float* q,
                         const double* book, V2Tables t, double* numden, cudaStream_t s) {
  constexpr int kW = warps_for<K>();
  const long long warps = static_cast<long long>(M) * rows;
  return launch_smem(pilot_rows<K>, static_cast<unsigned>((warps + kW - 1) / kW), kW * 32,
                     sizeof(double) * kW * pilot_doubles<K>(), s, W, M, R, C, rows, h_of, q, book, t, numden);
}

}  // namespace

cudaError_t raw_pilot_m2(const double* W, int M, int R, int C, int rows, const int* h_of, const float* q,
                         const double* book, int K, V2Tables t, double* numden, double* m2, cudaStream_t s) {
  const cudaError_t e = with_k(K, [&](auto k) {
    return launch_pilot<decltype(k)::value>(W, M, R, C, rows, h_of, q, book, t, numden, s);
  });
  if (e != cudaSuccess) return e;
  pilot_reduce<<<(M + 127) / 128, 128, 0, s>>>(numden, M, rows, m2);
  return cudaGetLastError();
}

cudaError_t raw_two_tier(const double* W, int M, int R, int C, int b, const int* h_of, const float* q,
                         const double* m2, const double* book, int K, V2Tables t, int max_window, int refits,
                         uint8_t* planes, uint32_t* sub_idx, cudaStream_t s) {
  return with_k(K, [&](auto k) {
    return launch_two_tier<decltype(k)::value>(W, M, R, C, b, h_of, q, m2, book, t, max_window, refits,
                                               planes, sub_idx, s);
  });
}

}  // namespace gridq::cuda::gptq
