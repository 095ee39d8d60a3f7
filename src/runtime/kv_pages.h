// The host side of paged KV (gpu-engine.md §1 "kv_pages"): a pool of fixed-size pages for the full-attention
// layers with reference counts, and the prefix cache over them. Backend-agnostic: the CPU backend stores its
// full-layer KV in these pages, the CUDA backend keeps its page table from them; neither needs a GPU to test.
//
// A page's life: free -> allocate() (refcount 1) -> [commit(): registered under the hash of its tokens] ->
// ref()/unref() by the sequences that hold it -> refcount 0: an unregistered page returns to the free list, a
// registered one becomes *cached*: still holding its KV, found by match(), evicted least recently used first
// when allocate() finds no free page. Cached pages count as free for admission (they can always be evicted).
//
// Prefix-cache key: hash(parent page's hash, the page's page_tokens token ids, salt), chained from the first
// page, so a page is found only after the whole prefix before it. The salt carries whatever else changes KV
// (the backend passes a hash of the model spec). A hash is a lookup key, never a proof: every entry keeps its
// token ids and its parent page (id and allocation generation), and match() compares both, so neither a
// 64-bit collision nor a recycled parent page can return another prefix's KV.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace gridq::runtime {

class PagePool {
 public:
  PagePool() = default;
  PagePool(int64_t pages, int page_tokens, uint64_t salt);

  int page_tokens() const { return page_tokens_; }
  int64_t total() const { return static_cast<int64_t>(pages_.size()); }
  int64_t used() const { return used_; }                                // refcount > 0
  int64_t cached() const { return static_cast<int64_t>(lru_.size()); }  // refcount 0, registered
  int64_t available() const { return total() - used_; }                 // free + cached (evictable)
  int refcount(int page) const { return pages_[static_cast<size_t>(page)].refs; }
  bool registered(int page) const { return pages_[static_cast<size_t>(page)].registered; }
  int64_t evictions() const { return evictions_; }

  // Adds `more` never-used pages (a pool that grows on demand: the CPU backend without a page budget).
  void grow(int64_t more);

  // Prefix caching off: commit() registers nothing and match() finds nothing (turning it off drops the
  // cache).
  void set_caching(bool on);
  bool caching() const { return caching_; }

  // A page with refcount 1: a never-used one first, else the least recently used cached page (its entry is
  // dropped). -1 when every page is referenced.
  int allocate();
  void ref(int page);
  void unref(int page);

  // The chain hash of a full page of `tokens` (page_tokens ids) after the page hashed `parent` (0: first
  // page).
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  // Registers `page` (full, its KV written) as the page after `parent_page` (-1: first page) holding
  // `tokens`; returns its chain hash. A page whose hash is already registered stays unregistered (the other
  // copy serves hits); so does every page while caching is off.
  uint64_t commit(int page, int parent_page, uint64_t parent_hash, std::span<const int32_t> tokens);
  // A sequence's pages [committed, ...) that its history (the tokens at positions [0, hist.size())) has
  // filled, committed in order, chaining from `chain`; returns the new committed count.
  size_t commit_filled(std::span<const int> pages, size_t committed, std::span<const int32_t> hist,
                       uint64_t& chain);
  // The longest chain of registered pages holding tokens[0, k·page_tokens), k <= max_pages; takes a
  // reference on each (a cached page becomes used). `last_hash` gets the chain hash of the last page found.
  std::vector<int> match(std::span<const int32_t> tokens, int64_t max_pages, uint64_t* last_hash);

 private:
  struct Page {
    int refs = 0;
    bool registered = false;
    uint64_t hash = 0;
    uint64_t gen = 0;  // allocations of this page so far (a child records its parent's)
    int parent = -1;
    uint64_t parent_gen = 0;
    std::vector<int32_t> tokens;
    std::list<int>::iterator lru_it;
  };
  void drop_entry(Page& p);

  int page_tokens_ = 16;
  uint64_t salt_ = 0;
  bool caching_ = true;
  std::vector<Page> pages_;
  std::vector<int> free_;  // never used or unregistered, refcount 0; allocate() pops the back
  std::list<int> lru_;     // cached pages, least recently released first
  std::unordered_map<uint64_t, int> by_hash_;
  int64_t used_ = 0, evictions_ = 0;
};

}  // namespace gridq::runtime
