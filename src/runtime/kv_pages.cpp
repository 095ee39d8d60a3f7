#include "runtime/kv_pages.h"

#include <algorithm>
#include <cassert>

namespace gridq::runtime {

namespace {
// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

PagePool::PagePool(int64_t pages, int page_tokens, uint64_t salt)
    : page_tokens_(page_tokens), salt_(salt), pages_(static_cast<size_t>(std::max<int64_t>(0, pages))) {
  // Page 0 is handed out first (the back of the free list).
  for (int64_t p = total() - 1; p >= 0; --p) free_.push_back(static_cast<int>(p));
}

void PagePool::grow(int64_t more) {
  const int64_t old = total();
  pages_.resize(static_cast<size_t>(old + std::max<int64_t>(0, more)));
  // The new pages go under the free list's back, so pages already free are reused first.
  std::vector<int> fresh;
  for (int64_t p = total() - 1; p >= old; --p) fresh.push_back(static_cast<int>(p));
  free_.insert(free_.begin(), fresh.begin(), fresh.end());
}

void PagePool::set_caching(bool on) {
  caching_ = on;
  if (on) return;
  for (int p : std::vector<int>(lru_.begin(), lru_.end())) {
    drop_entry(pages_[static_cast<size_t>(p)]);
    free_.push_back(p);
  }
  for (auto& pg : pages_) drop_entry(pg);  // referenced pages stay held, but are no longer found
}

void PagePool::drop_entry(Page& p) {
  if (!p.registered) return;
  auto it = by_hash_.find(p.hash);
  if (it != by_hash_.end() && &pages_[static_cast<size_t>(it->second)] == &p) by_hash_.erase(it);
  if (p.refs == 0) lru_.erase(p.lru_it);
  p.registered = false;
  p.tokens.clear();
}

int PagePool::allocate() {
  int id = -1;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    drop_entry(pages_[static_cast<size_t>(id)]);
    ++evictions_;
  } else {
    return -1;
  }
  Page& p = pages_[static_cast<size_t>(id)];
  p.refs = 1;
  ++p.gen;
  p.parent = -1;
  ++used_;
  return id;
}

void PagePool::ref(int page) {
  Page& p = pages_[static_cast<size_t>(page)];
  if (p.refs++ == 0) {
    if (p.registered) lru_.erase(p.lru_it);
    ++used_;
  }
}

void PagePool::unref(int page) {
  Page& p = pages_[static_cast<size_t>(page)];
  assert(p.refs > 0);
  if (--p.refs > 0) return;
  --used_;
  if (p.registered) {
    p.lru_it = lru_.insert(lru_.end(), page);
  } else {
    free_.push_back(page);
  }
}

uint64_t PagePool::chain_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = mix(parent ^ mix(salt_));
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

size_t PagePool::commit_filled(std::span<const int> pages, size_t committed, std::span<const int32_t> hist,
                               uint64_t& chain) {
  const size_t P = static_cast<size_t>(page_tokens_);
  while (committed < pages.size() && (committed + 1) * P <= hist.size()) {
    const int parent = committed ? pages[committed - 1] : -1;
    chain = commit(pages[committed], parent, committed ? chain : 0, hist.subspan(committed * P, P));
    ++committed;
  }
  return committed;
}

uint64_t PagePool::commit(int page, int parent_page, uint64_t parent_hash, std::span<const int32_t> tokens) {
  const uint64_t h = chain_hash(parent_hash, tokens);
  Page& p = pages_[static_cast<size_t>(page)];
  if (!caching_ || p.registered || by_hash_.count(h)) return h;
  p.registered = true;
  p.hash = h;
  p.parent = parent_page;
  p.parent_gen = parent_page >= 0 ? pages_[static_cast<size_t>(parent_page)].gen : 0;
  p.tokens.assign(tokens.begin(), tokens.end());
  by_hash_[h] = page;
  if (p.refs == 0) p.lru_it = lru_.insert(lru_.end(), page);
  return h;
}

std::vector<int> PagePool::match(std::span<const int32_t> tokens, int64_t max_pages, uint64_t* last_hash) {
  std::vector<int> out;
  uint64_t h = 0;
  int parent = -1;
  uint64_t parent_gen = 0;
  const size_t P = static_cast<size_t>(page_tokens_);
  for (int64_t k = 0; caching_ && k < max_pages && (static_cast<size_t>(k) + 1) * P <= tokens.size(); ++k) {
    auto span = tokens.subspan(static_cast<size_t>(k) * P, P);
    const uint64_t next = chain_hash(h, span);
    auto it = by_hash_.find(next);
    if (it == by_hash_.end()) break;
    const Page& pg = pages_[static_cast<size_t>(it->second)];
    if (pg.parent != parent || pg.parent_gen != parent_gen ||
        !std::equal(span.begin(), span.end(), pg.tokens.begin(), pg.tokens.end()))
      break;
    out.push_back(it->second);
    h = next;
    parent = it->second;
    parent_gen = pg.gen;
  }
  for (int p : out) ref(p);
  if (last_hash) *last_hash = h;
  return out;
}

}  // namespace gridq::runtime
