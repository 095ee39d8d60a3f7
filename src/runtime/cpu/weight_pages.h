// Where the CPU backend's matrices live (--cpu-weights): read in place from the checkpoint's or artifact's
// mmap (4 KiB page-cache pages), or copied once at start into one anonymous region on transparent huge pages
// (core/huge_pages.h). The bytes are the same either way, so every result is bit-identical; only the page
// size the kernels stream through changes (a decode step reads most of the model: on 4 KiB pages it pays a
// TLB walk per 4 KiB and the prefetchers stop at every page end).
#pragma once

#include <cstdint>
#include <string>

#include "core/huge_pages.h"
#include "core/status.h"
#include "runtime/model_weights.h"

namespace gridq::runtime::cpu {

enum class WeightPages {
  kMapped,  // the matrices point into the files' mmaps (no copy)
  kHuge,    // copied into a HugeRegion at start; refused when the copy would not fit in available memory
  kAuto,    // kHuge where the copy fits comfortably (half of MemAvailable), else kMapped (the log says why)
};

// "auto" (kAuto where the kernel grants transparent huge pages, else kMapped), "huge-pages" (refused where it
// does not, naming the sysfs setting), "mmap".
Expected<WeightPages> weight_pages_of(const std::string& name);

struct WeightCopy {
  HugeRegion region;       // empty when the matrices stayed in the mmap
  int64_t matrices = 0;    // distinct matrices copied (tied ones once)
  int64_t bytes = 0;       // their bytes (each starts on a 64-byte line)
  std::string why_mapped;  // kAuto that kept the mmap: the reason
};

// MemAvailable of /proc/meminfo in bytes (memory the kernel can hand out without swapping, the page cache
// included); -1 where it cannot be read.
int64_t mem_available_bytes();

// Places the matrices of `w` as `p` asks, `available` bytes of memory being free to take (-1: unknown). A
// copy takes the data of every matrix (embed, each layer's, lm_head; tied matrices once) into one HugeRegion
// and points the matrices at it; row scales, codebooks and rungs stay where they are. kHuge is refused where
// the copy is larger than `available`; kAuto copies only when it takes at most half of it (a model streamed
// from disk through the mmap must not become an out-of-memory kill).
Expected<WeightCopy> place_weights(ModelWeights& w, WeightPages p, int64_t available);

// "weights 45.1 MiB copied onto 2 MiB pages (44.0 MiB huge; transparent huge pages: madvise)" or
// "weights read in place from the mmap (4 KiB pages[: why])", as the start-up line reports it.
std::string weight_pages_log(const WeightCopy& c);

}  // namespace gridq::runtime::cpu
