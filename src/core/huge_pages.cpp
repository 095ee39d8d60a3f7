#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gridq {

ThpMode thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!f || !std::getline(f, line)) return ThpMode::kUnknown;
  // The active choice is the bracketed word: "always [madvise] never".
  if (line.find("[always]") != std::string::npos) return ThpMode::kAlways;
  if (line.find("[madvise]") != std::string::npos) return ThpMode::kMadvise;
  if (line.find("[never]") != std::string::npos) return ThpMode::kNever;
  return ThpMode::kUnknown;
}

const char* thp_mode_name(ThpMode m) {
  switch (m) {
    case ThpMode::kAlways:
      return "always";
    case ThpMode::kMadvise:
      return "madvise";
    case ThpMode::kNever:
      return "never";
    case ThpMode::kUnknown:
      break;
  }
  return "unavailable";
}

Expected<HugeRegion> HugeRegion::allocate(size_t bytes) {
  HugeRegion r;
  if (bytes == 0) return r;
  // One huge page of slack so a 2 MiB-aligned start fits inside the mapping.
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t map_bytes = rounded + kHugePageBytes;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return err("huge pages: cannot map {} bytes of anonymous memory: {}", map_bytes, std::strerror(errno));
  r.map_ = static_cast<uint8_t*>(m);
  r.map_bytes_ = map_bytes;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(m) + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  r.base_ = reinterpret_cast<uint8_t*>(a);
  r.size_ = bytes;
  // Advice only: where the kernel has no THP the region is plain memory, which huge_bytes() then shows.
  (void)madvise(r.base_, rounded, MADV_HUGEPAGE);
  return r;
}

HugeRegion& HugeRegion::operator=(HugeRegion&& o) noexcept {
  if (this != &o) {
    release();
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    base_ = o.base_;
    size_ = o.size_;
    o.map_ = o.base_ = nullptr;
    o.map_bytes_ = o.size_ = 0;
  }
  return *this;
}

HugeRegion::~HugeRegion() { release(); }

void HugeRegion::release() {
  if (map_) munmap(map_, map_bytes_);
  map_ = base_ = nullptr;
  map_bytes_ = size_ = 0;
}

int64_t HugeRegion::huge_bytes() const {
  if (!base_) return 0;
  std::ifstream f("/proc/self/smaps");
  if (!f) return -1;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base_), hi = lo + size_;
  int64_t total = 0;
  bool inside = false;
  std::string line;
  while (std::getline(f, line)) {
    unsigned long b = 0, e = 0;
    // A mapping's header line is "start-end perms ..."; its fields ("Name:   value kB") follow it.
    if (std::sscanf(line.c_str(), "%lx-%lx ", &b, &e) == 2 && line.find(':') > line.find(' ')) {
      inside = b < hi && e > lo;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream s(line.substr(14));
      int64_t kb = 0;
      s >> kb;
      total += kb * 1024;
    }
  }
  // The counts are per mapping, which also holds the alignment slack: never more than the region.
  return std::min<int64_t>(total, static_cast<int64_t>(size_));
}

}  // namespace gridq
