// cuda::DeviceBuffer keeps core/device_meter's count: an allocation adds its bytes, a move carries them, a
// move-assignment over a held buffer and the destructor release them.
#include <gtest/gtest.h>

#include "core/device_meter.h"
#include "cuda_test_util.h"

namespace gridq::cuda::test {
namespace {

TEST(CudaDeviceBuffer, MeterCountsAllocationsAndReleases) {
  REQUIRE_GPU();
  const int64_t live0 = device_bytes_live();
  {
    auto a = DeviceBuffer::alloc(1 << 20, "meter test a");
    ASSERT_OK(a);
    EXPECT_EQ(device_bytes_live(), live0 + (1 << 20));
    EXPECT_GE(device_bytes_peak(), live0 + (1 << 20));
    DeviceBuffer moved = std::move(*a);  // no change: the bytes changed owner
    EXPECT_EQ(device_bytes_live(), live0 + (1 << 20));
    auto b = DeviceBuffer::alloc(3 << 20, "meter test b");
    ASSERT_OK(b);
    EXPECT_EQ(device_bytes_live(), live0 + (4 << 20));
    moved = std::move(*b);  // releases a's megabyte
    EXPECT_EQ(device_bytes_live(), live0 + (3 << 20));
    EXPECT_GE(device_bytes_peak(), live0 + (4 << 20));
  }
  EXPECT_EQ(device_bytes_live(), live0);
}

}  // namespace
}  // namespace gridq::cuda::test
