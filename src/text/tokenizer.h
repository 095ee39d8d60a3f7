// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (laguna.md §5). Encoding follows HF
// tokenizers: added tokens are matched in the raw text first, then each remaining segment is pre-tokenized
// (ByteLevel / Split / Sequence) and BPE-merged; the post-processor adds tokens only if asked. Chat prompts
// are encoded WITHOUT special tokens (the template writes the BOS text itself: the double-BOS trap).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/pre_tokenizer.h"

namespace gridq::text {

class Tokenizer {
 public:
  static Expected<Tokenizer> from_file(const std::string& path);
  // `source` names the input in error messages.
  static Expected<Tokenizer> from_json_text(std::string_view json_text, const std::string& source);

  // Invalid UTF-8 in `text` is first replaced with U+FFFD (maximal subparts, like Python's
  // bytes.decode('utf-8', errors='replace')). match_added_tokens=false treats added-token text as plain text.
  // Aborts only if PCRE2 fails on resource limits (see try_encode to get that as an error).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false,
                              bool match_added_tokens = true) const;
  Expected<std::vector<int32_t>> try_encode(std::string_view text, bool add_special_tokens = false,
                                            bool match_added_tokens = true) const;
  // A prompt rendered from untrusted strings escaped by escape_added_tokens (content_escape.h): added tokens
  // are matched in the template's own text only; each plain piece is unescaped and encoded as text.
  Expected<std::vector<int32_t>> try_encode_rendered(std::string_view rendered) const;

  // HF decode: unknown ids are dropped, skip_special drops added tokens marked special, bytes are joined and
  // invalid UTF-8 becomes U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t token_id(std::string_view text) const;  // added token or vocab entry; -1 if absent
  std::string token_text(int32_t id) const;       // stored token text (byte-level form); "" if unknown
  // Raw bytes `id` contributes to decoded text (may be a partial UTF-8 sequence); "" if unknown.
  std::string token_bytes(int32_t id) const;
  bool is_known(int32_t id) const { return !token_text(id).empty(); }
  bool is_special(int32_t id) const;  // an added token marked special
  bool is_added(int32_t id) const;
  size_t vocab_size() const;  // highest id + 1 over the model vocab and added tokens
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  struct PostStep {
    std::vector<int32_t> prefix, suffix;  // ids around sequence A when add_special_tokens
  };
  Expected<std::vector<int32_t>> encode_impl(std::string_view raw, bool add_special_tokens,
                                             bool match_added_tokens, bool unescape) const;
  Status encode_plain(std::string_view text, std::vector<int32_t>& out,
                      std::unordered_map<std::string, std::vector<int32_t>>& cache) const;

  std::shared_ptr<const BpeModel> model_;
  std::shared_ptr<const PreTokenizer> pre_;
  std::vector<AddedToken> added_;
  std::shared_ptr<const AddedTokenMatcher> matcher_;
  std::unordered_map<std::string, int32_t> added_by_text_;
  std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index in added_
  PostStep post_;
};

// Incremental detokenizer: push ids one at a time and get the text that became final. Incomplete UTF-8 at
// the end is held back; bytes that can no longer complete are emitted as U+FFFD, so the concatenation of all
// pushes and flush() equals Tokenizer::decode of the whole sequence.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();  // emits whatever is held back (an incomplete sequence becomes U+FFFD)
  bool has_pending() const { return !pending_.empty(); }
  void reset() { pending_.clear(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted: a valid but incomplete UTF-8 prefix
};

}  // namespace gridq::text
