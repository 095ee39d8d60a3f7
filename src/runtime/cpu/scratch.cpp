#include "runtime/cpu/scratch.h"

#include <sys/mman.h>

#include "core/huge_pages.h"

namespace gridq::runtime::cpu {

void* line_alloc(size_t bytes) {
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;  // aligned_alloc's rule
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  // Advice only (a no-op where THP is off); the pages are still untouched, so the first touch takes huge
  // ones.
  if (align == kHugePageBytes) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace gridq::runtime::cpu
