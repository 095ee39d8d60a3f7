// Token masks: which vocabulary tokens the grammar allows next. A byte trie over the vocabulary (built once
// per tokenizer) is walked against the matcher, so tokens sharing a prefix share the walk and a refused
// byte prunes its whole subtree. Two things are precomputed instead of walked:
//  - per vocabulary, the tokens made only of whole JSON string characters: inside an unconstrained string
//    they are all allowed, so only the other tokens (quotes, backslashes, partial UTF-8) are walked;
//  - inside such a string deeper in a token's walk, bytes are followed with a small DFA of the JSON string
//    character language (derived from the same grammar) instead of the Earley matcher; only a byte the DFA
//    refuses (the closing quote, mostly) is replayed through the matcher, so the result is exact;
//  - per grammar, a cache from the matcher's canonical state to its mask, since a JSON walk revisits the
//    same states (every character of a string, every element of an array);
//  - per trie node, which bytes its subtree's tokens hold (from the node's edge byte on) and whether they
//    read as well-formed UTF-8 from a character boundary: in a state inside an unbounded loop of a
//    character class (a `pattern`'s `[^@]+`, a `format`), a subtree of only that class's characters is
//    allowed whole, at any depth, without walking it (Matcher::char_loop says the loop is there).
// compute_reference() is the plain walk with none of these, for tests: both must give the same mask.
// Special tokens are never allowed by the grammar; the end-of-sequence tokens only when it accepts.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/matcher.h"

namespace gridq::text {
class Tokenizer;
}

namespace gridq::grammar {

class TokenVocab {
 public:
  // token_bytes[id]: what the token adds to the text ("" for none); special[id]: never grammar text.
  TokenVocab(std::vector<std::string> token_bytes, std::vector<bool> special, std::vector<int32_t> eos_ids);
  // From a tokenizer; end-of-sequence ids are given by the caller (they live in the model's configs).
  static std::shared_ptr<const TokenVocab> from_tokenizer(const text::Tokenizer& tok,
                                                          std::vector<int32_t> eos_ids);

