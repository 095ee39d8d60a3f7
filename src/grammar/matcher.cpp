#include "grammar/matcher.h"

#include <algorithm>

namespace gridq::grammar {
namespace {
constexpr uint32_t kEmpty = 0xFFFFFFFFu;
inline uint32_t hash_item(uint32_t a, uint32_t d, uint32_t o) {
  uint64_t h = (uint64_t{a} * 0x9E3779B97F4A7C15ull) ^ (uint64_t{d} * 0xC2B2AE3D27D4EB4Full) ^
               (uint64_t{o} * 0x165667B19E3779F9ull);
  return static_cast<uint32_t>(h ^ (h >> 29));
}
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  set_begin_.push_back(0);
  dedup_.assign(64, kEmpty);
  dedup_count_ = 0;
  for (uint32_t a = g_->rule_first_alt[g_->root]; a < g_->rule_first_alt[g_->root + 1]; ++a) add(a, 0, 0);
  closure(0);
}

bool Matcher::next_sym(const Item& it, Sym& s) const {
  const FlatAlt& a = g_->flat_alts[it.alt];
  if (a.repeat) {
    const Rule& r = g_->rules[a.rule];
    if (it.dot >= r.max) return false;
    s = r.body;
    return true;
  }
  if (a.begin + it.dot >= a.end) return false;
  s = g_->flat_syms[a.begin + it.dot];
  return true;
}

uint32_t Matcher::advanced_dot(const Item& it) const {
  const FlatAlt& a = g_->flat_alts[it.alt];
  if (a.repeat) {
    const Rule& r = g_->rules[a.rule];
    if (r.max == kUnbounded) return std::min(it.dot + 1, r.min);
  }
  return it.dot + 1;
}

void Matcher::add(uint32_t alt, uint32_t dot, uint32_t origin) {
  if ((dedup_count_ + 1) * 2 > dedup_.size()) {
    dedup_.assign(dedup_.size() * 2, kEmpty);
    dedup_count_ = 0;
    dedup_used_.clear();
    for (uint32_t i = set_begin_.back(); i < items_.size(); ++i) {
      const Item& it = items_[i];
      size_t mask = dedup_.size() - 1;
      size_t h = hash_item(it.alt, it.dot, it.origin) & mask;
      while (dedup_[h] != kEmpty) h = (h + 1) & mask;
      dedup_[h] = i;
      dedup_used_.push_back(static_cast<uint32_t>(h));
      ++dedup_count_;
    }
  }
  size_t mask = dedup_.size() - 1;
  size_t h = hash_item(alt, dot, origin) & mask;
  while (dedup_[h] != kEmpty) {
    const Item& it = items_[dedup_[h]];
    if (it.alt == alt && it.dot == dot && it.origin == origin) return;
    h = (h + 1) & mask;
  }
  dedup_[h] = static_cast<uint32_t>(items_.size());
  dedup_used_.push_back(static_cast<uint32_t>(h));
  ++dedup_count_;
  items_.push_back(Item{alt, dot, origin});
}

void Matcher::closure(uint32_t set) {
  const Grammar& g = *g_;
  for (size_t i = set_begin_[set]; i < items_.size(); ++i) {
    const Item it = items_[i];
    const FlatAlt& fa = g.flat_alts[it.alt];
    Sym s;
    if (next_sym(it, s) && s.is_rule()) {
      uint32_t r = s.index();
      for (uint32_t a = g.rule_first_alt[r]; a < g.rule_first_alt[r + 1]; ++a) add(a, 0, set);
      // Aycock-Horspool: a nullable symbol is also stepped over now, so no completion with origin == set
      // is ever needed. A repetition already at its minimum gains nothing from an empty body.
      if (g.nullable[r]) {
        bool skip = fa.repeat && it.dot >= g.rules[fa.rule].min;
        if (!skip) add(it.alt, advanced_dot(it), it.origin);
      }
    }
    bool complete = fa.repeat ? it.dot >= g.rules[fa.rule].min : fa.begin + it.dot >= fa.end;
    if (!complete || it.origin == set) continue;
    const uint32_t rule = fa.rule;
    const uint32_t o_end = it.origin + 1 < set_begin_.size() ? set_begin_[it.origin + 1] : items_.size();
    for (uint32_t j = set_begin_[it.origin]; j < o_end; ++j) {
      const Item p = items_[j];
      Sym ps;
      if (next_sym(p, ps) && ps.is_rule() && ps.index() == rule) add(p.alt, advanced_dot(p), p.origin);
    }
  }
}

bool Matcher::advance(uint8_t b) {
  const uint32_t prev = set_begin_.back();
  const uint32_t prev_end = static_cast<uint32_t>(items_.size());
  const uint32_t set = static_cast<uint32_t>(set_begin_.size());
  set_begin_.push_back(prev_end);
  for (uint32_t h : dedup_used_) dedup_[h] = kEmpty;
  dedup_used_.clear();
  dedup_count_ = 0;
  for (uint32_t i = prev; i < prev_end; ++i) {
    const Item it = items_[i];
    Sym s;
    if (next_sym(it, s) && !s.is_rule() && g_->classes[s.index()].test(b))
      add(it.alt, advanced_dot(it), it.origin);
  }
  if (items_.size() == prev_end) {
    set_begin_.pop_back();
    return false;
  }
  closure(set);
  return true;
}

size_t Matcher::advance_bytes(std::string_view bytes) {
  size_t n = 0;
  for (unsigned char c : bytes) {
    if (!advance(c)) break;
    ++n;
  }
  return n;
}

void Matcher::rollback(size_t n_bytes) {
  n_bytes = std::min(n_bytes, position());
  if (n_bytes == 0) return;
  size_t keep = set_begin_.size() - n_bytes;
  items_.resize(set_begin_[keep]);
  set_begin_.resize(keep);
}

bool Matcher::accepting() const {
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item& it = items_[i];
    if (g_->flat_alts[it.alt].rule == g_->root && it.origin == 0 && it.dot == 1) return true;
  }
  return false;
}

