// The reasoning block as `gridq chat` / `generate --chat` print it (cli/think_printer.h, docs/cli.md): tags
// in piped output, dimming on a terminal, nothing with --hide-thinking, whatever the streamed pieces' splits.
// The tiny test model never closes its reasoning on its own, so the transitions are driven here.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/think_printer.h"

namespace gridq::cli {
namespace {

struct Printed {
  std::string out, answer;
};

Printed print(bool in_think, bool hide, bool tty, const std::vector<std::string>& pieces) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  ThinkPrinter p(in_think, hide, tty, f);
  for (const auto& s : pieces) p.push(s);
  p.finish();
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fclose(f);
  return {out, p.answer};
}

TEST(ThinkPrinter, PipedOutputKeepsTheTagsAtEverySplit) {
  const std::string text = "plan it</think>the answer";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const auto r = print(true, false, false, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(r.out, "<think>plan it</think>the answer\n") << cut;
    EXPECT_EQ(r.answer, "the answer") << cut;
  }
}

TEST(ThinkPrinter, ABlockTheModelOpensIsMarkedToo) {
  const auto r = print(false, false, false, {"a<thi", "nk>b</think>c"});
  EXPECT_EQ(r.out, "a<think>b</think>c\n");
  EXPECT_EQ(r.answer, "ac");
}

TEST(ThinkPrinter, ACutOffBlockIsClosed) {
  EXPECT_EQ(print(true, false, false, {"still thinking"}).out, "<think>still thinking</think>\n");
  EXPECT_EQ(print(true, false, false, {"partial </thi"}).out, "<think>partial </thi</think>\n");
  // Nothing generated: no empty block.
  EXPECT_EQ(print(true, false, false, {}).out, "\n");
}

TEST(ThinkPrinter, TerminalDimsWithoutTags) {
  const auto r = print(true, false, true, {"plan</think>", "answer"});
  EXPECT_EQ(r.out, "\x1b[2mplan\x1b[0manswer\x1b[0m\n");
  EXPECT_EQ(r.answer, "answer");
}

TEST(ThinkPrinter, HideThinkingPrintsTheAnswerOnly) {
  for (bool tty : {false, true}) {
    const auto r = print(true, true, tty, {"plan</think>answer"});
    EXPECT_EQ(r.out, tty ? "answer\x1b[0m\n" : "answer\n");
    EXPECT_EQ(r.answer, "answer");
  }
}

}  // namespace
}  // namespace gridq::cli
