// Per-thread scratch for the forward: a decoded token, and a prompt chunk of the CPU's default 256 tokens
// on a small model, reuse the same buffers (no allocation per call once warm: a fresh buffer per layer
// cost a prefill ~10 % in page faults and zero-filling). Larger requests (long chunks of large models, the
// quantizer's chunks) get an uninitialised buffer of their own that is freed on return, so a long prompt
// does not leave hundreds of MiB parked in the calling thread.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace gridq::runtime::cpu {

// Storage on 64-byte boundaries (a cache line, one zmm): a kernel's rows and tiles must not start mid-line,
// or every 64-byte load of them splits across two lines (measured: a 4-row prefill kernel ~10 % slower
// when its widened rows happened to land 16 bytes off a line).
template <typename T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <typename U>
  LineAllocator(const LineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const LineAllocator<U>&) const {
    return true;
  }
};
template <typename T>
using LineVector = std::vector<T, LineAllocator<T>>;

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
  kK16,
  kV16,
  kCount
};

class Scratch {
 public:
  static constexpr size_t kKeepFloats = size_t{1} << 21;  // 8 MiB per slot at most

  Scratch(Slot s, size_t n) {
    thread_local LineVector<float> kept[static_cast<size_t>(Slot::kCount)];
    if (n > kKeepFloats) {
      own_.reset(LineAllocator<float>().allocate(n));  // uninitialised: every caller writes before it reads
      p_ = own_.get();
      return;
    }
    LineVector<float>& v = kept[static_cast<size_t>(s)];
    if (v.size() < n) v.resize(n);
    p_ = v.data();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return p_; }

 private:
  struct LineDelete {
    void operator()(float* p) const { LineAllocator<float>().deallocate(p, 0); }
  };
  std::unique_ptr<float, LineDelete> own_;
  float* p_ = nullptr;
};

}  // namespace gridq::runtime::cpu
