// The quantize progress reporter (core/progress.h): plain mode prints exactly one permanent line per step
// (with the ETA of what is left) and no carriage-return redraws; quiet prints nothing; resumed steps do not
// count toward the rate; the human formats of sizes and durations.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/progress.h"

namespace gridq {
namespace {

std::string read_all(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(PipelineProgress, PlainModeLogsOneLinePerStep) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(3, f, Progress::Mode::kPlain);
    EXPECT_FALSE(p.tty());
    EXPECT_LT(p.eta_seconds(), 0.0);       // unknown before the first step
    p.update("layer 1/2", "encode", "x");  // no status line off a terminal
    p.step_done("layer 1/2 done");
    EXPECT_GE(p.eta_seconds(), 0.0);
    p.log("note");
    p.step_done("layer 2/2 done");
    p.step_done("finished");
    EXPECT_EQ(p.done(), 3);
  }
  const std::string s = read_all(f);
  std::fclose(f);
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_NE(s.find("layer 1/2 done, ETA "), std::string::npos) << s;
  EXPECT_NE(s.find("note\n"), std::string::npos) << s;
  EXPECT_NE(s.find("finished\n"), std::string::npos) << s;  // the last step has no ETA
  EXPECT_EQ(s.find("finished, ETA"), std::string::npos) << s;
}

TEST(PipelineProgress, QuietAndResumed) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(4, f, Progress::Mode::kQuiet);
    p.skip_steps(2);
    EXPECT_EQ(p.done(), 2);
    EXPECT_LT(p.eta_seconds(), 0.0);  // skipped steps are not a rate
    p.step_done("x");
    EXPECT_GE(p.eta_seconds(), 0.0);
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

TEST(PipelineProgress, HumanFormats) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(format_bytes(int64_t{5} << 30), "5.00 GiB");
  EXPECT_EQ(format_duration(4.25), "4.2 s");
  EXPECT_EQ(format_duration(185), "3 min 05 s");
  EXPECT_EQ(format_duration(3720), "1 h 02 min");
  EXPECT_GT(peak_rss_bytes(), 0);
  EXPECT_GE(peak_rss_bytes(), current_rss_bytes() / 2);
}

}  // namespace
}  // namespace gridq
