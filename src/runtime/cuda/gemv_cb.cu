// NVFP4-CB GEMV dispatch (k = 12, 16, 20, 24; v1 and v2 scale coding; MoE modes for K16 v2) and the
// dense decode kernel used by the bit-exact decode test. The instantiations live in gemv_cb_k*.cu (one
// translation unit per k, so they compile in parallel).
#include "runtime/cuda/gemv_cb.cuh"

namespace gridq::cuda::detail {

cudaError_t raw_gemv_cb(int k, int v, int mode, int nt, const KParams& p, long long units, cudaStream_t s,
                        bool pdl, long long mwb) {
  if (v != 1 && v != 2) return cudaErrorNotSupported;
  switch (k) {
    case 12:
      return cb_k<12>(v, mode, nt, p, units, s, pdl, mwb);
    case 16:
      return cb_k<16>(v, mode, nt, p, units, s, pdl, mwb);
    case 20:
      return cb_k<20>(v, mode, nt, p, units, s, pdl, mwb);
    case 24:
      return cb_k<24>(v, mode, nt, p, units, s, pdl, mwb);
    default:
      return cudaErrorNotSupported;
  }
}

cudaError_t raw_chain_cb(int k, int v, int mode, int nt, ChainParams& c, cudaStream_t s, long long mwb) {
  if (v != 1 && v != 2) return cudaErrorNotSupported;
  switch (k) {
    case 12:
      return cb_chain_k<12>(v, mode, nt, c, s, mwb);
    case 16:
      return cb_chain_k<16>(v, mode, nt, c, s, mwb);
    case 20:
      return cb_chain_k<20>(v, mode, nt, c, s, mwb);
    case 24:
      return cb_chain_k<24>(v, mode, nt, c, s, mwb);
    default:
      return cudaErrorNotSupported;
  }
}

// One warp per unit; writes the decoded A-fragments (the exact values the GEMV multiplies) to their canonical
// positions [rows, in].
template <int K, int V>
__global__ void __launch_bounds__(kThreads) cb_decode_kernel(const KParams p, uint16_t* out) {
  using Dec = DecCB<K, V>;
  extern __shared__ __align__(16) unsigned char smem[];
  Dec::init_smem(smem, p);
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const long long U = static_cast<long long>(p.R) * p.S;
  const uint2* tab = reinterpret_cast<const uint2*>(smem);
  const int* st = reinterpret_cast<const int*>(smem + Dec::kScaleTabOff);
  const int rep = lane % Dec::kRep;
  for (long long u = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); u < U;
       u += static_cast<long long>(gridDim.x) * kWarpsPerBlock) {
    typename Dec::Frag f;
    Dec::load(f, p.w + u * Dec::kUnitBytes, lane);
    const long long r = u / p.S, s = u % p.S;
    uint16_t* row0 = out + (r * 16 + g) * p.K + s * 256 + 64 * t;
    uint16_t* row1 = row0 + 8LL * p.K;
    auto put = [](uint16_t* d, uint32_t a, uint32_t b) {
      d[0] = a & 0xFFFF, d[1] = a >> 16, d[2] = b & 0xFFFF, d[3] = b >> 16;
    };
#define GRIDQ_DEC_STEP(G, JJ)                                     \
  {                                                               \
    constexpr int J = 4 * G + JJ;                                 \
    uint32_t a0, a1, a2, a3;                                      \
    Dec::template decode<J>(f, tab, rep, s0, s1, a0, a1, a2, a3); \
    put(row0 + 4 * J, a0, a2);                                    \
    put(row1 + 4 * J, a1, a3);                                    \
  }
#define GRIDQ_DEC_GROUP(G)                                                                   \
  {                                                                                          \
    uint32_t s0 = Dec::template scale2<G>(f, 0, st), s1 = Dec::template scale2<G>(f, 1, st); \
    GRIDQ_DEC_STEP(G, 0) GRIDQ_DEC_STEP(G, 1) GRIDQ_DEC_STEP(G, 2) GRIDQ_DEC_STEP(G, 3)      \
  }
    GRIDQ_DEC_GROUP(0) GRIDQ_DEC_GROUP(1) GRIDQ_DEC_GROUP(2) GRIDQ_DEC_GROUP(3)
#undef GRIDQ_DEC_STEP
#undef GRIDQ_DEC_GROUP
  }
}

template <int K, int V>
cudaError_t decode_kv(const KParams& p, uint16_t* out, cudaStream_t s) {
  auto kern = cb_decode_kernel<K, V>;
  const int smem = DecCB<K, V>::kSmemBytes;
  if (const cudaError_t e = opt_in_smem(kern, smem); e != cudaSuccess) return e;
  kern<<<264, kThreads, smem, s>>>(p, out);
  return cudaGetLastError();
}

cudaError_t raw_cb_decode(int k, int v, const KParams& p, uint16_t* out, cudaStream_t s) {
  if (v != 1 && v != 2) return cudaErrorNotSupported;
  switch (k) {
    case 12:
      return v == 2 ? decode_kv<12, 2>(p, out, s) : decode_kv<12, 1>(p, out, s);
    case 16:
      return v == 2 ? decode_kv<16, 2>(p, out, s) : decode_kv<16, 1>(p, out, s);
    case 20:
      return v == 2 ? decode_kv<20, 2>(p, out, s) : decode_kv<20, 1>(p, out, s);
    case 24:
      return v == 2 ? decode_kv<24, 2>(p, out, s) : decode_kv<24, 1>(p, out, s);
    default:
      return cudaErrorNotSupported;
  }
}

}  // namespace gridq::cuda::detail
