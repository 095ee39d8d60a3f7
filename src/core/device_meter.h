#pragma once
// Device memory held by gridq's own buffers (cuda::DeviceBuffer, the one place that allocates), process-wide:
// what `gridq quantize` reports as GPU memory next to its host RSS, readable from code that does not link the
// CUDA runtime. Allocations made outside DeviceBuffer (the CUDA context, library workspaces) are not counted.
#include <cstdint>

namespace gridq {

void device_bytes_changed(int64_t delta);  // + on allocation, − on release
int64_t device_bytes_live();               // held now
int64_t device_bytes_peak();               // the most held at once so far

}  // namespace gridq
