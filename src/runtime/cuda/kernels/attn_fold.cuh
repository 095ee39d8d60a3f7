// The fixed-order merge of a row's attention splits, one definition for the two places that run it: the merge
// kernel (attention.cu, after split items) and the tensor-core kernel's fused form (attention_tc.cu, a tile's
// splits in one item). A row's splits are folded in split order into a running (M, L, O), starting from
// (−inf, 0, 0):
//   M' = max(M, m_s);  a = e^(M − M');  b = e^(m_s − M');  L' = L·a + l_s·b;  O' = O·a + O_s·b;  out = O / L
// with e^x = 2^x for the tensor-core splits (their maxima are in the log2 domain). Every step is one rounded
// operation in a fixed order, so a row's output has the same bits whichever kernel folds it; max is exact, so
// the merge kernel may find the running maxima M by a parallel scan.
#pragma once

namespace gridq::cuda::detail {

struct FoldStep {
  float a, b;  // the weights of the running sums and of the split
};

// The weights of split s (maximum m_s) given the running maximum before it (M, −inf at the first split) and
// after it (Mn = fmaxf(M, m_s)).
template <bool kLog2>
__device__ __forceinline__ FoldStep fold_step(float M, float Mn, float m_s) {
  if constexpr (kLog2)
    return {exp2f(__fsub_rn(M, Mn)), exp2f(__fsub_rn(m_s, Mn))};
  else
    return {expf(__fsub_rn(M, Mn)), expf(__fsub_rn(m_s, Mn))};
}

// One running sum (L or an element of O) after split s: acc·a + x·b.
__device__ __forceinline__ float fold(float acc, float x, FoldStep f) {
  return __fadd_rn(__fmul_rn(acc, f.a), __fmul_rn(x, f.b));
}

}  // namespace gridq::cuda::detail
