// S1 (quantizer.md §2): the calibration windows. The whole text is one token stream; sequences are cut
// from it back to back, each opened with the tokenizer's own prefix (BOS) when its post-processor adds one.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/sha256.h"
#include "quant/capture.h"

namespace gridq::quant {

namespace {

// The ids the tokenizer's post-processor puts before a single sequence (its BOS policy): the part of
// encode(x, add_special_tokens=true) before encode(x, false).
std::vector<int32_t> special_prefix(const text::Tokenizer& tok) {
  const std::string probe = "a";
  const auto plain = tok.encode(probe, false);
  const auto full = tok.encode(probe, true);
  for (size_t at = 0; at + plain.size() <= full.size(); ++at)
    if (std::equal(plain.begin(), plain.end(), full.begin() + static_cast<std::ptrdiff_t>(at)))
      return std::vector<int32_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(at));
  return {};
}

}  // namespace

Expected<CalibSet> make_calib_set(const std::string& text_path, const text::Tokenizer& tok,
                                  const std::string& tokenizer_json_path, const CalibOptions& opts) {
  if (opts.seq_len <= 0) return err("calibration: seq_len must be > 0 (got {})", opts.seq_len);
  if (opts.tokens < opts.seq_len)
    return err("calibration: {} tokens is less than one sequence of {}", opts.tokens, opts.seq_len);
  if (opts.holdout_every < 0 || opts.holdout_every == 1)
    return err("calibration: holdout_every {} must be 0 (none) or ≥ 2 (1 would hold out every sequence)",
               opts.holdout_every);
  std::ifstream f(text_path, std::ios::binary);
  if (!f)
    return err("calibration text {}: cannot open ({})", text_path,
               std::filesystem::exists(text_path) ? "unreadable" : "no such file");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (!f.good() && !f.eof()) return err("calibration text {}: read error", text_path);

  CalibSet cs;
  cs.seq_len = opts.seq_len;
  cs.n_seq = static_cast<int>(opts.tokens / opts.seq_len);
  const std::vector<int32_t> prefix = special_prefix(tok);
  cs.bos = !prefix.empty();
  cs.bos_ids = prefix;
  if (static_cast<int64_t>(prefix.size()) >= opts.seq_len)
    return err("calibration: the tokenizer's prefix of {} tokens leaves nothing of a {}-token sequence",
               prefix.size(), opts.seq_len);
  const int64_t body = opts.seq_len - static_cast<int64_t>(prefix.size());
  GRIDQ_ASSIGN_OR_RETURN(std::vector<int32_t> stream, tok.try_encode(text, false));
  const int64_t need = static_cast<int64_t>(cs.n_seq) * body;
  if (static_cast<int64_t>(stream.size()) < need)
    return err("calibration text {}: {} tokens available, {} needed ({} sequences of {}{})", text_path,
               stream.size(), need, cs.n_seq, opts.seq_len,
               cs.bos ? fmt::format(" incl. {} BOS", prefix.size()) : "");
  cs.ids.reserve(static_cast<size_t>(cs.n_seq) * static_cast<size_t>(cs.seq_len));
  for (int s = 0; s < cs.n_seq; ++s) {
    cs.ids.insert(cs.ids.end(), prefix.begin(), prefix.end());
    const auto at = stream.begin() + static_cast<std::ptrdiff_t>(s * body);
    cs.ids.insert(cs.ids.end(), at, at + static_cast<std::ptrdiff_t>(body));
  }
  cs.holdout.assign(static_cast<size_t>(cs.n_seq), 0);
  if (opts.holdout_every > 0)
    for (int s = opts.holdout_every - 1; s < cs.n_seq; s += opts.holdout_every)
      cs.holdout[static_cast<size_t>(s)] = 1;
  cs.text_sha256 = io::sha256_hex({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  GRIDQ_ASSIGN_OR_RETURN(cs.tokenizer_sha256, io::sha256_file(tokenizer_json_path));
  cs.stream_tokens = static_cast<int64_t>(stream.size());
  return cs;
}

}  // namespace gridq::quant
