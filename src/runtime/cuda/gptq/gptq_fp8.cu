// One 256-column block of quant/cb_gptq.cpp's gptq_core for the FP8 formats, whose scale is one per row
// and fixed before GPTQ: FP8_DYNAMIC per channel (quant/fp8_weights.cpp: sub_dim 1, the 253 signed E4M3
// values as the one table, the decoded value t·s) and the FP8-CB product rungs (quant/cb_gptq_fp8cb.cpp: four
// sub-tables of 2-vectors, the decoded value bf16_rn(fl32(t)·s)). One warp per row walks the block's slabs in
// order: the slab's A = U_SS⁻¹ (invert_upper_block), the nearest entry in the transformed space with lanes
// over the sub-table's entries (first minimum), the slab error, and the feedback with lanes over the block's
// later columns. Compiled with -fmad=false: the CPU's roundings, each `a += b * c` of gptq_core a multiply
// and an add from +0. The lazy trailing update between blocks is gptq_core.cu's (the same Err layout).
#include "runtime/cuda/gptq/gptq_common.cuh"

namespace gridq::cuda::gptq {
namespace {

constexpr int kWarps = 8;

template <int D, bool kBf16>
__global__ void __launch_bounds__(kWarps * 32)
    scalar_rows(double* __restrict__ W, int M, int R, int C, int b, const int* __restrict__ h_of,
                const uint8_t* __restrict__ identity, const double* __restrict__ U, ScalarTables tab,
                const double* __restrict__ scale, double* __restrict__ Err, uint16_t* __restrict__ idx) {
  __shared__ double sws[kWarps][kSB];
  const int wid = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long warp = static_cast<long long>(blockIdx.x) * kWarps + wid;
  if (warp >= static_cast<long long>(M) * R) return;
  const int m = static_cast<int>(warp / R);
  const int h = h_of[m];
  const bool ident = identity[h] != 0;
  const int b0 = b * kSB, nb = min(kSB, C - b0);
  double* sw = sws[wid];
  const double* w = W + warp * C + b0;
  for (int j = lane; j < nb; j += 32) sw[j] = w[j];
  const double s = scale[warp];
  const double* Uh = U + static_cast<long long>(h) * C * C;
  double* err = Err + warp * kSB;
  uint16_t* ix = idx + warp * (C / D) + b0 / D;
  __syncwarp();
  for (int st = 0; st < nb / D; ++st) {
    const int c = b0 + st * D, cl = st * D;
    const int sub = (c / D) % tab.n_sub;
    // invert_upper_block: A [D, D] = U[c.., c..]⁻¹, column by column, back substitution.
    double A[D * D];
#pragma unroll
    for (int i = 0; i < D * D; ++i) A[i] = (ident && i % (D + 1) == 0) ? 1.0 : 0.0;
    if (!ident) {
      const double* Us = Uh + static_cast<long long>(c) * C + c;
#pragma unroll
      for (int j = 0; j < D; ++j) {
        A[j * D + j] = 1.0 / Us[static_cast<long long>(j) * C + j];
#pragma unroll
        for (int i = j - 1; i >= 0; --i) {
          double a = 0.0;
#pragma unroll
          for (int k = i + 1; k <= j; ++k) a += Us[static_cast<long long>(i) * C + k] * A[k * D + j];
          A[i * D + j] = -a / Us[static_cast<long long>(i) * C + i];
        }
      }
    }
    double y[D];
#pragma unroll
    for (int j = 0; j < D; ++j) {
      double a = 0.0;
#pragma unroll
      for (int i = 0; i <= j; ++i) a += (sw[cl + i] / s) * A[i * D + j];
      y[j] = a;
    }
    const int K = tab.entries[sub];
    const double* T = tab.t + tab.off[sub];
    double best = INFINITY;
    int bk = K;
    for (int k = lane; k < K; k += 32) {
      double n2 = 0.0, dot = 0.0;  // ‖T'_k‖² and y·T'_k, each summed over j in order from +0
#pragma unroll
      for (int j = 0; j < D; ++j) {
        double tp = 0.0;
#pragma unroll
        for (int i = 0; i <= j; ++i) tp += T[k * D + i] * A[i * D + j];
        n2 += tp * tp;
        dot += y[j] * tp;
      }
      const double score = n2 - 2.0 * dot;
      if (score < best) {
        best = score;
        bk = k;
      }
    }
    warp_argmin(best, bk);
    double qv[D], e[D];
#pragma unroll
    for (int j = 0; j < D; ++j) {
      const double t = T[bk * D + j];
      qv[j] = kBf16 ? decoded(t, static_cast<float>(s)) : t * s;
    }
#pragma unroll
    for (int j = 0; j < D; ++j) {
      double a = 0.0;
#pragma unroll
      for (int i = 0; i <= j; ++i) a += (sw[cl + i] - qv[i]) * A[i * D + j];
      e[j] = a;
    }
    if (lane == 0) {
      ix[st] = static_cast<uint16_t>(bk);
#pragma unroll
      for (int j = 0; j < D; ++j) err[cl + j] = e[j];
    }
    if (!ident)  // feedback inside the block: W[c+D : b1] −= e·U[c.., c+D : b1]
      for (int col = cl + D + lane; col < nb; col += 32) {
        double a = 0.0;
#pragma unroll
        for (int i = 0; i < D; ++i) a += e[i] * Uh[static_cast<long long>(c + i) * C + b0 + col];
        sw[col] -= a;
      }
    __syncwarp();
  }
}

template <int D, bool kBf16>
cudaError_t launch_rows(double* W, int M, int R, int C, int b, const int* h_of, const uint8_t* identity,
                        const double* U, const ScalarTables& tab, const double* scale, double* Err,
                        uint16_t* idx, cudaStream_t s) {
  const long long warps = static_cast<long long>(M) * R;
  scalar_rows<D, kBf16><<<static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s>>>(
      W, M, R, C, b, h_of, identity, U, tab, scale, Err, idx);
  return cudaGetLastError();
}

}  // namespace

cudaError_t raw_scalar_gptq_block(double* W, int M, int R, int C, int b, const int* h_of,
                                  const uint8_t* identity, const double* U, const ScalarTables& tab,
                                  const double* scale, double* Err, uint16_t* idx, cudaStream_t s) {
  if (tab.sub_dim == 1 && !tab.bf16_decode)
    return launch_rows<1, false>(W, M, R, C, b, h_of, identity, U, tab, scale, Err, idx, s);
  if (tab.sub_dim == 2 && tab.bf16_decode)
    return launch_rows<2, true>(W, M, R, C, b, h_of, identity, U, tab, scale, Err, idx, s);
  return cudaErrorNotSupported;
}

}  // namespace gridq::cuda::gptq
