#include "grammar/token_mask.h"

#include <algorithm>
#include <numeric>
#include <string_view>

namespace gridq::grammar {

size_t TokenMasker::KeyHash::operator()(const std::vector<uint32_t>& k) const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t x : k) h = (h ^ x) * 0x100000001b3ull;
  return static_cast<size_t>(h);
}

TokenMasker::TokenMasker(std::shared_ptr<const TokenVocab> vocab, size_t max_cache_entries)
    : vocab_(std::move(vocab)), max_cache_(max_cache_entries) {}

void TokenMasker::walk(const TokenVocab::Trie& t, uint32_t node, Matcher& m, std::vector<uint64_t>& mask) {
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
      bool exclusive = false;
      if (uint32_t room = m.free_string_room(&exclusive)) {
        Path p;
        std::vector<int32_t> at_chars;
        walk_free(t, c, 0, 0, room, m, p, mask, exits_of(m), exclusive ? &at_chars : nullptr);
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

bool TokenMasker::feed(Matcher& m, Path& p) {
  if (p.fed == p.bytes.size()) return true;
  const size_t n = m.advance_bytes(std::string_view(p.bytes).substr(p.fed));
  if (p.fed + n != p.bytes.size()) {
    m.rollback(n);
    return false;
  }
  p.fed = p.bytes.size();
  return true;
}

void TokenMasker::pop(Matcher& m, Path& p) {
  p.bytes.pop_back();
  if (p.fed > p.bytes.size()) {
    m.rollback(p.fed - p.bytes.size());
    p.fed = p.bytes.size();
  }
}

void TokenMasker::walk_free(const TokenVocab::Trie& t, uint32_t node, int state, uint32_t chars,
                            uint32_t room, Matcher& m, Path& p, std::vector<uint64_t>& mask,
                            const ByteSet& exits, std::vector<int32_t>* at_chars) {
  const TokenVocab::Node& n = t.nodes[node];
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const TokenVocab::Node& child = t.nodes[c];
    int next = vocab_->free_next(state, child.byte);
    // A character in progress needs its slot too; past the room the matcher decides.
    const bool whole = next >= 0 && vocab_->free_boundary(next);
    const uint32_t done = chars + (whole ? 1 : 0);
    if (whole && room == kUnbounded && child.pure_below) {
      allow_span(t, child.tok_begin, child.span_end, mask);
      continue;
    }
    if (vocab_->free_boundary(state)) {
      // Raw string characters only, whole or (at the end) in progress, within the room: the subtree whole.
      const TokenVocab::Below& b = t.below[c];
      const uint64_t* fa = vocab_->free_ascii();
      if (b.utf8 && (b.ascii[0] & ~fa[0]) == 0 && (b.ascii[1] & ~fa[1]) == 0 &&
          (!b.multi || vocab_->free_multi()) && (room == kUnbounded || chars + b.max_bytes <= room)) {
        allow_span(t, child.tok_begin, child.span_end, mask);
        continue;
      }
    }
    if (next >= 0 && done + (whole ? 0 : 1) <= room) {
      for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
        int32_t id = t.ids[k];
        mask[id >> 6] |= uint64_t{1} << (id & 63);
      }
      if (child.n_children > 0) {
        push(p, child.byte);
        walk_free(t, c, next, done, room, m, p, mask, exits, at_chars);
        pop(m, p);
      }
      continue;
    }
    // Not a string character here (a closing quote, say): the matcher decides, exactly, unless no item
    // could take this byte (exits_of).
    if (!exits.test(child.byte) || (next < 0 && !vocab_->free_boundary(state) && !exits.all())) continue;
    if (at_chars && vocab_->free_boundary(state)) {
      // An exclusive string (see at_chars): the matcher's state here is the one after any `chars` whole
      // characters, so its transitions are memoized like walk_cached's and the subtree walks on them.
      if (at_chars->size() <= chars) at_chars->resize(chars + 1, -1);
      int32_t sk = (*at_chars)[chars];
      if (sk < 0 || next_[sk][child.byte] == -2) {
        if (!feed(m, p)) continue;
        if (sk < 0) (*at_chars)[chars] = sk = intern(m, m.canonical_key(), m.free_string_room(), exits_of(m));
        step_at(sk, child.byte, m);
      }
      const int32_t nx = next_[sk][child.byte];
      if (nx < 0) continue;
      for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
        int32_t id = t.ids[k];
        mask[id >> 6] |= uint64_t{1} << (id & 63);
      }
      if (child.n_children == 0) continue;
      push(p, child.byte);
      walk_from(t, c, nx, m, p, mask);
      pop(m, p);
      continue;
    }
    if (!feed(m, p) || !m.advance(child.byte)) continue;
    for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.n_children > 0) walk(t, c, m, mask);
    m.rollback(1);
  }
}

