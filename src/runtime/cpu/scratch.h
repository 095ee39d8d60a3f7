// Per-thread scratch for the forward: a decoded token reuses the same buffers (no allocation per call once
// warm). Large requests (prefill, the quantizer's chunks) get a buffer of their own that is freed on
// return, so a long prompt does not leave tens of MiB parked in every thread.
#pragma once

#include <cstddef>
#include <vector>

namespace gridq::runtime::cpu {

// The callers' buffers, one slot each (two live buffers never share a slot).
enum class Slot {
  kQ,
  kK,
  kV,
  kG,
  kO,
  kOut,
  kMlpOut,
  kGate,
  kUp,
  kRouter,
  kRouted,
  kXe,
  kYe,
  kScores,
  kCount
};

class Scratch {
 public:
  static constexpr size_t kKeepFloats = size_t{1} << 18;  // 1 MiB: every decode buffer, short prompts

  Scratch(Slot s, size_t n) {
    thread_local std::vector<float> kept[static_cast<size_t>(Slot::kCount)];
    std::vector<float>& v = n <= kKeepFloats ? kept[static_cast<size_t>(s)] : own_;
    if (v.size() < n) v.resize(n);
    p_ = v.data();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return p_; }

 private:
  std::vector<float> own_;
  float* p_ = nullptr;
};

}  // namespace gridq::runtime::cpu
