// Added tokens (special and not) and how HF finds them in raw text before pre-tokenization: leftmost-longest
// matching, first over tokens with normalized=false, then over the rest in the remaining pieces; lstrip/rstrip
// widen a match over neighbouring whitespace; single_word rejects matches inside a word.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gridq::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of input text: either plain text [begin, end) or one added token.
struct Segment {
  size_t begin = 0, end = 0;
  int32_t added_id = -1;  // -1: plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);
  // Splits text[begin, end) into segments, appended to `out`.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Set {
    std::vector<const AddedToken*> by_first_byte[256];  // each sorted longest first
    bool empty = true;
  };
  static void add(Set& s, const AddedToken* t);
  static void split_with(const Set& s, std::string_view text, size_t begin, size_t end, std::vector<Segment>& out);
  std::vector<AddedToken> tokens_;
  Set raw_, normalized_;
};

// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_whitespace(char32_t c);

}  // namespace gridq::text
