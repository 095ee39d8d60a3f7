#include "runtime/cpu/weight_pages.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {

namespace {

constexpr size_t kLine = 64;

// Bytes of a matrix's `data` (qmatrix.h: uint16 / float / e4m3 [rows, cols], CB [rows, row_bytes]).
size_t data_bytes(const QMatrix& m) {
  const size_t n = static_cast<size_t>(m.rows);
  switch (m.format) {
    case WeightFormat::kBF16:
      return n * static_cast<size_t>(m.cols) * 2;
    case WeightFormat::kF32:
      return n * static_cast<size_t>(m.cols) * 4;
    case WeightFormat::kFP8:
      return n * static_cast<size_t>(m.cols);
    case WeightFormat::kCB:
      return n * static_cast<size_t>(m.row_bytes);
  }
  return 0;
}

}  // namespace

Expected<WeightPages> weight_pages_of(const std::string& name) {
  const ThpMode t = thp_mode();
  if (name == "mmap") return WeightPages::kMapped;
  if (name == "auto") return thp_available(t) ? WeightPages::kAuto : WeightPages::kMapped;
  if (name != "huge-pages") return err("engine: cpu weights '{}': expected auto, huge-pages or mmap", name);
  if (!thp_available(t))
    return err(
        "engine: --cpu-weights huge-pages needs transparent huge pages, and this kernel's are {} "
        "(/sys/kernel/mm/transparent_hugepage/enabled); use --cpu-weights mmap or auto",
        thp_mode_name(t));
  return WeightPages::kHuge;
}

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

Expected<WeightCopy> place_weights(ModelWeights& w, WeightPages p, int64_t available) {
  WeightCopy c;
  if (p == WeightPages::kMapped) return c;
  // Pass 1: one slot per distinct source address (a tied lm_head shares the embedding's bytes), as long as
  // the longest matrix starting there, then each slot placed on a line.
  struct Slot {
    const void* src;
    size_t bytes, off;
  };
  std::vector<Slot> slots;
  std::unordered_map<const void*, size_t> slot_of;  // source -> index into slots
  for_each_matrix(w, [&](const QMatrix& m) {
    if (m.rows == 0 || !m.data) return;
    const auto [it, fresh] = slot_of.emplace(m.data, slots.size());
    if (fresh) slots.push_back({m.data, 0, 0});
    Slot& sl = slots[it->second];
    sl.bytes = std::max(sl.bytes, data_bytes(m));
  });
  size_t total = 0;
  for (Slot& sl : slots) {
    sl.off = total;
    total += (sl.bytes + kLine - 1) / kLine * kLine;
  }
  const double gib = 1.0 / (1 << 30);
  if (p == WeightPages::kHuge && available >= 0 && static_cast<int64_t>(total) > available)
    return err(
        "engine: --cpu-weights huge-pages: the weights take {:.2f} GiB and only {:.2f} GiB of memory is "
        "available (MemAvailable); use --cpu-weights mmap or auto",
        static_cast<double>(total) * gib, static_cast<double>(available) * gib);
  if (p == WeightPages::kAuto && (available < 0 || static_cast<int64_t>(total) > available / 2)) {
    c.why_mapped = available < 0
                       ? "MemAvailable unknown"
                       : fmt::format(
                             "a copy of {:.2f} GiB would take over half of the {:.2f} GiB "
                             "available",
                             static_cast<double>(total) * gib, static_cast<double>(available) * gib);
    return c;
  }
  GRIDQ_ASSIGN_OR_RETURN(c.region, HugeRegion::allocate(total));
  uint8_t* base = c.region.data();
  // Pass 2: the copies, matrices spread over the pool (first touch of the huge pages is most of the cost).
  parallel_for(static_cast<int64_t>(slots.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Slot& s = slots[static_cast<size_t>(i)];
      std::memcpy(base + s.off, s.src, s.bytes);
    }
  });
  for_each_matrix(w, [&](QMatrix& m) {
    if (m.rows == 0 || !m.data) return;
    m.data = base + slots[slot_of.at(m.data)].off;
  });
  c.matrices = static_cast<int64_t>(slots.size());
  c.bytes = static_cast<int64_t>(total);
  return c;
}

std::string weight_pages_log(const WeightCopy& c) {
  if (!c.region.data())
    return c.why_mapped.empty() ? "weights read in place from the mmap (4 KiB pages)"
                                : "weights read in place from the mmap (4 KiB pages: " + c.why_mapped + ")";
  const int64_t huge = c.region.huge_bytes();
  const double mib = 1.0 / (1 << 20);
  return fmt::format("weights {:.1f} MiB copied onto 2 MiB pages ({}; transparent huge pages: {})",
                     static_cast<double>(c.bytes) * mib,
                     huge < 0 ? std::string("huge-page share unknown")
                              : fmt::format("{:.1f} MiB huge", static_cast<double>(huge) * mib),
                     thp_mode_name(thp_mode()));
}

}  // namespace gridq::runtime::cpu
