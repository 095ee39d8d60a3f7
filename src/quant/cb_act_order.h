// Group-wise activation ordering for NVFP4-CB CB-GPTQ (issue 15 item 2, recipe key cb_gptq.act_order). GPTQ's
// act order quantizes the columns with the largest diag(H) first, so their error is compensated by the many
// columns still open. The format fixes which columns share a codeword (8), a scale code (16) and an exponent
// (256), so the processing order may only move whole units: here superblocks are taken in descending Σ diag H
// and, inside each, its 16-column groups in descending Σ diag H (ties: the lower index first). The problem is
// permuted (W's columns, H's rows and columns, q), encoded with the ordinary CB-GPTQ (one superblock per lazy
// block, as before), and the result permuted back: codewords, scale codes and w_hat land in column order and
// each superblock keeps its own exponent, so the bytes are an ordinary v2 superblock row.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "quant/cb_gptq.h"

namespace gridq::quant {

// The processing order: perm[i] = the source group (16 columns) processed i-th. Groups of one superblock stay
// together and keep their superblock's place in the superblock order. diag: [C] (diag H).
std::vector<int> act_order_groups(const float* diag, int C);

// The CB-GPTQ encoder act order runs on the permuted problem: W [R, C], H [C, C] and q [C] in processing
// order (the rows, the tokens and the options are the caller's). Either the CPU encoder or the GPU's
// (cb_gptq_device.h encode_fp4_on_device, without its refinement): they give the same bytes.
using Fp4GptqEncoder = std::function<Expected<Fp4CbEncoding>(const float* W, const float* H, const float* q)>;

// CB-GPTQ in act order through `encode` (W [R, C], H [C, C], q [C] in column order): the encoding in column
// order.
Expected<Fp4CbEncoding> encode_fp4_act_order(const float* W, int R, int C, const float* H, const float* q,
                                             const Fp4GptqEncoder& encode);

// CB-GPTQ in act order on the CPU (same arguments as encode_fp4_cb_gptq).
Expected<Fp4CbEncoding> encode_fp4_cb_gptq_act_order(const gridbook::Codebook& cb, const float* W, int R,
                                                     int C, const float* H, int64_t n_tokens, const float* q,
                                                     const CbGptqOptions& opt = {});

}  // namespace gridq::quant
