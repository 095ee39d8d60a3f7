// Uploading weights to the device in the kernels' tiled layout (relayout.h). Nothing is expanded: the
// resident bytes are the packed bytes (plus the FP8 row scales and the small codebook), re-laid losslessly.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "core/status.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kernels.h"

namespace gridq::cuda {

struct DeviceWeights {
  DeviceBuffer tiles;     // re-laid packed bytes (+16 bytes of slack)
  DeviceBuffer scales;    // FP8: weight_scale [experts·rows]
  DeviceBuffer codebook;  // CB: [2][2^(k/2)][4] BF16
  DeviceMatrix m;
  size_t resident_bytes = 0;  // bytes on the device for this matrix (tiles + scales + codebook)
  size_t relayout_bytes = 0;  // bytes moved by the load-time re-layout (= packed bytes)
};

// NVFP4-CB product mode. canonical: `experts` matrices [rows, (in/256)·type_size] back to back.
// codebook_f16: the two sub-tables [2][2^(k/2)][4] as FP16 bits (values on the E2M1 grid, exact in BF16).
// v2_table: T[c] (must be exact E4M3; the default is T4_2oct8m). Refuses anything the kernels cannot serve.
Expected<DeviceWeights> upload_cb(int k, int layout_version, int rows, int in, int experts,
                                  std::span<const uint8_t> canonical, std::span<const uint16_t> codebook_f16,
                                  const std::array<float, 16>& v2_table);
// FP8 W8A8: E4M3 [experts·rows, in] and FP32 weight_scale [experts·rows] (finite, > 0).
Expected<DeviceWeights> upload_fp8(int rows, int in, int experts, std::span<const uint8_t> e4m3,
                                   std::span<const float> weight_scale);
// BF16 [experts·rows, in].
Expected<DeviceWeights> upload_bf16(int rows, int in, int experts, std::span<const uint16_t> w);

// Owns a split-K workspace (kernels.h) sized for any launch.
struct WorkspaceBuffers {
  DeviceBuffer counters, partials, barrier;
  Workspace ws;
  static Expected<WorkspaceBuffers> create();
};

}  // namespace gridq::cuda
