#define PCRE2_CODE_UNIT_WIDTH 8
#include "gridbook/matching.h"

#include <pcre2.h>

#include <cctype>
#include <map>
#include <set>

namespace gridq::gridbook {

namespace {

constexpr std::string_view kPrefixA = "model.language_model.";
constexpr std::string_view kPrefixB = "language_model.model.";

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Refuses regex constructs whose meaning in PCRE2 differs from Python's `re` (or that Python lacks), so that
// a pattern compiled here selects exactly the modules the producer's Python tooling selected.
Status check_python_compatible(std::string_view pat, std::string_view entry) {
  static constexpr std::string_view kEscapes = "abBdDfnrstwWAZx";
  for (size_t i = 0; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '\\') {
      if (i + 1 >= pat.size()) return err("pattern '{}': trailing backslash", entry);
      const char e = pat[i + 1];
      if (std::isalpha(static_cast<unsigned char>(e)) && kEscapes.find(e) == std::string_view::npos) {
        return err(
            "pattern '{}': escape \\{} is not compiled identically by PCRE2 and Python re (format.md §13)",
            entry, e);
      }
      ++i;
      continue;
    }
    if (c == '(' && i + 1 < pat.size() && pat[i + 1] == '*') {
      return err("pattern '{}': PCRE verb '(*' is not Python re syntax (format.md §13)", entry);
    }
    if (c == '(' && i + 1 < pat.size() && pat[i + 1] == '?') {
      const char k = i + 2 < pat.size() ? pat[i + 2] : '\0';
      const char k2 = i + 3 < pat.size() ? pat[i + 3] : '\0';
      const bool ok = k == ':' || k == '=' || k == '!' || k == '#' ||
                      (k == 'P' && (k2 == '<' || k2 == '=')) || k == 'i' || k == 'm' || k == 's' ||
                      k == 'x' || k == '-';
      if (!ok) {
        if (k == '<') {
          return err("pattern '{}': look-behind / '(?<' groups are refused (format.md §13)", entry);
        }
        return err(
            "pattern '{}': group '(?{}' is not compiled identically by PCRE2 and Python re (format.md §13)",
            entry, k);
      }
    }
    if (c == '[' && i + 1 < pat.size() && pat[i + 1] == ':') {
      return err("pattern '{}': POSIX class '[:' differs between PCRE2 and Python re (format.md §13)", entry);
    }
    if (c == '{' && i + 1 < pat.size() && pat[i + 1] == ',') {
      return err("pattern '{}': quantifier '{{,' differs between PCRE2 and Python re (format.md §13)", entry);
    }
  }
  return Status();
}

}  // namespace

std::string canonical_module_name(std::string_view name) {
  if (starts_with(name, kPrefixA)) return "model." + std::string(name.substr(kPrefixA.size()));
  if (starts_with(name, kPrefixB)) return "model." + std::string(name.substr(kPrefixB.size()));
  return std::string(name);
}

Expected<Pattern> Pattern::compile(std::string_view entry) {
  Pattern p;
  p.entry_ = std::string(entry);
  if (entry.empty()) return err("empty target/ignore entry");
  if (!starts_with(entry, "re:")) {
    p.literal_ = canonical_module_name(entry);
    return p;
  }
  const std::string_view pat = entry.substr(3);
  if (pat.empty()) return err("pattern '{}': empty regular expression", entry);
  GRIDQ_RETURN_IF_ERROR(check_python_compatible(pat, entry));
  int code_err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                   PCRE2_NEVER_BACKSLASH_C, &code_err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code_err, buf, sizeof(buf));
    return err("pattern '{}': does not compile at offset {}: {}", entry, static_cast<size_t>(err_off),
               reinterpret_cast<const char*>(buf));
  }
  p.code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
  return p;
}

