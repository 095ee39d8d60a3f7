// TokenMasker's whole-subtree bits (token_mask.h, spans_): bit ranges over trie_all positions during a
// walk, turned into token ids once per mask.
#include <algorithm>

#include "grammar/token_mask.h"

namespace gridq::grammar {

void TokenMasker::allow_span(const TokenVocab::Trie& t, uint32_t begin, uint32_t end,
                             std::vector<uint64_t>& mask) {
  if (&t != &vocab_->trie_all()) {
    for (uint32_t k = begin; k < end; ++k) {
      int32_t id = t.ids[k];
      mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
    return;
  }
  spans_used_ = true;
  auto bits = [](uint32_t from, uint32_t to) {  // bits [from, to) of one word, 0 <= from < to <= 64
    return (to == 64 ? ~uint64_t{0} : (uint64_t{1} << to) - 1) & ~((uint64_t{1} << from) - 1);
  };
  const uint32_t w0 = begin >> 6, w1 = (end - 1) >> 6;
  if (w0 == w1) {
    spans_[w0] |= bits(begin & 63, ((end - 1) & 63) + 1);
    return;
  }
  spans_[w0] |= bits(begin & 63, 64);
  for (uint32_t w = w0 + 1; w < w1; ++w) spans_[w] = ~uint64_t{0};
  spans_[w1] |= bits(0, ((end - 1) & 63) + 1);
}

void TokenMasker::allow_viable(uint32_t begin, uint32_t end) {
  spans_used_ = true;
  const std::vector<uint64_t>& v = vocab_->viable_by_position();
  for (uint32_t k = begin; k < end;) {
    const uint32_t w = k >> 6, lo = k & 63, hi = std::min<uint32_t>(64, lo + (end - k));
    const uint64_t bits = (hi == 64 ? ~uint64_t{0} : (uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1);
    spans_[w] |= v[w] & bits;
    k += hi - lo;
  }
}

void TokenMasker::flush_spans(std::vector<uint64_t>& mask) {
  const std::vector<int32_t>& ids = vocab_->trie_all().ids;
  const size_t n = ids.size();
  if (!spans_used_) return;
  spans_used_ = false;
  size_t set = 0;
  for (uint64_t w : spans_) set += static_cast<size_t>(__builtin_popcountll(w));
  struct Clear {  // left all zero for the next mask
    std::vector<uint64_t>& s;
    ~Clear() { std::fill(s.begin(), s.end(), 0); }
  } clear{spans_};
  if (set * 2 < n) {
    for (size_t w = 0; w < spans_.size(); ++w)
      for (uint64_t x = spans_[w]; x; x &= x - 1) {
        int32_t id = ids[w * 64 + static_cast<size_t>(__builtin_ctzll(x))];
        mask[id >> 6] |= uint64_t{1} << (id & 63);
      }
    return;
  }
  // Most positions set: every token, less those left out.
  std::vector<uint64_t> on = vocab_->all_bits();
  for (size_t w = 0; w < spans_.size(); ++w) {
    uint64_t x = ~spans_[w];
    if (w + 1 == spans_.size() && n % 64) x &= (uint64_t{1} << (n % 64)) - 1;
    for (; x; x &= x - 1) {
      int32_t id = ids[w * 64 + static_cast<size_t>(__builtin_ctzll(x))];
      on[id >> 6] &= ~(uint64_t{1} << (id & 63));
    }
  }
  for (size_t w = 0; w < mask.size(); ++w) mask[w] |= on[w];
}

}  // namespace gridq::grammar
