#include "grammar/token_mask.h"

#include <algorithm>
#include <numeric>

#include "grammar/codepoints.h"
#include "text/tokenizer.h"

namespace gridq::grammar {

TokenVocab::Trie TokenVocab::build(const std::vector<std::string>& bytes,
                                   const std::vector<int32_t>& ids_in) {
  std::vector<int32_t> ids = ids_in;
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  Trie t;
  struct Span {
    uint32_t lo, hi, depth;
  };
  std::vector<Span> spans = {{0, static_cast<uint32_t>(ids.size()), 0}};
  t.nodes.emplace_back();
  t.ids = ids;
  // Breadth-first so each node's children are contiguous; a node's span is its sorted tokens.
  for (size_t n = 0; n < t.nodes.size(); ++n) {
    Span sp = spans[n];
    uint32_t i = sp.lo;
    while (i < sp.hi && bytes[ids[i]].size() == sp.depth) ++i;
    t.nodes[n].tok_begin = sp.lo;
    t.nodes[n].tok_end = i;
    t.nodes[n].span_end = sp.hi;
    t.nodes[n].depth = sp.depth;
    t.nodes[n].first_child = static_cast<uint32_t>(t.nodes.size());
    while (i < sp.hi) {
      auto c = static_cast<uint8_t>(bytes[ids[i]][sp.depth]);
      uint32_t j = i;
      while (j < sp.hi && static_cast<uint8_t>(bytes[ids[j]][sp.depth]) == c) ++j;
      Node child;
      child.byte = c;
      t.nodes.push_back(child);
      spans.push_back({i, j, sp.depth + 1});
      i = j;
    }
    t.nodes[n].n_children = static_cast<uint32_t>(t.nodes.size()) - t.nodes[n].first_child;
  }
  return t;
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<bool> special,
                       std::vector<int32_t> eos_ids)
    : bytes_(std::move(token_bytes)), eos_(std::move(eos_ids)) {
  special.resize(bytes_.size(), false);
  for (int32_t e : eos_)
    if (e >= 0 && static_cast<size_t>(e) < special.size()) special[e] = true;  // never walked as text
  free_bits_.assign(words(), 0);
  viable_bits_.assign(words(), 0);
  // Which tokens are whole JSON string characters only, decided by the grammar the front end uses for
  // unconstrained strings, so the fast path and the walk cannot disagree.
  Builder b;
  auto g = b.finish(json_free_chars(b));
  Matcher m(*g);
  std::vector<int32_t> all, not_free;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    const std::string& s = bytes_[id];
    if (s.empty() || special[id]) continue;
    auto i = static_cast<int32_t>(id);
    all.push_back(i);
    size_t n = m.advance_bytes(s);
    bool free = n == s.size() && m.accepting();
    if (n == s.size()) viable_bits_[id >> 6] |= uint64_t{1} << (id & 63);
    m.rollback(n);
    if (free) {
      free_bits_[id >> 6] |= uint64_t{1} << (id & 63);
      ++n_free_;
    } else {
      not_free.push_back(i);
    }
  }
  // The DFA: breadth-first over the matcher's canonical states of the same grammar.
  {
    std::vector<std::vector<uint32_t>> keys = {m.canonical_key()};
    std::vector<std::string> paths = {""};
    for (size_t st = 0; st < keys.size() && keys.size() < 30000; ++st) {
      free_dfa_.resize((st + 1) * 256, -1);
      m.advance_bytes(paths[st]);
      free_boundary_.push_back(m.accepting());
      for (int b = 0; b < 256; ++b) {
        if (!m.advance(static_cast<uint8_t>(b))) continue;
        std::vector<uint32_t> k = m.canonical_key();
        size_t id = std::find(keys.begin(), keys.end(), k) - keys.begin();
        if (id == keys.size()) {
          keys.push_back(std::move(k));
          paths.push_back(paths[st] + static_cast<char>(b));
        }
        free_dfa_[st * 256 + b] = static_cast<int16_t>(id);
        m.rollback(1);
      }
      m.rollback(paths[st].size());
    }
  }
  // Free tokens by character count (DFA returns to the boundary state), cumulative.
  std::vector<uint32_t> chars(bytes_.size(), 0);
  uint32_t longest = 0;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!((free_bits_[id >> 6] >> (id & 63)) & 1)) continue;
    int st = 0;
    for (unsigned char c : bytes_[id]) {
      st = free_next(st, c);
      if (free_boundary(st)) ++chars[id];
    }
    longest = std::max(longest, chars[id]);
  }
  free_le_.assign(longest + 1, std::vector<uint64_t>(words(), 0));
  for (size_t id = 0; id < bytes_.size(); ++id)
    if ((free_bits_[id >> 6] >> (id & 63)) & 1)
      for (uint32_t k = chars[id]; k <= longest; ++k) free_le_[k][id >> 6] |= uint64_t{1} << (id & 63);
  all_ = build(bytes_, all);
  not_free_ = build(bytes_, not_free);
  std::vector<int32_t> not_viable;
  for (int32_t i : all)
    if (!((viable_bits_[i >> 6] >> (i & 63)) & 1)) not_viable.push_back(i);
  not_viable_ = build(bytes_, not_viable);
  mark_pure(all_);
  mark_pure(not_free_);
  mark_pure(not_viable_);
}