bool Pattern::matches(std::string_view module_name) const {
  const std::string name = canonical_module_name(module_name);
  if (!code_) return name == literal_;
  auto* code = static_cast<pcre2_code*>(code_.get());
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  auto try_match = [&](std::string_view s) {
    // PCRE2_ANCHORED = Python re.match: the match must begin at 0 but need not reach the end.
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, PCRE2_ANCHORED, md,
                       nullptr) >= 0;
  };
  // The pattern cannot be canonicalised, so it may be written against either spelling of the name.
  const bool hit = try_match(name) || (name != module_name && try_match(module_name));
  pcre2_match_data_free(md);
  return hit;
}

std::optional<RoutedExpertName> parse_routed_expert(std::string_view module_name) {
  const std::string name = canonical_module_name(module_name);
  static constexpr std::string_view kMarker = ".experts.";
  const size_t pos = name.rfind(kMarker);
  if (pos == std::string::npos) return std::nullopt;
  RoutedExpertName r;
  r.experts_prefix = name.substr(0, pos + kMarker.size() - 1);
  std::string rest = name.substr(pos + kMarker.size());
  const size_t dot = rest.find('.');
  if (dot != std::string::npos) {
    const std::string idx = rest.substr(0, dot);
    if (idx.empty() || idx.size() > 9) return std::nullopt;
    for (char c : idx) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    }
    if (idx.size() > 1 && idx[0] == '0') return std::nullopt;
    r.expert = std::stoi(idx);
    rest = rest.substr(dot + 1);
  }
  if (rest != "gate_up_proj" && rest != "gate_proj" && rest != "up_proj" && rest != "down_proj")
    return std::nullopt;
  if (r.expert.has_value() && rest == "gate_up_proj") return std::nullopt;  // per-expert modules are split
  r.leaf = rest;
  return r;
}

