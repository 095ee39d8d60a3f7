// Entry to the kernel benchmark from the test binary (the lean device build, bench/device, builds only
// test_cuda): runs when GRIDQ_BENCH_OUT names a JSON output file, skipped otherwise. GRIDQ_BENCH_FILTER,
// GRIDQ_BENCH_DIAG=1, GRIDQ_BENCH_NO_CHAIN=1, GRIDQ_BENCH_REPLAYS and GRIDQ_BENCH_CHAIN_BULK=0|1 map to
// the CLI's options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

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
  if (const char* d = std::getenv("GRIDQ_BENCH_DIAG")) o.diag = std::string(d) == "1";
  if (const char* c = std::getenv("GRIDQ_BENCH_NO_CHAIN")) o.chain = std::string(c) != "1";
  if (const char* n = std::getenv("GRIDQ_BENCH_REPLAYS")) o.replays = std::max(3, std::atoi(n));
  if (const char* b = std::getenv("GRIDQ_BENCH_CHAIN_BULK")) o.chain_copy_engine = std::atoi(b) != 0 ? 1 : 0;
  auto r = run_kernel_bench(o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::ofstream(out) << r->dump(2) << "\n";
  std::printf("%s", format_bench_table(*r).c_str());
}

}  // namespace
}  // namespace gridq::cuda::test
