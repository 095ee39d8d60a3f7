// TokenVocab: the vocabulary's tries and the per-vocabulary precomputed sets of token_mask.h.
#include <algorithm>
#include <numeric>

#include "grammar/codepoints.h"
#include "grammar/token_mask.h"
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
  for (const Rule& r : (*g)->rules)
    if (r.free_char && r.char_class) {
      for (int c = 0; c < 128; ++c)
        if (r.char_ascii.test(c)) free_ascii_[c >> 6] |= uint64_t{1} << (c & 63);
      free_multi_ = r.char_all_multi;
    }
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
  all_bits_.assign(words(), 0);
  for (int32_t i : all) all_bits_[i >> 6] |= uint64_t{1} << (i & 63);
  not_free_ = build(bytes_, not_free);
  std::vector<int32_t> not_viable;
  for (int32_t i : all)
    if (!((viable_bits_[i >> 6] >> (i & 63)) & 1)) not_viable.push_back(i);
  not_viable_ = build(bytes_, not_viable);
  viable_pos_.assign((all_.ids.size() + 63) / 64, 0);
  for (size_t k = 0; k < all_.ids.size(); ++k) {
    const int32_t i = all_.ids[k];
    if ((viable_bits_[i >> 6] >> (i & 63)) & 1) viable_pos_[k >> 6] |= uint64_t{1} << (k & 63);
  }
  for (uint32_t c = not_viable_.nodes[0].first_child;
       c < not_viable_.nodes[0].first_child + not_viable_.nodes[0].n_children; ++c)
    not_viable_child_[not_viable_.nodes[c].byte] = c;
  mark_pure(all_);
  mark_below(all_);
  mark_pure(not_free_);
  mark_below(not_free_);
  mark_pure(not_viable_);
  mark_below(not_viable_);
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

namespace {

// Strict UTF-8 decoding (no overlongs, surrogates or code points past U+10FFFF, as lower_utf8 encodes):
// state 0 is a character boundary; -1 a malformed byte.
int utf8_step(int u, uint8_t b) {
  auto in = [b](int lo, int hi) { return b >= lo && b <= hi; };
  switch (u) {
    case 0:
      if (b < 0x80) return 0;
      if (in(0xC2, 0xDF)) return 1;
      if (b == 0xE0) return 4;
      if (in(0xE1, 0xEC) || in(0xEE, 0xEF)) return 2;
      if (b == 0xED) return 5;
      if (b == 0xF0) return 6;
      if (in(0xF1, 0xF3)) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1:
      return in(0x80, 0xBF) ? 0 : -1;
    case 2:
      return in(0x80, 0xBF) ? 1 : -1;
    case 3:
      return in(0x80, 0xBF) ? 2 : -1;
    case 4:
      return in(0xA0, 0xBF) ? 1 : -1;
    case 5:
      return in(0x80, 0x9F) ? 1 : -1;
    case 6:
      return in(0x90, 0xBF) ? 2 : -1;
    default:
      return in(0x80, 0x8F) ? 2 : -1;
  }
}

}  // namespace

void TokenVocab::mark_below(Trie& t) const {
  t.below.assign(t.nodes.size(), Below{});
  // ok[i] bit u: node i's edge byte and every token suffix below decode, entered in UTF-8 state u. Nodes are
  // breadth-first, so children come after their parent: one backward pass.
  std::vector<uint8_t> ok(t.nodes.size(), 0);
  for (size_t i = t.nodes.size(); i-- > 1;) {
    const Node& n = t.nodes[i];
    Below& bl = t.below[i];
    if (n.byte < 0x80)
      bl.ascii[n.byte >> 6] |= uint64_t{1} << (n.byte & 63);
    else
      bl.multi = true;
    uint8_t kids_ok = 0xFF;  // bit v: every child is fine entered in state v
    bool text = true;
    for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
      const Below& cb = t.below[c];
      bl.ascii[0] |= cb.ascii[0];
      bl.ascii[1] |= cb.ascii[1];
      bl.multi = bl.multi || cb.multi;
      bl.max_bytes = std::max(bl.max_bytes, cb.max_bytes);
      kids_ok &= ok[c];
      text = text && cb.utf8 && (cb.ascii[0] & ~free_ascii_[0]) == 0 &&
             (cb.ascii[1] & ~free_ascii_[1]) == 0 && (!cb.multi || free_multi_);
    }
    uint8_t bits = 0;
    for (int u = 0; u < 8; ++u) {
      int v = utf8_step(u, n.byte);
      if (v >= 0 && ((kids_ok >> v) & 1)) bits |= static_cast<uint8_t>(1u << u);
    }
    ok[i] = bits;
    bl.utf8 = bits & 1;
    bl.max_bytes += 1;  // this node's edge byte
    bl.text_after = text;
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

}  // namespace gridq::grammar
