// core/device_meter: the live count follows allocations and releases exactly, and the peak is the most held
// at once, also under concurrent changes.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/device_meter.h"

namespace gridq {
namespace {

TEST(DeviceMeter, LiveFollowsChangesAndPeakKeepsTheMost) {
  const int64_t live0 = device_bytes_live();
  device_bytes_changed(1000);
  device_bytes_changed(500);
  EXPECT_EQ(device_bytes_live(), live0 + 1500);
  EXPECT_GE(device_bytes_peak(), live0 + 1500);
  device_bytes_changed(-1500);
  EXPECT_EQ(device_bytes_live(), live0);
  EXPECT_GE(device_bytes_peak(), live0 + 1500);  // a release does not lower the peak
}

TEST(DeviceMeter, ConcurrentChangesBalance) {
  const int64_t live0 = device_bytes_live();
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([] {
      for (int i = 0; i < 10000; ++i) {
        device_bytes_changed(64);
        device_bytes_changed(-64);
      }
    });
  for (std::thread& t : ts) t.join();
  EXPECT_EQ(device_bytes_live(), live0);
  EXPECT_GE(device_bytes_peak(), live0 + 64);
}

}  // namespace
}  // namespace gridq
