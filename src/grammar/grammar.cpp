#include "grammar/grammar.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace gridq::grammar {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (unsigned b = lo; b <= hi; ++b) s.set(b);
  return s;
}

GrammarStats Grammar::stats() const {
  GrammarStats s;
  s.rules = rules.size();
  s.classes = classes.size();
  for (const Rule& r : rules) {
    s.alts += r.is_repeat ? 1 : r.alts.size();
    if (r.is_repeat) s.symbols += 1;
    for (const Seq& a : r.alts) s.symbols += a.size();
  }
  return s;
}

Builder::Builder(Limits limits) : g_(std::make_unique<Grammar>()), limits_(limits) {
  deadline_ = now_seconds() + limits_.max_seconds;
}

Sym Builder::cls(const ByteSet& s) {
  std::string key(32, '\0');
  for (int b = 0; b < 256; ++b)
    if (s.test(b)) key[b / 8] = static_cast<char>(key[b / 8] | (1 << (b % 8)));
  auto it = class_index_.find(key);
  if (it != class_index_.end()) return Sym::terminal(it->second);
  uint32_t id = static_cast<uint32_t>(g_->classes.size());
  g_->classes.push_back(s);
  class_index_.emplace(std::move(key), id);
  return Sym::terminal(id);
}

Seq Builder::lit(std::string_view bytes) {
  Seq out;
  out.reserve(bytes.size());
  for (unsigned char c : bytes) {
    ByteSet s;
    s.set(c);
    out.push_back(cls(s));
  }
  symbols_ += out.size();
  return out;
}

uint32_t Builder::new_rule(std::string name) {
  g_->rules.emplace_back();
  g_->rules.back().name = std::move(name);
  return static_cast<uint32_t>(g_->rules.size() - 1);
}

Sym Builder::alt(std::vector<Seq> alts, std::string name) {
  if (alts.size() == 1 && alts[0].size() == 1 && alts[0][0].is_rule() && name.empty()) return alts[0][0];
  uint32_t r = new_rule(std::move(name));
  for (const Seq& a : alts) symbols_ += a.size();
  g_->rules[r].alts = std::move(alts);
  g_->rules[r].defined = true;
  return Sym::rule(r);
}

Sym Builder::rep(Seq body, uint32_t min, uint32_t max) {
  Sym b = body.size() == 1 ? body[0] : alt({std::move(body)});
  uint32_t r = new_rule({});
  Rule& rule = g_->rules[r];
  rule.is_repeat = true;
  rule.body = b;
  rule.min = min;
  rule.max = max;
  rule.defined = true;
  symbols_ += 1;
  return Sym::rule(r);
}

uint32_t Builder::declare(std::string name) { return new_rule(std::move(name)); }

void Builder::define(uint32_t rule, std::vector<Seq> alts) {
  for (const Seq& a : alts) symbols_ += a.size();
  g_->rules[rule].alts = std::move(alts);
  g_->rules[rule].defined = true;
}

Status Builder::check_limits() const {
  if (symbols_ > limits_.max_symbols)
    return err("grammar too large: more than {} symbols (limit)", limits_.max_symbols);
  if (now_seconds() > deadline_) return err("compile time limit of {} s exceeded", limits_.max_seconds);
  return {};
}

Expected<std::shared_ptr<const Grammar>> Builder::finish(Sym root) {
  GRIDQ_RETURN_IF_ERROR(check_limits());
  // The root is wrapped so the matcher's accept test is one item: start ::= root.
  uint32_t start = new_rule("start");
  g_->rules[start].alts = {Seq{root}};
  g_->rules[start].defined = true;
  g_->root = start;
  for (const Rule& r : g_->rules)
    if (!r.defined) return err("rule '{}' is used but never defined", r.name);
  // Productive rules (those deriving some byte string) by fixed point; alternatives through unproductive
  // symbols are dropped, so every item the matcher holds can still be completed: a viable prefix is then
  // always a prefix of some sentence (what token masks rely on).
  {
    auto& rs = g_->rules;
    std::vector<bool> prod(rs.size(), false);
    auto sym_ok = [&](Sym s) { return !s.is_rule() || prod[s.index()]; };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < rs.size(); ++i) {
        if (prod[i]) continue;
        bool p = false;
        if (rs[i].is_repeat) {
          p = rs[i].min == 0 || sym_ok(rs[i].body);
        } else {
          for (const Seq& a : rs[i].alts) p = p || std::all_of(a.begin(), a.end(), sym_ok);
        }
        if (p) prod[i] = changed = true;
      }
    }
    if (!prod[start]) return err("the grammar admits no string at all (unsatisfiable)");
    for (Rule& r : rs) {
      if (r.is_repeat) {
        if (!sym_ok(r.body)) r.max = 0;
        continue;
      }
      std::erase_if(r.alts, [&](const Seq& a) { return !std::all_of(a.begin(), a.end(), sym_ok); });
    }
  }
  // Nullable rules by fixed point; the matcher advances over them at prediction time (Aycock-Horspool).
  auto& rules = g_->rules;
  std::vector<bool> nul(rules.size(), false);
  auto sym_nullable = [&](Sym s) { return s.is_rule() && nul[s.index()]; };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (nul[i]) continue;
      bool n = false;
      if (rules[i].is_repeat) {
        n = rules[i].min == 0 || sym_nullable(rules[i].body);
      } else {
        for (const Seq& a : rules[i].alts) {
          bool all = true;
          for (Sym s : a) all = all && sym_nullable(s);
          if (all) n = true;
        }
      }
      if (n) nul[i] = changed = true;
    }
  }
  g_->nullable = std::move(nul);
  for (const Rule& r : rules)
    if (r.free_char)
      for (const Seq& a : r.alts)
        if (!a.empty() && !a[0].is_rule()) g_->free_char_first |= g_->classes[a[0].index()];
  for (uint32_t r = 0; r < rules.size(); ++r) {
    g_->rule_first_alt.push_back(static_cast<uint32_t>(g_->flat_alts.size()));
    if (rules[r].is_repeat) {
      g_->flat_alts.push_back(FlatAlt{r, 0, 0, true});
      continue;
    }
    for (const Seq& a : rules[r].alts) {
      FlatAlt fa{r, static_cast<uint32_t>(g_->flat_syms.size()), 0, false};
      g_->flat_syms.insert(g_->flat_syms.end(), a.begin(), a.end());
      fa.end = static_cast<uint32_t>(g_->flat_syms.size());
      g_->flat_alts.push_back(fa);
    }
  }
  g_->rule_first_alt.push_back(static_cast<uint32_t>(g_->flat_alts.size()));
  return std::shared_ptr<const Grammar>(std::move(g_));
}

}  // namespace gridq::grammar
