// Fallback entry to the kernel benchmark from the test binary (for machines where only test_cuda is built):
// runs when GRIDQ_BENCH_OUT names a JSON output file, skipped otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cuda_test_util.h"
#include "runtime/cuda/bench.h"

namespace gridq::cuda::test {
namespace {

TEST(CudaBench, KernelsWhenRequested) {
  const char* out = std::getenv("GRIDQ_BENCH_OUT");
  if (out == nullptr) GTEST_SKIP() << "set GRIDQ_BENCH_OUT=<file.json> to run the kernel benchmark";
  REQUIRE_GPU();
  BenchOptions o;
  if (const char* f = std::getenv("GRIDQ_BENCH_FILTER")) o.filter = f;
  auto r = run_kernel_bench(o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::ofstream(out) << r->dump(2) << "\n";
  std::printf("%s", format_bench_table(*r).c_str());
}

}  // namespace
}  // namespace gridq::cuda::test