  size_t size() const { return bytes_.size(); }
  size_t words() const { return (bytes_.size() + 63) / 64; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  const std::vector<int32_t>& eos_ids() const { return eos_; }
  size_t free_string_tokens() const { return n_free_; }

  struct Node {
    uint32_t first_child = 0, n_children = 0;  // children are nodes [first_child, first_child + n)
    uint32_t tok_begin = 0, tok_end = 0;       // tokens whose bytes end here: ids_[tok_begin, tok_end)
    uint32_t span_end = 0;                     // the subtree's tokens are ids_[tok_begin, span_end)
    uint32_t depth = 0;
    uint8_t byte = 0;  // the edge byte from the parent
    // Every token below reads, from this depth on, as JSON string text: inside an unbounded
    // string at a character boundary the whole subtree is allowed without walking it.
    bool pure_below = false;
  };
  // What a node's subtree reads from the node's edge byte to the end of each of its tokens.
  struct Below {
    uint64_t ascii[2] = {0, 0};  // one-byte characters (bytes < 0x80) that occur
    bool multi = false;          // some byte >= 0x80 occurs
    bool utf8 = false;       // each is well-formed UTF-8 from a character boundary (may stop mid-character)
    uint32_t max_bytes = 0;  // the longest of them
    // What follows the edge byte, in every token, is raw JSON string text (free_ascii, free_multi) from a
    // character boundary: allowed whole where the edge byte leads into an unbounded string.
    bool text_after = false;
  };
  struct Trie {
    std::vector<Node> nodes;  // [0] is the root
    std::vector<int32_t> ids;
    std::vector<Below> below;  // [nodes]
  };
  const Trie& trie_all() const { return all_; }
  const Trie& trie_not_free() const { return not_free_; }
  const Trie& trie_not_viable() const { return not_viable_; }
  // Tokens that read as JSON string text, possibly ending inside a character.
  const std::vector<uint64_t>& viable_bits() const { return viable_bits_; }
  const std::vector<uint64_t>& free_bits() const { return free_bits_; }
  // Every token of trie_all (all but special and empty ones).
  const std::vector<uint64_t>& all_bits() const { return all_bits_; }
  // viable_bits over trie_all positions (bit k: token trie_all().ids[k] is viable), and the node of
  // trie_not_viable for each first byte (0: none), so a first byte's viable tokens are one bit range.
  const std::vector<uint64_t>& viable_by_position() const { return viable_pos_; }
  uint32_t not_viable_child(uint8_t b) const { return not_viable_child_[b]; }
  // The free tokens of at most `chars` characters (all of them past the longest).
  const std::vector<uint64_t>& free_bits_up_to(uint32_t chars) const {
    return chars >= free_le_.size() ? free_bits_ : free_le_[chars];
  }
  // DFA over the bytes of JSON string characters: free_next(state, byte) is the next state or -1; state 0
  // is a character boundary.
  int free_next(int state, uint8_t b) const { return free_dfa_[static_cast<size_t>(state) * 256 + b]; }
  bool free_boundary(int state) const { return free_boundary_[state]; }  // a whole number of characters
  // Subtrees made only of such characters, raw (no escapes): Below::ascii within free_ascii()[0..1], and
  // multi-byte characters when free_multi().
  const uint64_t* free_ascii() const { return free_ascii_; }
  bool free_multi() const { return free_multi_; }

 private:
  static Trie build(const std::vector<std::string>& bytes, const std::vector<int32_t>& ids);
  void mark_pure(Trie& t) const;
  void mark_below(Trie& t) const;
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_;
  Trie all_, not_free_, not_viable_;
  std::vector<uint64_t> viable_bits_;  // [words]
  std::vector<uint64_t> all_bits_;     // [words]
  std::vector<uint64_t> viable_pos_;   // [trie_all positions / 64]
  std::array<uint32_t, 256> not_viable_child_{};
  std::vector<uint64_t> free_bits_;             // [words]
  std::vector<int16_t> free_dfa_;               // [states * 256]
  std::vector<bool> free_boundary_;             // [states]
  std::vector<std::vector<uint64_t>> free_le_;  // [longest free token in characters + 1][words]
  size_t n_free_ = 0;
  uint64_t free_ascii_[2] = {0, 0};
  bool free_multi_ = false;
};

// Masks for one grammar over one vocabulary, with the state cache. Not thread-safe: one per user thread.
class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const TokenVocab> vocab, size_t max_cache_entries = 512);
  // mask[w] bit b: token 64*w+b allowed after the matcher's bytes. The matcher is walked and restored.
  void compute(Matcher& m, std::vector<uint64_t>& mask);
  // The same mask by the plain trie walk against the matcher (no precomputed sets, no cache): the reference
  // the fast paths are tested against.
  void compute_reference(Matcher& m, std::vector<uint64_t>& mask) const;
  size_t cache_hits() const { return hits_; }
  size_t cache_misses() const { return misses_; }
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& k) const;
  };
  // The bytes from a walk's root (where the matcher was when the walk began) to the current trie node, and
  // how many of them the matcher has read. It follows the walk lazily: only a node that needs a new
  // transition feeds it, and a sibling subtree reuses what its parent fed, so a deep first visit costs one
  // matcher advance per new transition instead of a replay of the whole path for each.
  struct Path {
    std::string bytes;
    size_t fed = 0;  // the matcher is at the root plus bytes[0, fed); fed <= bytes.size()
  };
  // The matcher to the current node; false (the matcher unchanged) if it refuses a byte of the path,
  // which cannot happen: the walk only follows bytes the matcher took.
  static bool feed(Matcher& m, Path& p);
  static void push(Path& p, uint8_t b) { p.bytes.push_back(static_cast<char>(b)); }
  static void pop(Matcher& m, Path& p);  // back to the parent node (the matcher too, if it was deeper)
  void walk(const TokenVocab::Trie& t, uint32_t node, Matcher& m, std::vector<uint64_t>& mask);
  // The subtree under `node` (the end of path `p`) inside a free string that began at the subtree root,
  // `state` being the DFA state there.
  // `chars`: characters completed since the subtree root; `room`: how many the string may still take.
  void walk_free(const TokenVocab::Trie& t, uint32_t node, int state, uint32_t chars, uint32_t room,
                 Matcher& m, Path& p, std::vector<uint64_t>& mask, const ByteSet& exits,
                 std::vector<int32_t>* at_chars);
  // at_chars (null: not used): when the string is exclusive at the subtree root (Matcher::free_string_room),
  // other items die at its first character, so the state after k whole characters depends on k alone:
  // at_chars[k] is that state's id (filled lazily; k = 0 is the subtree root itself), and bytes leaving the
  // string are memoized transitions, the subtree after them walked on memoized transitions too.
  // Bytes worth asking the matcher about where the string DFA refuses one (all: ask always).
  static ByteSet exits_of(const Matcher& m);
  // Memoized matcher transitions over canonical states, kept across masks: after the first visit a trie
  // walk is table lookups. next_[state][byte]: the next state, -1 refused, -2 not yet known.
  // The matcher is at the state `key` describes (its char loop is read from it).
  int32_t intern(const Matcher& m, std::vector<uint32_t> key, uint32_t room, const ByteSet& exits);
  void walk_cached(const TokenVocab::Trie& t, uint32_t node, int32_t state, Matcher& m, Path& p,
                   std::vector<uint64_t>& mask);
  // walk_cached, or walk_free when `state` is inside a JSON string.
  void walk_from(const TokenVocab::Trie& t, uint32_t node, int32_t state, Matcher& m, Path& p,
                 std::vector<uint64_t>& mask);
  // walk_cached's descents, made after all the node's children are seen (see defer): a stack shared by the
  // recursion, each node's entries from `base` on.
  struct Later {
    const TokenVocab::Trie* t;
    uint32_t node;
    int32_t state;
    uint8_t byte;
  };
  void defer(const TokenVocab::Trie& t, uint32_t node, int32_t state, uint8_t byte);
  void descend(size_t base, Matcher& m, Path& p, std::vector<uint64_t>& mask);
  std::vector<Later> later_;
  // next_[state][b] (and its byte class) from the matcher, which is at `state` now.
  int32_t step_at(int32_t state, uint8_t b, Matcher& m);
  std::unordered_map<std::vector<uint32_t>, int32_t, KeyHash> state_ids_;
  std::vector<std::array<int32_t, 256>> next_;
  std::vector<uint32_t> room_;  // [states]: Matcher::free_string_room there
  std::vector<ByteSet> exits_;  // [states]: exits_of there
  std::vector<bool> excl_;      // [states]: the JSON string there is exclusive (free_string_room)
  std::deque<std::vector<int32_t>> at_chars_;  // [states]: walk_free's at_chars from there (stable addresses)
  struct Loop {
    bool on = false, all_multi = false;
    uint64_t ascii[2] = {0, 0};
    uint32_t room = 0;       // characters the loop may still take (kUnbounded: any number)
    bool then_free = false;  // Matcher::char_then_free_string there
  };
  std::vector<Loop> loop_;  // [states]: Matcher::char_loop there
  // Whole subtrees of trie_all allowed during a walk, as ranges of trie positions (trie_all.ids order, where
  // a subtree is contiguous): one bit range each instead of a bit per token, turned into token ids once at
  // the end of compute() (through the complement when most are set).
  void allow_span(const TokenVocab::Trie& t, uint32_t begin, uint32_t end, std::vector<uint64_t>& mask);
  void allow_viable(uint32_t begin, uint32_t end);  // the viable ones of trie_all positions [begin, end)
  void flush_spans(std::vector<uint64_t>& mask);
  std::vector<uint64_t> spans_;  // [trie_all positions / 64]
  bool spans_used_ = false;
  std::shared_ptr<const TokenVocab> vocab_;
  size_t max_cache_;
  std::unordered_map<std::vector<uint32_t>, std::vector<uint64_t>, KeyHash> cache_;
  size_t hits_ = 0, misses_ = 0;
};

inline bool mask_test(const std::vector<uint64_t>& mask, int32_t id) {
  return (mask[id >> 6] >> (id & 63)) & 1;
}

}  // namespace gridq::grammar
