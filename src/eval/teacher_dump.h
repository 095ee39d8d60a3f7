// Teacher dump: the teacher's fp32 log-probs over one window set, written once and reused by later
// `gridq eval` runs, so every candidate is scored against the same bytes without rerunning the teacher
// (quantizer.md §8: only same-run A/B counts, and every number carries the dump hash).
//
// File: safetensors (written through FILE.tmp, renamed when complete) with
//   tokens     I32 [n_tokens]          the evaluated token stream (after --tokens); with `window` it fixes
//   the
//                                      window set exactly
//   log_probs  F32 [positions, vocab]  rows 0..len-2 of every window, in window order (what teacher_sha256
//   hashes) sha256     U8  [64]                lowercase hex SHA-256 of log_probs' bytes; declared last, so
//   it is written
//                                      after the rows have streamed through
// and metadata format = "gridq.teacher_dump/1", window, windows, positions, vocab, tokenizer_sha256, teacher.
// Reuse refuses a different token stream or window, a different tokenizer digest, a different vocabulary, or
// log-prob bytes that no longer match the stored hash.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/teacher_compare.h"
#include "io/safetensors.h"

namespace gridq::eval {

inline constexpr const char* kTeacherDumpFormat = "gridq.teacher_dump/1";

// Wraps a live teacher and writes every window it returns into `path`. Windows must be requested in order,
// each once (as evaluate_against_teacher does); finish() checks that all were written and renames the file
// into place. Destroyed without finish(), it leaves no file behind.
class TeacherDumpWriter : public TeacherSource {
 public:
  // `tokens`: the evaluated stream after truncation (what split_windows(tokens, 0, window) cuts);
  // `teacher_name` is recorded in the metadata (the teacher's directory).
  static Expected<std::unique_ptr<TeacherDumpWriter>> create(const std::string& path, TeacherSource& inner,
                                                             const std::string& teacher_name,
                                                             std::span<const int32_t> tokens, int window,
                                                             const std::string& tokenizer_sha256);
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::string describe() const override { return inner_->describe(); }
  Expected<std::span<const float>> window_log_probs(int64_t window_index,
                                                    std::span<const int32_t> window) override;
  // Writes the hash and renames the file into place; returns the hash.
  Expected<std::string> finish();

 private:
  TeacherDumpWriter() = default;
  std::string path_;
  TeacherSource* inner_ = nullptr;
  std::unique_ptr<io::SafetensorsWriter> writer_;
  std::vector<std::span<const int32_t>> windows_;
  int64_t next_window_ = 0;
  std::unique_ptr<Sha256Stream> hash_;
};

// Serves a dump's rows after checking it matches this run (token stream, window, tokenizer digest, hash).
class TeacherDumpReader : public TeacherSource {
 public:
  static Expected<std::unique_ptr<TeacherDumpReader>> open(const std::string& path,
                                                           std::span<const int32_t> tokens, int window,
                                                           const std::string& tokenizer_sha256);
  int64_t vocab_size() const override { return vocab_; }
  std::string describe() const override { return "teacher dump " + path_ + " (of " + teacher_ + ")"; }
  Expected<std::span<const float>> window_log_probs(int64_t window_index,
                                                    std::span<const int32_t> window) override;
  const std::string& sha256() const { return sha256_; }
  const std::string& teacher() const { return teacher_; }  // as recorded by the writer

 private:
  TeacherDumpReader() = default;
  std::string path_, teacher_, sha256_;
  int64_t vocab_ = 0;
  std::unique_ptr<io::SafetensorsFile> file_;
  const io::TensorInfo* log_probs_ = nullptr;
  std::vector<std::span<const int32_t>> windows_;  // into the dump's own tokens
  std::vector<int64_t> row_offset_;                // first log_probs row of each window
  std::vector<float> rows_;  // [len-1, vocab] copy (the mapping need not be float-aligned)
};

// Lowercase hex SHA-256 of a file's bytes (for the tokenizer digest).
Expected<std::string> tokenizer_digest(const std::string& model_dir);

}  // namespace gridq::eval
