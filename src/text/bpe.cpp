#include "text/bpe.h"

#include <queue>

#include "text/utf8.h"

namespace gridq::text {

using json = nlohmann::json;

Expected<BpeModel> BpeModel::from_json(const json& j) {
  if (!j.is_object() || j.value("type", std::string("BPE")) != "BPE")
    return err("tokenizer.json: model type '{}' is not supported (only BPE)",
               j.is_object() ? j.value("type", std::string("?")) : std::string("?"));
  if (j.value("byte_fallback", false))
    return err("tokenizer.json: BPE byte_fallback is not supported");
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0)
    return err("tokenizer.json: BPE dropout is not supported (it makes encoding random)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(k) && !j[k].is_null() && !j[k].get<std::string>().empty())
      return err("tokenizer.json: BPE {} is not supported", k);
  }
  BpeModel m;
  if (!j.contains("vocab") || !j["vocab"].is_object()) return err("tokenizer.json: model has no vocab object");
  int32_t max_id = -1;
  for (auto it = j["vocab"].begin(); it != j["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) return err("tokenizer.json: vocab entry '{}' is not an integer", it.key());
    const auto id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX) return err("tokenizer.json: vocab id {} of '{}' is out of range", id, it.key());
    m.vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (auto& [tok, id] : m.vocab_) m.id_to_token_[static_cast<size_t>(id)] = tok;
  if (j.contains("merges") && j["merges"].is_array()) {
    int32_t rank = 0;
    for (const auto& mj : j["merges"]) {
      std::string a, b;
      if (mj.is_string()) {
        const std::string s = mj.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          return err("tokenizer.json: merge '{}' is not two tokens separated by one space", s);
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
        a = mj[0].get<std::string>();
        b = mj[1].get<std::string>();
      } else {
        return err("tokenizer.json: merge #{} is neither \"a b\" nor [\"a\", \"b\"]", rank);
      }
      const int32_t ia = m.token_to_id(a), ib = m.token_to_id(b), in = m.token_to_id(a + b);
      if (ia < 0 || ib < 0 || in < 0)
        return err("tokenizer.json: merge #{} ('{}' + '{}') uses a token missing from the vocab", rank, a, b);
      m.merges_.emplace(key(ia, ib), Merge{rank, in});  // first occurrence wins, as in HF
      ++rank;
    }
  }
  if (j.contains("unk_token") && j["unk_token"].is_string()) {
    m.unk_id_ = m.token_to_id(j["unk_token"].get<std::string>());
    if (m.unk_id_ < 0) return err("tokenizer.json: unk_token '{}' is not in the vocab", j["unk_token"].get<std::string>());
  }
  m.fuse_unk_ = j.value("fuse_unk", false);
  m.ignore_merges_ = j.value("ignore_merges", false);
  return m;
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || id_to_token_[static_cast<size_t>(id)].empty())
    return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const int32_t id = token_to_id(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(piece.size());
  // Initial symbols: one per character; unknown characters become unk (fused if fuse_unk) or are dropped
  // when the model has no unk token, as HF does.
  size_t i = 0;
  while (i < piece.size()) {
    char32_t cp;
    int n = utf8_next(piece, i, &cp);
    if (n <= 0) n = 1;
    const int32_t id = token_to_id(piece.substr(i, static_cast<size_t>(n)));
    i += static_cast<size_t>(n);
    if (id >= 0) {
      syms.push_back({id, 0, 0, true});
    } else if (unk_id_ >= 0) {
      if (fuse_unk_ && !syms.empty() && syms.back().id == unk_id_) continue;
      syms.push_back({unk_id_, 0, 0, true});
    }
  }
  const int32_t n = static_cast<int32_t>(syms.size());
  for (int32_t k = 0; k < n; ++k) {
    syms[static_cast<size_t>(k)].prev = k - 1;
    syms[static_cast<size_t>(k)].next = k + 1 < n ? k + 1 : -1;
  }
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator<(const Cand& o) const {  // max-heap: lowest rank, then leftmost, on top
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Cand> q;
  auto push = [&](int32_t pos) {
    const Sym& s = syms[static_cast<size_t>(pos)];
    if (s.next < 0) return;
    auto it = merges_.find(key(s.id, syms[static_cast<size_t>(s.next)].id));
    if (it != merges_.end()) q.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    Sym& s = syms[static_cast<size_t>(c.pos)];
    if (!s.alive || s.next < 0) continue;
    Sym& r = syms[static_cast<size_t>(s.next)];
    auto it = merges_.find(key(s.id, r.id));
    if (it == merges_.end() || it->second.new_id != c.new_id) continue;  // stale entry
    s.id = c.new_id;
    r.alive = false;
    s.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.pos;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int32_t k = n > 0 ? 0 : -1; k >= 0; k = syms[static_cast<size_t>(k)].next) out.push_back(syms[static_cast<size_t>(k)].id);
}

}  // namespace gridq::text
