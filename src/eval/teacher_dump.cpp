#include "eval/teacher_dump.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "core/version.h"
#include "io/sha256.h"

namespace gridq::eval {

namespace {

std::span<const uint8_t> as_bytes(const void* p, size_t n) { return {static_cast<const uint8_t*>(p), n}; }

int64_t count_positions(const std::vector<std::span<const int32_t>>& windows) {
  int64_t n = 0;
  for (const auto& w : windows) n += static_cast<int64_t>(w.size()) - 1;
  return n;
}

Expected<std::string> meta(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end())
    return err("{}: not a teacher dump: metadata key '{}' is missing", f.path(), key);
  return it->second;
}

Expected<int64_t> meta_int(const io::SafetensorsFile& f, const std::string& key) {
  GRIDQ_ASSIGN_OR_RETURN(std::string s, meta(f, key));
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0)
    return err("{}: metadata '{}' = '{}' is not a non-negative integer", f.path(), key, s);
  return v;
}

}  // namespace

Expected<std::string> tokenizer_digest(const std::string& model_dir) {
  return io::sha256_file(model_dir + "/tokenizer.json");
}

Expected<std::unique_ptr<TeacherDumpWriter>> TeacherDumpWriter::create(
    const std::string& path, TeacherSource& inner, const std::string& teacher_name,
    std::span<const int32_t> tokens, int window, const std::string& tokenizer_sha256) {
  std::unique_ptr<TeacherDumpWriter> w(new TeacherDumpWriter());
  w->path_ = path;
  w->inner_ = &inner;
  w->windows_ = split_windows(tokens, 0, window);
  if (w->windows_.empty())
    return err("teacher dump {}: no window of >= 2 tokens in {} tokens (window {})", path, tokens.size(),
               window);
  const int64_t positions = count_positions(w->windows_);
  const int64_t V = inner.vocab_size();
  std::vector<io::SafetensorsWriter::Decl> decls = {
      {"tokens", io::DType::I32, {static_cast<int64_t>(tokens.size())}},
      {"log_probs", io::DType::F32, {positions, V}},
      {"sha256", io::DType::U8, {64}},
  };
  std::map<std::string, std::string> md = {
      {"format", kTeacherDumpFormat},
      {"window", std::to_string(window)},
      {"windows", std::to_string(w->windows_.size())},
      {"positions", std::to_string(positions)},
      {"vocab", std::to_string(V)},
      {"tokenizer_sha256", tokenizer_sha256},
      {"teacher", teacher_name},
      {"gridq_version", std::string(version_string()) + " " + git_commit()},
  };
  GRIDQ_ASSIGN_OR_RETURN(w->writer_, io::SafetensorsWriter::create(path, std::move(decls), std::move(md)));
  GRIDQ_RETURN_IF_ERROR(w->writer_->write(as_bytes(tokens.data(), tokens.size_bytes())));
  w->hash_ = std::make_unique<Sha256Stream>();
  return w;
}

Expected<std::span<const float>> TeacherDumpWriter::window_log_probs(int64_t window_index,
                                                                     std::span<const int32_t> window) {
  if (window_index != next_window_ || window_index >= static_cast<int64_t>(windows_.size()))
    return err(
        "teacher dump {}: window {} requested, expected window {} of {} (windows are written once, in order)",
        path_, window_index, next_window_, windows_.size());
  const auto& want = windows_[static_cast<size_t>(window_index)];
  if (!std::equal(window.begin(), window.end(), want.begin(), want.end()))
    return err("teacher dump {}: window {} tokens differ from the declared token stream", path_,
               window_index);
  GRIDQ_ASSIGN_OR_RETURN(std::span<const float> rows, inner_->window_log_probs(window_index, window));
  GRIDQ_RETURN_IF_ERROR(writer_->write(as_bytes(rows.data(), rows.size_bytes())));
  hash_->update(rows.data(), rows.size_bytes());
  ++next_window_;
  return rows;
}

Expected<std::string> TeacherDumpWriter::finish() {
  if (next_window_ != static_cast<int64_t>(windows_.size()))
    return err("teacher dump {}: {} of {} windows written; refusing to finish an incomplete dump", path_,
               next_window_, windows_.size());
  const std::string hex = hash_->hex();
  GRIDQ_RETURN_IF_ERROR(writer_->write(as_bytes(hex.data(), hex.size())));
  GRIDQ_RETURN_IF_ERROR(writer_->finish());
  return hex;
}