int32_t TokenMasker::intern(const Matcher& m, std::vector<uint32_t> key, uint32_t room,
                            const ByteSet& exits) {
  auto [it, fresh] = state_ids_.emplace(std::move(key), static_cast<int32_t>(next_.size()));
  if (fresh) {
    next_.emplace_back();
    next_.back().fill(-2);
    room_.push_back(room);
    exits_.push_back(exits);
    bool exclusive = false;
    m.free_string_room(&exclusive);
    excl_.push_back(exclusive);
    at_chars_.emplace_back();
    Loop lp;
    if (const Rule* r = m.char_loop(&lp.room)) {
      lp.on = true;
      lp.all_multi = r->char_all_multi;
      for (int b = 0; b < 128; ++b)
        if (r->char_ascii.test(b)) lp.ascii[b >> 6] |= uint64_t{1} << (b & 63);
    }
    lp.then_free = m.char_then_free_string();
    loop_.push_back(lp);
  }
  return it->second;
}

void TokenMasker::walk_cached(const TokenVocab::Trie& t, uint32_t node, int32_t state, Matcher& m, Path& p,
                              std::vector<uint64_t>& mask) {
  const TokenVocab::Node& n = t.nodes[node];
  const Loop lp = loop_[state];
  const bool bulk = lp.on && !t.below.empty();
  const size_t base = later_.size();
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const TokenVocab::Node& child = t.nodes[c];
    if (bulk) {
      // Inside a character loop: a subtree of only its characters is allowed whole (see Matcher::char_loop).
      const TokenVocab::Below& b = t.below[c];
      if (b.utf8 && (b.ascii[0] & ~lp.ascii[0]) == 0 && (b.ascii[1] & ~lp.ascii[1]) == 0 &&
          (!b.multi || lp.all_multi) && (lp.room == kUnbounded || b.max_bytes <= lp.room)) {
        allow_span(t, child.tok_begin, child.span_end, mask);
        continue;
      }
    }
    int32_t next = next_[state][child.byte];
    // First time from this state on this byte's class: ask the matcher (fed to this node).
    if (next == -2) next = feed(m, p) ? step_at(state, child.byte, m) : -1;
    if (next < 0) continue;
    if (room_[next] == kUnbounded && t.below[c].text_after) {
      // Into an unbounded JSON string at a character boundary, and only string text follows in the subtree.
      allow_span(t, child.tok_begin, child.span_end, mask);
      continue;
    }
    // free_next is -1 for a byte that is no string character (a quote, a control byte): not into free text.
    const int free_state = child.byte < 0x80 ? vocab_->free_next(0, child.byte) : -1;
    const bool into_free =
        child.byte < 0x80 ? room_[next] == kUnbounded && free_state >= 0 && vocab_->free_boundary(free_state)
                          : lp.then_free && child.byte >= 0xC2 && child.byte <= 0xF4;
    if (node == 0 && &t == &vocab_->trie_all() && into_free) {
      // A one-byte character into an unbounded JSON string, or the lead byte of a multi-byte character
      // that any such character may be before one (an extra property's key, say): every token starting
      // with it that reads as string text is allowed (a bit range); the others are walked.
      allow_viable(child.tok_begin, child.span_end);
      if (uint32_t nc = vocab_->not_viable_child(child.byte)) {
        const TokenVocab::Trie& nv = vocab_->trie_not_viable();
        for (uint32_t k = nv.nodes[nc].tok_begin; k < nv.nodes[nc].tok_end; ++k) {
          int32_t id = nv.ids[k];
          mask[id >> 6] |= uint64_t{1} << (id & 63);
        }
        defer(nv, nc, next, child.byte);
      }
      continue;
    }
    for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.n_children > 0) defer(t, c, next, child.byte);
  }
  descend(base, m, p, mask);
}

void TokenMasker::defer(const TokenVocab::Trie& t, uint32_t node, int32_t state, uint8_t byte) {
  // The node's children are what the descent reads first: ask for them now, so the cache misses of all
  // the subtrees a node descends into overlap instead of following one another.
  const TokenVocab::Node& n = t.nodes[node];
  __builtin_prefetch(&t.nodes[n.first_child]);
  if (!t.below.empty()) __builtin_prefetch(&t.below[n.first_child]);
  later_.push_back({&t, node, state, byte});
}

void TokenMasker::descend(size_t base, Matcher& m, Path& p, std::vector<uint64_t>& mask) {
  // Each descent defers its own children past the end and takes them back before it returns.
  for (size_t i = base; i < later_.size(); ++i) {
    const Later d = later_[i];  // a copy: deeper descents grow later_
    push(p, d.byte);
    walk_from(*d.t, d.node, d.state, m, p, mask);
    pop(m, p);
  }
  later_.resize(base);
}

