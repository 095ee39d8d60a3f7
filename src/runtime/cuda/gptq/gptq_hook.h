// The quantizer's hook for GPU NVFP4-CB encodes (runtime::CudaBackendHooks::cb_fp4).
#pragma once

#include <memory>

#include "core/status.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/device.h"

namespace gridq::cuda {

Expected<runtime::CbFp4Reply> cb_fp4_host(const runtime::CbFp4Request& r);

// Matrix m of a batch result (its input h) in the hooks' reply form: sub-indices and planes, the input's
// identity flag and damping, and the refinement when `refine` asked for one and it ran.
runtime::CbFp4Reply reply_of(const CbGptqResult& g, int m, int h, int R, int C, bool refine);

// A request's book and settings in gptq.h's terms.
CbGptqBook gptq_book(const runtime::CbFp4Settings& s);
CbGptqSettings gptq_settings(const runtime::CbFp4Settings& s);

// runtime::CudaBackendHooks::half_trace: quant::output_half_trace's number (the same bits) for host W, W_hat
// [R, C] and H [C, C], all finite (the caller checks, as output_half_trace does).
Expected<double> half_trace_host(const float* W, const float* W_hat, int R, int C, const float* H);

// runtime::CudaBackendHooks::fp8_gptq (gptq_fp8_host.cpp).
Expected<runtime::Fp8GptqReply> fp8_gptq_host(const runtime::Fp8GptqRequest& r);

// runtime::CudaBackendHooks::cb_fp4_batch (gptq_batch.cpp).
Expected<std::unique_ptr<runtime::DeviceCbBatch>> cb_fp4_batch_host(const runtime::CbFp4BatchRequest& r);

}  // namespace gridq::cuda