Expected<std::unique_ptr<TeacherDumpReader>> TeacherDumpReader::open(const std::string& path,
                                                                     std::span<const int32_t> tokens,
                                                                     int window,
                                                                     const std::string& tokenizer_sha256) {
  std::unique_ptr<TeacherDumpReader> r(new TeacherDumpReader());
  r->path_ = path;
  GRIDQ_ASSIGN_OR_RETURN(r->file_, io::SafetensorsFile::open(path));
  const io::SafetensorsFile& f = *r->file_;
  GRIDQ_ASSIGN_OR_RETURN(std::string format, meta(f, "format"));
  if (format != kTeacherDumpFormat)
    return err("{}: format '{}' is not a teacher dump ({})", path, format, kTeacherDumpFormat);
  GRIDQ_ASSIGN_OR_RETURN(int64_t dump_window, meta_int(f, "window"));
  if (dump_window != window)
    return err("{}: the dump was made with --window {}, this run uses {}: the window sets differ", path,
               dump_window, window);
  GRIDQ_ASSIGN_OR_RETURN(std::string dump_tok, meta(f, "tokenizer_sha256"));
  if (dump_tok != tokenizer_sha256)
    return err("{}: the dump's tokenizer (sha256 {}) is not this model's tokenizer.json (sha256 {})", path,
               dump_tok, tokenizer_sha256);
  GRIDQ_ASSIGN_OR_RETURN(r->teacher_, meta(f, "teacher"));
  GRIDQ_ASSIGN_OR_RETURN(r->vocab_, meta_int(f, "vocab"));

  const io::TensorInfo* tok = f.find("tokens");
  if (!tok || tok->dtype != io::DType::I32 || tok->shape.size() != 1)
    return err("{}: tensor 'tokens' must be I32 [n_tokens]", path);
  if (tok->shape[0] != static_cast<int64_t>(tokens.size()) ||
      std::memcmp(tok->data, tokens.data(), tokens.size_bytes()) != 0) {
    const size_t common = std::min(tokens.size(), static_cast<size_t>(tok->shape[0]));
    size_t first = 0;
    for (; first < common; ++first) {
      int32_t t = 0;
      std::memcpy(&t, tok->data + first * 4, 4);
      if (t != tokens[first]) break;
    }
    return err(
        "{}: the dump's token stream ({} tokens) differs from this run's ({} tokens; first difference at "
        "token "
        "{}): use the same --text and --tokens",
        path, tok->shape[0], tokens.size(), first);
  }
  // The streams are byte-identical, so the windows may point into the caller's copy.
  r->windows_ = split_windows(tokens, 0, window);
  int64_t row = 0;
  for (const auto& w : r->windows_) {
    r->row_offset_.push_back(row);
    row += static_cast<int64_t>(w.size()) - 1;
  }
  GRIDQ_ASSIGN_OR_RETURN(int64_t positions, meta_int(f, "positions"));
  r->log_probs_ = f.find("log_probs");
  const io::TensorInfo* lp = r->log_probs_;
  if (!lp || lp->dtype != io::DType::F32 || lp->shape.size() != 2 || lp->shape[0] != row ||
      positions != row || lp->shape[1] != r->vocab_)
    return err("{}: tensor 'log_probs' must be F32 [{}, {}] (the window set's positions x vocab)", path, row,
               r->vocab_);
  const io::TensorInfo* sh = f.find("sha256");
  if (!sh || sh->dtype != io::DType::U8 || sh->shape.size() != 1 || sh->shape[0] != 64)
    return err("{}: tensor 'sha256' must be U8 [64]", path);
  const std::string stored(reinterpret_cast<const char*>(sh->data), 64);
  const std::string computed = io::sha256_hex(lp->bytes());
  if (stored != computed)
    return err("{}: log_probs bytes hash to {} but the dump records {}: the dump is corrupt or was modified",
               path, computed, stored);
  r->sha256_ = stored;
  return r;
}

Expected<std::span<const float>> TeacherDumpReader::window_log_probs(int64_t window_index,
                                                                     std::span<const int32_t> window) {
  if (window_index < 0 || window_index >= static_cast<int64_t>(windows_.size()))
    return err("{}: window {} requested, the dump has {}", describe(), window_index, windows_.size());
  const auto& want = windows_[static_cast<size_t>(window_index)];
  if (!std::equal(window.begin(), window.end(), want.begin(), want.end()))
    return err("{}: window {} tokens differ from the dump's", describe(), window_index);
  const size_t n = (want.size() - 1) * static_cast<size_t>(vocab_);
  rows_.resize(n);
  std::memcpy(rows_.data(), log_probs_->data + static_cast<size_t>(row_offset_[window_index]) * vocab_ * 4,
              n * 4);
  return std::span<const float>(rows_);
}

}  // namespace gridq::eval
