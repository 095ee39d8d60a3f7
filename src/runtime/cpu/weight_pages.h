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
  kHuge,    // copied into a HugeRegion at start
};

// "auto" (huge where the kernel grants transparent huge pages, else mapped), "huge-pages" (refused where it
// does not, naming the sysfs setting), "mmap".
Expected<WeightPages> weight_pages_of(const std::string& name);

struct WeightCopy {
  HugeRegion region;
  int64_t matrices = 0;  // distinct matrices copied (tied ones once)
  int64_t bytes = 0;     // their bytes (each starts on a 64-byte line)
};

// Copies the data of every matrix of `w` (embed, each layer's, lm_head; tied matrices once) into one
// HugeRegion and points the matrices at the copies. Row scales, codebooks and rungs stay where they are.
Expected<WeightCopy> copy_weights_to_huge_pages(ModelWeights& w);

// "weights 45.1 MiB copied onto 2 MiB pages (44.0 MiB huge; transparent huge pages: madvise)" or
// "weights read from the mmap (4 KiB pages)", as the start-up line reports it.
std::string weight_pages_log(WeightPages p, const WeightCopy& c);

}  // namespace gridq::runtime::cpu