void TokenMasker::walk_from(const TokenVocab::Trie& t, uint32_t node, int32_t state, Matcher& m, Path& p,
                            std::vector<uint64_t>& mask) {
  // Memoized transitions outside strings, and inside unbounded ones that other items read too or that are
  // below their minimum length (exits_of: the string DFA would hand most bytes back to the matcher there).
  if (room_[state] == 0 || (room_[state] == kUnbounded && exits_[state].all()))
    return walk_cached(t, node, state, m, p, mask);
  // Inside a JSON string: the string DFA walks from here (it feeds the matcher when it needs to).
  // A copy: the walk interns states, which moves exits_.
  const ByteSet exits = exits_[state];
  walk_free(t, node, 0, 0, room_[state], m, p, mask, exits, excl_[state] ? &at_chars_[state] : nullptr);
}

int32_t TokenMasker::step_at(int32_t state, uint8_t b, Matcher& m) {
  const ByteSet same = m.same_as(b);  // they all move the matcher as b does
  int32_t next = -1;
  if (m.advance(b)) {
    next = intern(m, m.canonical_key(), m.free_string_room(), exits_of(m));
    m.rollback(1);
  }
  std::array<int32_t, 256>& row = next_[state];
  for (int x = 0; x < 256; ++x)
    if (same.test(x)) row[x] = next;
  return next;
}

namespace {

// The reference walk: every child byte asked of the matcher, nothing precomputed.
void walk_plain(const TokenVocab::Trie& t, uint32_t node, Matcher& m, std::vector<uint64_t>& mask) {
  const TokenVocab::Node& n = t.nodes[node];
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    const TokenVocab::Node& child = t.nodes[c];
    if (!m.advance(child.byte)) continue;
    for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    walk_plain(t, c, m, mask);
    m.rollback(1);
  }
}

void add_eos(const TokenVocab& v, const Matcher& m, std::vector<uint64_t>& mask) {
  if (m.accepting())
    for (int32_t e : v.eos_ids())
      if (e >= 0 && static_cast<size_t>(e) < v.size()) mask[e >> 6] |= uint64_t{1} << (e & 63);
}

}  // namespace

void TokenMasker::compute_reference(Matcher& m, std::vector<uint64_t>& mask) const {
  mask.assign(vocab_->words(), 0);
  walk_plain(vocab_->trie_all(), 0, m, mask);
  add_eos(*vocab_, m, mask);
}

void TokenMasker::compute(Matcher& m, std::vector<uint64_t>& mask) {
  if (next_.size() > 20000) {  // bound the transition table (between masks, never during a walk)
    state_ids_.clear();
    next_.clear();
    room_.clear();
    exits_.clear();
    excl_.clear();
    at_chars_.clear();
    loop_.clear();
  }
  std::vector<uint32_t> key = m.canonical_key();
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++hits_;
    mask = it->second;
    return;
  }
  ++misses_;
  spans_.resize((vocab_->trie_all().ids.size() + 63) / 64);  // all zero between masks (flush_spans)
  bool exclusive = false;
  const uint32_t room = m.free_string_room(&exclusive);
  // Inside an exclusive string: its states after k characters, kept with the root state's other tables.
  std::vector<int32_t>* ak = nullptr;
  if (room > 0 && exclusive) ak = &at_chars_[intern(m, key, room, exits_of(m))];
  if (room == kUnbounded && exits_of(m).all()) {
    // Every token that reads as string text is allowed; the rest on memoized transitions (walk_from).
    mask = vocab_->viable_bits();
    Path p;
    walk_cached(vocab_->trie_not_viable(), 0, intern(m, key, room, exits_of(m)), m, p, mask);
  } else if (room == kUnbounded) {
    // Every token that reads as string text (ending mid-character included) is allowed; walk the rest.
    mask = vocab_->viable_bits();
    Path p;
    walk_free(vocab_->trie_not_viable(), 0, 0, 0, room, m, p, mask, exits_of(m), ak);
  } else if (room > 0 && exclusive) {
    // Every free token that fits is allowed; the walk covers the others.
    mask = vocab_->free_bits_up_to(room);
    Path p;
    walk_free(vocab_->trie_not_free(), 0, 0, 0, room, m, p, mask, exits_of(m), ak);
  } else if (room > 0) {
    // A bounded string next to other ways of reading the same bytes: walk everything, still on the DFA.
    mask.assign(vocab_->words(), 0);
    Path p;
    walk_free(vocab_->trie_all(), 0, 0, 0, room, m, p, mask, exits_of(m), ak);
  } else {
    mask.assign(vocab_->words(), 0);
    if (m.allowed().count() > 32 || m.char_loop() != nullptr) {
      // Many bytes allowed (a pattern's characters, say): most of the trie will be visited, so memoize.
      Path p;
      walk_cached(vocab_->trie_all(), 0, intern(m, key, 0, ByteSet().set()), m, p, mask);
    } else {
      walk(vocab_->trie_all(), 0, m, mask);  // a few bytes allowed: the walk is short, the matcher is enough
    }
  }
  flush_spans(mask);
  add_eos(*vocab_, m, mask);
  if (cache_.size() >= max_cache_) cache_.clear();
  cache_.emplace(std::move(key), mask);
}

}  // namespace gridq::grammar