std::optional<std::string> fused_set(std::string_view module_name) {
  const std::string name = canonical_module_name(module_name);
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string parent = name.substr(0, dot);
  const std::string leaf = name.substr(dot + 1);
  const bool attn = parent.size() >= 9 && parent.substr(parent.size() - 9) == "self_attn";
  if (attn && (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj")) return parent + ".qkv";
  if (!attn && (leaf == "gate_proj" || leaf == "up_proj")) return parent + ".gate_up";
  return std::nullopt;
}

std::string_view claim_kind_name(ClaimKind k) {
  switch (k) {
    case ClaimKind::kCodebook:
      return "codebook";
    case ClaimKind::kCompressedTensors:
      return "compressed-tensors";
    case ClaimKind::kIgnore:
      return "ignore";
  }
  return "?";
}

namespace {

std::string claimer_label(const std::vector<ClaimGroup>& groups, int group, const std::string& entry) {
  if (group < 0) return fmt::format("ignore entry '{}'", entry);
  return fmt::format("group '{}' target '{}'", groups[group].name, entry);
}

}  // namespace

Expected<std::vector<Claim>> claim_modules(const std::vector<ClaimGroup>& groups,
                                           const std::vector<Pattern>& ignore,
                                           const std::vector<std::string>& linear_modules,
                                           const std::vector<std::string>& other_modules) {
  // Two spellings of one module would let one config entry claim two different tensors sets.
  std::map<std::string, std::string> seen;
  for (const auto* list : {&linear_modules, &other_modules}) {
    for (const auto& m : *list) {
      auto [it, fresh] = seen.emplace(canonical_module_name(m), m);
      if (!fresh) {
        return err("modules '{}' and '{}' canonicalise to the same name '{}' (format.md §13)", it->second, m,
                   it->first);
      }
    }
  }
  // Hit counters per (group, entry); group -1 = ignore.
  std::map<std::pair<int, size_t>, int> hits;
  auto for_each_entry = [&](auto&& fn) {
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t t = 0; t < groups[g].targets.size(); ++t) fn(static_cast<int>(g), t, groups[g].targets[t]);
    }
    for (size_t t = 0; t < ignore.size(); ++t) fn(-1, t, ignore[t]);
  };

  std::vector<Claim> claims;
  claims.reserve(linear_modules.size());
  for (const auto& m : linear_modules) {
    std::vector<Claim> found;  // one per distinct claimer
    for_each_entry([&](int g, size_t t, const Pattern& p) {
      if (!p.matches(m)) return;
      ++hits[{g, t}];
      for (const auto& f : found) {
        if (f.group == g) return;
      }
      ClaimKind kind = g < 0 ? ClaimKind::kIgnore : groups[g].kind;
      found.push_back(Claim{kind, g, p.entry()});
    });
    if (found.empty()) {
      return err(
          "{}: Linear is not claimed by any group target or ignore entry (format.md §13: every Linear "
          "claimed exactly once)",
          m);
    }
    if (found.size() > 1) {
      return err("{}: claimed twice, by {} and by {} (format.md §13: every Linear claimed exactly once)", m,
                 claimer_label(groups, found[0].group, found[0].entry),
                 claimer_label(groups, found[1].group, found[1].entry));
    }
    claims.push_back(found[0]);
  }
  for (const auto& m : other_modules) {
    for_each_entry([&](int g, size_t t, const Pattern& p) {
      if (p.matches(m)) ++hits[{g, t}];
    });
    for (size_t g = 0; g < groups.size(); ++g) {
      for (const auto& p : groups[g].targets) {
        if (p.matches(m)) {
          return err("{}: not a Linear, but group '{}' target '{}' claims it (format.md §13)", m,
                     groups[g].name, p.entry());
        }
      }
    }
  }

  // Literal entries must name something: a literal parent, a misspelled namespace or a class name would
  // otherwise silently leave the module it meant to the next claimer.
  Status st;
  for_each_entry([&](int g, size_t t, const Pattern& p) {
    if (!st.ok() || p.is_regex() || hits[{g, t}] > 0) return;
    const std::string where =
        g < 0 ? std::string("ignore") : fmt::format("group '{}' targets", groups[g].name);
    const std::string canon = canonical_module_name(p.entry());
    const bool experts_parent = canon.size() > 8 && (canon.substr(canon.size() - 8) == ".experts" ||
                                                     canon.find(".experts.") != std::string::npos);
    if (g >= 0 && experts_parent && !parse_routed_expert(canon)) {
      st =
          err("{} entry '{}': a routed-expert target must be a dotted child '<…>.experts.<leaf>' with leaf "
              "gate_up_proj, gate_proj, up_proj or down_proj (format.md §13)",
              where, p.entry());
      return;
    }
    if (!p.entry().empty() && std::isupper(static_cast<unsigned char>(p.entry()[0])) &&
        p.entry().find('.') == std::string::npos) {
      st =
          err("{} entry '{}': class-name targets are not supported; use module names or re: patterns "
              "(format.md §13)",
              where, p.entry());
      return;
    }
    st =
        err("{} entry '{}' names no module of this checkpoint (a literal matches only the identical name, "
            "format.md §13)",
            where, p.entry());
  });
  GRIDQ_RETURN_IF_ERROR(st);

  // Modules fused at run time must agree, or the fused GEMM would need two formats.
  std::map<std::string, size_t> first_in_set;
  for (size_t i = 0; i < linear_modules.size(); ++i) {
    auto key = fused_set(linear_modules[i]);
    if (!key) continue;
    auto [it, fresh] = first_in_set.emplace(*key, i);
    if (fresh) continue;
    const Claim& a = claims[it->second];
    const Claim& b = claims[i];
    if (a.kind != b.kind || a.group != b.group) {
      return err(
          "{} and {} are fused at run time but claimed differently ({} vs {}) (format.md §13: fused "
          "shards must agree)",
          linear_modules[it->second], linear_modules[i], claimer_label(groups, a.group, a.entry),
          claimer_label(groups, b.group, b.entry));
    }
  }
  return claims;
}

}  // namespace gridq::gridbook