void TokenVocab::mark_pure(Trie& t) const {
  auto pure_suffix = [&](const std::string& s, size_t from) {
    int st = 0;
    for (size_t i = from; i < s.size(); ++i)
      if ((st = free_next(st, static_cast<uint8_t>(s[i]))) < 0) return false;
    return true;  // whole characters, or a character in progress: both fine in an unbounded string
  };
  for (Node& n : t.nodes) {
    bool pure = n.depth > 0;
    for (uint32_t k = n.tok_begin; pure && k < n.span_end; ++k) pure = pure_suffix(bytes_[t.ids[k]], n.depth);
    n.pure_below = pure;
  }
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const text::Tokenizer& tok,
                                                             std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<bool> special(tok.vocab_size(), false);
  for (size_t id = 0; id < bytes.size(); ++id) {
    auto i = static_cast<int32_t>(id);
    if (!tok.is_known(i)) continue;
    special[id] = tok.is_special(i);
    bytes[id] = tok.token_bytes(i);
  }
  return std::make_shared<const TokenVocab>(std::move(bytes), std::move(special), std::move(eos_ids));
}

size_t TokenMasker::KeyHash::operator()(const std::vector<uint32_t>& k) const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t x : k) h = (h ^ x) * 0x100000001b3ull;
  return static_cast<size_t>(h);
}

TokenMasker::TokenMasker(std::shared_ptr<const TokenVocab> vocab, size_t max_cache_entries)
    : vocab_(std::move(vocab)), max_cache_(max_cache_entries) {}

void TokenMasker::walk(const TokenVocab::Trie& t, uint32_t node, Matcher& m,
                       std::vector<uint64_t>& mask) const {
  const TokenVocab::Node& n = t.nodes[node];
  const ByteSet allowed = m.allowed();
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const TokenVocab::Node& child = t.nodes[c];
    if (!allowed.test(child.byte) || !m.advance(child.byte)) continue;
    for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.n_children > 0) {
      if (uint32_t room = m.free_string_room()) {
        std::string pending;
        walk_free(t, c, 0, 0, room, m, pending, mask, exits_of(m));
      } else {
        walk(t, c, m, mask);
      }
    }
    m.rollback(1);
  }
}

ByteSet TokenMasker::exits_of(const Matcher& m) {
  // When only string characters and bytes that cannot start one are read here (a closing quote), a byte the
  // DFA refuses inside the string is one of those or nothing; otherwise every refusal goes to the matcher.
  bool exclusive = false, below_min = false;
  m.free_string_room(&exclusive, &below_min);
  if (!exclusive || below_min) return ByteSet().set();
  return m.allowed() & ~m.grammar().free_char_first;
}

void TokenMasker::walk_free(const TokenVocab::Trie& t, uint32_t node, int state, uint32_t chars,
                            uint32_t room, Matcher& m, std::string& pending, std::vector<uint64_t>& mask,
                            const ByteSet& exits) const {
  const TokenVocab::Node& n = t.nodes[node];
  size_t replayed = 0;  // pending bytes fed to the matcher for this node's refused children, lazily
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const TokenVocab::Node& child = t.nodes[c];
    int next = vocab_->free_next(state, child.byte);
    // A character in progress needs its slot too; past the room the matcher decides.
    const bool whole = next >= 0 && vocab_->free_boundary(next);
    const uint32_t done = chars + (whole ? 1 : 0);
    if (whole && room == kUnbounded && child.pure_below) {
      for (uint32_t k = child.tok_begin; k < child.span_end; ++k) {
        int32_t id = t.ids[k];
        mask[id >> 6] |= uint64_t{1} << (id & 63);
      }
      continue;
    }
    if (next >= 0 && done + (whole ? 0 : 1) <= room) {
      for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
        int32_t id = t.ids[k];
        mask[id >> 6] |= uint64_t{1} << (id & 63);
      }
      if (child.n_children > 0) {
        // The subtree replays from the subtree root itself, so undo this node's replay first.
        m.rollback(replayed);
        replayed = 0;
        pending.push_back(static_cast<char>(child.byte));
        walk_free(t, c, next, done, room, m, pending, mask, exits);
        pending.pop_back();
      }
      continue;
    }
    // Not a string character here (a closing quote, say): the matcher decides, exactly, unless no item
    // could take this byte (exits_of).
    if (!exits.test(child.byte) || (next < 0 && !vocab_->free_boundary(state) && !exits.all())) continue;
    if (replayed == 0 && !pending.empty()) {
      replayed = m.advance_bytes(pending);
      if (replayed != pending.size()) {  // cannot happen: the DFA is the matcher's own language
        m.rollback(replayed);
        replayed = 0;
        continue;
      }
    }
    if (!m.advance(child.byte)) continue;
    for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.n_children > 0) walk(t, c, m, mask);
    m.rollback(1);
  }
  m.rollback(replayed);
}

