#include "core/device_meter.h"

#include <atomic>

namespace gridq {

namespace {
std::atomic<int64_t> g_live{0}, g_peak{0};
}  // namespace

void device_bytes_changed(int64_t delta) {
  const int64_t now = g_live.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

int64_t device_bytes_live() { return g_live.load(std::memory_order_relaxed); }
int64_t device_bytes_peak() { return g_peak.load(std::memory_order_relaxed); }

}  // namespace gridq
