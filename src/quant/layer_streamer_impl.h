// LayerStreamer's state (capture.h), shared by the streamer (layer_streamer.cpp) and its carry file I/O
// (layer_streamer_carry.cpp). Internal to src/quant.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/loader.h"
#include "quant/capture.h"
#include "runtime/device.h"
#include "runtime/model_weights.h"

namespace gridq::quant {

struct LayerStreamer::Impl {
  model::LoadedModel lm;  // owns the checkpoint mmaps the weights point into
  runtime::ModelWeights w;
  StreamerOptions opts;
  int n_seq = 0, seq_len = 0;
  std::vector<int32_t> ids;      // [n_seq, seq_len]
  std::vector<uint8_t> holdout;  // [n_seq]
  std::vector<float> carry;      // [n_tok, H] h_{next}
  int next = 0;
  bool failed = false;
  std::unique_ptr<runtime::DeviceTeacher> teacher;  // opts.device_forward
  int64_t peak = 0;

  int64_t n_tok() const { return static_cast<int64_t>(n_seq) * seq_len; }
  void note_bytes(int64_t b) { peak = std::max(peak, b); }
  Expected<LayerCapture> run(int l);
};

}  // namespace gridq::quant
