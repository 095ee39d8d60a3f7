// libFuzzer target: arbitrary bytes through the safetensors validator. Any input must either be refused
// with an error or yield tensors whose spans lie inside the buffer; ASan/UBSan catch everything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> buf(data, size);
  auto f = gridq::io::SafetensorsFile::parse(buf, "fuzz");
  if (!f.ok()) {
    if (f.message().empty()) std::abort();  // every refusal must say why
    return 0;
  }
  uint64_t covered = 0;
  for (const auto& t : (*f)->tensors()) {
    // The validator promises: span inside the buffer, nbytes = numel * dtype size.
    if (t.data < data || t.data + t.nbytes() > data + size) std::abort();
    if (static_cast<uint64_t>(t.numel()) * gridq::io::dtype_size(t.dtype) != t.nbytes()) std::abort();
    if ((*f)->find(t.name) != &t) std::abort();
    volatile uint8_t sink = 0;
    for (uint8_t b : t.bytes()) sink = sink ^ b;  // touch every byte so ASan sees out-of-range spans
    (void)sink;
    covered += t.nbytes();
  }
  if (covered > size) std::abort();
  return 0;
}
