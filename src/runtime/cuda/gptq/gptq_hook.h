// The quantizer's hook for GPU NVFP4-CB encodes (runtime::CudaBackendHooks::cb_fp4).
#pragma once

#include "core/status.h"
#include "runtime/device.h"

namespace gridq::cuda {

Expected<runtime::CbFp4Reply> cb_fp4_host(const runtime::CbFp4Request& r);

}  // namespace gridq::cuda
