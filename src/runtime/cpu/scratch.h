// Per-thread scratch for the forward: a decoded token, and a prompt chunk of the CPU's default 512 tokens
// on a small model, reuse the same buffers (no allocation per call once warm: a fresh buffer per layer
// cost a prefill ~10 % in page faults and zero-filling). Larger requests (long chunks of large models, the
// quantizer's chunks) get an uninitialised buffer of their own that is freed on return, so a long prompt
// does not leave hundreds of MiB parked in the calling thread.
#pragma once

#include <cstddef>
#include <memory>
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
  static constexpr size_t kKeepFloats = size_t{1} << 21;  // 8 MiB per slot at most

  Scratch(Slot s, size_t n) {
    thread_local std::vector<float> kept[static_cast<size_t>(Slot::kCount)];
    if (n > kKeepFloats) {
      own_.reset(new float[n]);  // uninitialised: every caller writes before it reads
      p_ = own_.get();
      return;
    }
    std::vector<float>& v = kept[static_cast<size_t>(s)];
    if (v.size() < n) v.resize(n);
    p_ = v.data();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return p_; }

 private:
  std::unique_ptr<float[]> own_;
  float* p_ = nullptr;
};

}  // namespace gridq::runtime::cpu
