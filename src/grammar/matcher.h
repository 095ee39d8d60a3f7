// Incremental Earley recognizer over bytes. The state is the stack of Earley sets, one per consumed byte, so
// rollback is a truncation and a copy is a vector copy. Items are (alt, dot, origin); for a repetition the
// dot is the count so far (clamped at min once the count no longer matters, which keeps the state, and the
// mask cache key, identical from one character of a long string to the next).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace gridq::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  // Consumes one byte; returns false and leaves the state unchanged when the grammar does not allow it.
  bool advance(uint8_t b);
  // Consumes bytes until one is refused; returns how many were consumed.
  size_t advance_bytes(std::string_view bytes);
  void rollback(size_t n_bytes);  // undoes the last n_bytes advances (n_bytes <= position())
  size_t position() const { return set_begin_.size() - 1; }

  bool accepting() const;   // the bytes so far form a complete sentence
  ByteSet allowed() const;  // bytes that advance() would take now
  // Inside a JSON string whose characters are unconstrained (Rule::free_string_chars), at a character
  // boundary: how many more characters it may take (0: not in such a string; kUnbounded: no limit).
  // exclusive: every byte that can start such a character is read only through such strings here;
  // below_min: such a string has not reached its minimum length yet.
  uint32_t free_string_room(bool* exclusive = nullptr, bool* below_min = nullptr) const;
  bool in_free_string() const { return free_string_room() > 0; }
  // A repetition of a Rule::char_class rule waiting for its next character here: every string of its
  // characters, up to *room of them (kUnbounded: any number), is accepted from this state. Returns the one
  // with the most one-byte characters, then the most room (nullptr: none).
  const Rule* char_loop(uint32_t* room = nullptr) const;
  // An item waiting for one character of a Rule::char_class rule that takes every multi-byte character,
  // followed by an unbounded free string (an extra property's key that has left the declared names): every
  // token that reads as string text and starts with a multi-byte character is accepted from this state.
  bool char_then_free_string() const;
  // The bytes that every terminal readable now holds or lacks together with b: advance() treats them as b.
  ByteSet same_as(uint8_t b) const;
  // The state with absolute positions replaced by structure: equal keys accept the same futures.
  std::vector<uint32_t> canonical_key() const;
  size_t items_in_state() const { return items_.size() - set_begin_.back(); }
  const Grammar& grammar() const { return *g_; }

 private:
  struct Item {
    uint32_t alt, dot, origin;
  };
  void closure(uint32_t set);
  void add(uint32_t alt, uint32_t dot, uint32_t origin);
  bool next_sym(const Item& it, Sym& s) const;
  uint32_t advanced_dot(const Item& it) const;
  uint32_t key_visit(uint32_t set, uint32_t rule, std::vector<std::vector<uint32_t>>& blocks,
                     std::vector<std::pair<uint64_t, uint32_t>>& memo) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<Item> items_;
  std::vector<uint32_t> set_begin_;   // [sets]: set k starts at items_[set_begin_[k]], ends at the next set
  std::vector<uint32_t> dedup_;       // scratch open-addressing table (item indices) for the newest set
  std::vector<uint32_t> dedup_used_;  // slots filled for the newest set, cleared at the next advance
  size_t dedup_count_ = 0;
};

}  // namespace gridq::grammar