int32_t TokenMasker::intern(std::vector<uint32_t> key, uint32_t room, const ByteSet& exits) {
  auto [it, fresh] = state_ids_.emplace(std::move(key), static_cast<int32_t>(next_.size()));
  if (fresh) {
    next_.emplace_back();
    next_.back().fill(-2);
    room_.push_back(room);
    exits_.push_back(exits);
  }
  return it->second;
}

void TokenMasker::walk_cached(const TokenVocab::Trie& t, uint32_t node, int32_t state, Matcher& m,
                              std::string& pending, std::vector<uint64_t>& mask) {
  const TokenVocab::Node& n = t.nodes[node];
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const TokenVocab::Node& child = t.nodes[c];
    int32_t next = next_[state][child.byte];
    if (next == -2) {
      // First time from this state on this byte: ask the matcher (at the walk's root plus `pending`).
      size_t fed = m.advance_bytes(pending);
      if (fed == pending.size() && m.advance(child.byte)) {
        next = intern(m.canonical_key(), m.free_string_room(), exits_of(m));
        m.rollback(1);
      } else {
        next = -1;
      }
      m.rollback(fed);
      next_[state][child.byte] = next;
    }
    if (next < 0) continue;
    for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.n_children == 0) continue;
    pending.push_back(static_cast<char>(child.byte));
    if (room_[next] > 0) {
      // Inside a JSON string: the string DFA walks from here (it replays `pending` when it needs to).
      walk_free(t, c, 0, 0, room_[next], m, pending, mask, exits_[next]);
    } else {
      walk_cached(t, c, next, m, pending, mask);
    }
    pending.pop_back();
  }
}

void TokenMasker::compute(Matcher& m, std::vector<uint64_t>& mask) {
  if (next_.size() > 20000) {  // bound the transition table (between masks, never during a walk)
    state_ids_.clear();
    next_.clear();
    room_.clear();
    exits_.clear();
  }
  std::vector<uint32_t> key = m.canonical_key();
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++hits_;
    mask = it->second;
    return;
  }
  ++misses_;
  bool exclusive = false;
  const uint32_t room = m.free_string_room(&exclusive);
  if (room == kUnbounded) {
    // Every token that reads as string text (ending mid-character included) is allowed; walk the rest.
    mask = vocab_->viable_bits();
    std::string pending;
    walk_free(vocab_->trie_not_viable(), 0, 0, 0, room, m, pending, mask, exits_of(m));
  } else if (room > 0 && exclusive) {
    // Every free token that fits is allowed; the walk covers the others.
    mask = vocab_->free_bits_up_to(room);
    std::string pending;
    walk_free(vocab_->trie_not_free(), 0, 0, 0, room, m, pending, mask, exits_of(m));
  } else if (room > 0) {
    // A bounded string next to other ways of reading the same bytes: walk everything, still on the DFA.
    mask.assign(vocab_->words(), 0);
    std::string pending;
    walk_free(vocab_->trie_all(), 0, 0, 0, room, m, pending, mask, exits_of(m));
  } else {
    mask.assign(vocab_->words(), 0);
    if (m.allowed().count() > 32) {
      // Many bytes allowed (a pattern's characters, say): most of the trie will be visited, so memoize.
      std::string pending;
      walk_cached(vocab_->trie_all(), 0, intern(key, 0, ByteSet().set()), m, pending, mask);
    } else {
      walk(vocab_->trie_all(), 0, m, mask);  // a few bytes allowed: the walk is short, the matcher is enough
    }
  }
  if (m.accepting())
    for (int32_t e : vocab_->eos_ids())
      if (e >= 0 && static_cast<size_t>(e) < vocab_->size()) mask[e >> 6] |= uint64_t{1} << (e & 63);
  if (cache_.size() >= max_cache_) cache_.clear();
  cache_.emplace(std::move(key), mask);
}

}  // namespace gridq::grammar