ByteSet Matcher::allowed() const {
  ByteSet out;
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    Sym s;
    if (next_sym(items_[i], s) && !s.is_rule()) out |= g_->classes[s.index()];
  }
  return out;
}

uint32_t Matcher::free_string_room(bool* exclusive, bool* below_min) const {
  uint32_t room = 0;
  if (exclusive) *exclusive = true;
  if (below_min) *below_min = false;
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item& it = items_[i];
    const FlatAlt& fa = g_->flat_alts[it.alt];
    if (exclusive && !g_->rules[fa.rule].free_char) {
      Sym s;
      if (next_sym(it, s) && !s.is_rule() && (g_->classes[s.index()] & g_->free_char_first).any())
        *exclusive = false;
    }
    if (!fa.repeat) continue;
    const Rule& r = g_->rules[fa.rule];
    if (!r.free_string_chars || it.dot >= r.max) continue;
    // Below its minimum the string cannot end yet: what may follow it later is not visible here.
    if (below_min && it.dot < r.min) *below_min = true;
    room = std::max(room, r.max == kUnbounded ? kUnbounded : r.max - it.dot);
  }
  return room;
}

const Rule* Matcher::char_loop(uint32_t* room) const {
  const Rule* best = nullptr;
  uint32_t best_room = 0;
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item& it = items_[i];
    const FlatAlt& fa = g_->flat_alts[it.alt];
    if (!fa.repeat) continue;
    const Rule& r = g_->rules[fa.rule];
    // Each character advances the count (clamped at the minimum when unbounded) while it is below max.
    if (it.dot >= r.max || !r.body.is_rule()) continue;
    const Rule& body = g_->rules[r.body.index()];
    if (!body.char_class) continue;
    const uint32_t left = r.max == kUnbounded ? kUnbounded : r.max - it.dot;
    const size_t n = body.char_ascii.count(), best_n = best ? best->char_ascii.count() : 0;
    if (!best || n > best_n || (n == best_n && left > best_room)) {
      best = &body;
      best_room = left;
    }
  }
  if (room) *room = best_room;
  return best;
}

bool Matcher::char_then_free_string() const {
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item& it = items_[i];
    const FlatAlt& fa = g_->flat_alts[it.alt];
    if (fa.repeat || fa.begin + it.dot + 1 >= fa.end) continue;
    const Sym c = g_->flat_syms[fa.begin + it.dot], rest = g_->flat_syms[fa.begin + it.dot + 1];
    if (!c.is_rule() || !rest.is_rule()) continue;
    const Rule& cr = g_->rules[c.index()];
    const Rule& rr = g_->rules[rest.index()];
    if (cr.char_class && cr.char_all_multi && rr.free_string_chars && rr.max == kUnbounded) return true;
  }
  return false;
}

ByteSet Matcher::same_as(uint8_t b) const {
  ByteSet out;
  out.set();
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    Sym s;
    if (!next_sym(items_[i], s) || s.is_rule()) continue;
    const ByteSet& c = g_->classes[s.index()];
    out &= c.test(b) ? c : ~c;
  }
  return out;
}

uint32_t Matcher::key_visit(uint32_t set, uint32_t rule, std::vector<std::vector<uint32_t>>& blocks,
                            std::vector<std::pair<uint64_t, uint32_t>>& memo) const {
  const uint64_t k = (uint64_t{set} << 32) | rule;
  for (const auto& [mk, id] : memo)
    if (mk == k) return id;
  const uint32_t id = static_cast<uint32_t>(blocks.size());
  memo.emplace_back(k, id);
  blocks.emplace_back();
  std::vector<uint32_t> block;
  const size_t end = set + 1 < set_begin_.size() ? set_begin_[set + 1] : items_.size();
  for (size_t j = set_begin_[set]; j < end; ++j) {
    const Item& p = items_[j];
    Sym s;
    if (!next_sym(p, s) || !s.is_rule() || s.index() != rule) continue;
    block.push_back(p.alt);
    block.push_back(p.dot);
    block.push_back(key_visit(p.origin, g_->flat_alts[p.alt].rule, blocks, memo));
  }
  blocks[id] = std::move(block);
  return id;
}

std::vector<uint32_t> Matcher::canonical_key() const {
  // Block 0: the newest set's items that can still do something (a next symbol to scan or wait on), plus
  // whether the input is accepted; completed items have already propagated. The other blocks: for each
  // (origin set, rule) an item can complete into, the items there waiting on that rule, numbered in
  // discovery order.
  std::vector<std::vector<uint32_t>> blocks(1);
  std::vector<std::pair<uint64_t, uint32_t>> memo;
  std::vector<uint32_t> b0 = {accepting() ? 1u : 0u};
  const uint32_t last = static_cast<uint32_t>(set_begin_.size() - 1);
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item& it = items_[i];
    Sym s;
    if (!next_sym(it, s)) continue;
    b0.push_back(it.alt);
    b0.push_back(it.dot);
    b0.push_back(it.origin == last ? 0xFFFFFFFFu
                                   : key_visit(it.origin, g_->flat_alts[it.alt].rule, blocks, memo));
  }
  blocks[0] = std::move(b0);
  std::vector<uint32_t> key;
  for (const auto& b : blocks) {
    key.push_back(static_cast<uint32_t>(b.size()));
    key.insert(key.end(), b.begin(), b.end());
  }
  return key;
}

}  // namespace gridq::grammar
