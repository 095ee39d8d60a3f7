// Type-specific schema lowering: strings (length, pattern, format), numbers (integer ranges), objects
// (declared order, optional properties, extra keys), arrays (prefix items, counts).
#include <cmath>

#include "grammar/codepoints.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/regex.h"

namespace gridq::grammar {
namespace {

// Dates that Python's date.fromisoformat accepts: years 0001-9999, month lengths, 29 Feb in leap years.
constexpr const char* kDate =
    "(?:(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3["
    "01])|"
    "(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|"
    "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
constexpr const char* kTime =
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";

std::string format_regex(const std::string& f) {
  if (f == "date") return kDate;
  if (f == "time") return kTime;
  if (f == "date-time") return std::string(kDate) + "T" + kTime;
  if (f == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (f == "ipv4")
    return "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-"
           "9])";
  if (f == "email")
    return "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
           "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
           "+";
  if (f == "uri") return "[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+";
  return {};
}

bool as_int64(const ojson& v, int64_t& out) {
  if (!v.is_number()) return false;
  double d = v.get<double>();
  if (!(std::fabs(d) < 9.0e15)) return false;
  if (v.is_number_integer())
    out = v.get<int64_t>();
  else if (v.is_number_unsigned())
    out = static_cast<int64_t>(v.get<uint64_t>());
  else
    out = static_cast<int64_t>(d);
  return true;
}

}  // namespace

Expected<Seq> SchemaCompiler::format_body(const std::string& format) {
  std::string re = format_regex(format);
  if (re.empty()) return err("unsupported JSON Schema format '{}'", format);
  RegexOptions ro;
  ro.json_string = true;
  GRIDQ_ASSIGN_OR_RETURN(Sym s, compile_regex(b_, re, ro, opt_.limits.max_depth));
  return Seq{s};
}

Expected<Seq> SchemaCompiler::string_type(const ojson& s) {
  bool has_len = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format")) {
    if (!s["format"].is_string()) return err("format must be a string");
    if (has_len || s.contains("pattern"))
      return err("format together with pattern/minLength/maxLength is not supported");
    GRIDQ_ASSIGN_OR_RETURN(Seq body, format_body(s["format"].get<std::string>()));
    return b_.lit("\"") + body + b_.lit("\"");
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return err("pattern must be a string");
    if (has_len) return err("pattern together with minLength/maxLength is not supported");
    RegexOptions ro;
    ro.json_string = true;
    ro.search = true;
    GRIDQ_ASSIGN_OR_RETURN(Sym body,
                           compile_regex(b_, s["pattern"].get<std::string>(), ro, opt_.limits.max_depth));
    return b_.lit("\"") + Seq{body} + b_.lit("\"");
  }
  if (!has_len) return Seq{json_string_sym()};
  int64_t mn = 0, mx = -1;
  if (s.contains("minLength") && (!as_int64(s["minLength"], mn) || mn < 0))
    return err("minLength must be a non-negative integer");
  if (s.contains("maxLength") && (!as_int64(s["maxLength"], mx) || mx < 0))
    return err("maxLength must be a non-negative integer");
  if (mx >= 0 && mn > mx) return err("minLength {} > maxLength {} (unsatisfiable)", mn, mx);
  if (mn > 100000 || mx > 100000) return err("minLength/maxLength over 100000 is not supported");
  Sym body = b_.rep({json_free_char(b_)}, static_cast<uint32_t>(mn),
                    mx < 0 ? kUnbounded : static_cast<uint32_t>(mx));
  b_.rule(body.index()).free_string_chars = true;  // token masks count the characters against the room
  return b_.lit("\"") + Seq{body} + b_.lit("\"");
}

namespace {

// Decimal numbers of equal length from a to b (a <= b), digit strings.
Seq same_len_range(Builder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return {};
  if (lo == hi) return b.lit(lo);
  Sym digit = b.cls(byte_range('0', '9'));
  auto digits = [&](size_t n) {
    return n == 0 ? Seq{} : Seq{b.rep({digit}, static_cast<uint32_t>(n), static_cast<uint32_t>(n))};
  };
  size_t n = lo.size();
  if (lo[0] == hi[0]) return b.lit(lo.substr(0, 1)) + same_len_range(b, lo.substr(1), hi.substr(1));
  bool lo_zero = lo.find_first_not_of('0', 1) == std::string::npos;
  bool hi_nine = hi.find_first_not_of('9', 1) == std::string::npos;
  auto cls = [&](char x, char y) {
    return b.cls(byte_range(static_cast<uint8_t>(x), static_cast<uint8_t>(y)));
  };
  if (lo_zero && hi_nine) return Seq{cls(lo[0], hi[0])} + digits(n - 1);
  std::vector<Seq> alts;
  char a = lo[0], z = hi[0];
  if (lo_zero) {
    alts.push_back(Seq{cls(a, static_cast<char>(hi[0] - 1))} + digits(n - 1));
    alts.push_back(b.lit(hi.substr(0, 1)) + same_len_range(b, std::string(n - 1, '0'), hi.substr(1)));
    return Seq{b.alt(std::move(alts))};
  }
  alts.push_back(b.lit(lo.substr(0, 1)) + same_len_range(b, lo.substr(1), std::string(n - 1, '9')));
  if (hi_nine) {
    alts.push_back(Seq{cls(static_cast<char>(a + 1), z)} + digits(n - 1));
  } else {
    if (z - a >= 2)
      alts.push_back(Seq{cls(static_cast<char>(a + 1), static_cast<char>(z - 1))} + digits(n - 1));
    alts.push_back(b.lit(hi.substr(0, 1)) + same_len_range(b, std::string(n - 1, '0'), hi.substr(1)));
  }
  return Seq{b.alt(std::move(alts))};
}

// Non-negative integers in [lo, hi] (hi < 0: unbounded) without leading zeros.
Seq uint_range(Builder& b, int64_t lo, int64_t hi) {
  std::vector<Seq> alts;
  std::string ls = std::to_string(lo);
  size_t last = hi < 0 ? ls.size() : std::to_string(hi).size();
  for (size_t d = ls.size(); d <= last; ++d) {
    int64_t p = 1;
    for (size_t k = 1; k < d; ++k) p *= 10;
    int64_t a = std::max(lo, d == 1 ? int64_t{0} : p), z = p * 10 - 1;
    if (hi >= 0) z = std::min(z, hi);
    if (a > z) continue;
    alts.push_back(same_len_range(b, std::to_string(a), std::to_string(z)));
  }
  if (hi < 0) {
    Sym digit = b.cls(byte_range('0', '9'));
    alts.push_back(
        Seq{b.cls(byte_range('1', '9')), b.rep({digit}, static_cast<uint32_t>(ls.size()), kUnbounded)});
  }
  return Seq{b.alt(std::move(alts))};
}

}  // namespace

Expected<Seq> SchemaCompiler::number_type(const ojson& s, bool integer) {
  // Bounds as [lo, hi] with exclusive flags; draft-04 spells exclusiveMinimum as a boolean on minimum.
  std::optional<double> lo, hi;
  bool lo_ex = false, hi_ex = false;
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(k)) continue;
    const ojson& v = s[k];
    std::string key = k;
    if (v.is_boolean()) {
      if (key == "exclusiveMinimum")
        lo_ex = v.get<bool>();
      else if (key == "exclusiveMaximum")
        hi_ex = v.get<bool>();
      else
        return err("{} must be a number", k);
      continue;
    }
    if (!v.is_number()) return err("{} must be a number", k);
    double d = v.get<double>();
    if (!(std::fabs(d) < 9.0e15)) return err("{} {} is out of the supported range", k, v.dump());
    bool is_min = key == "minimum" || key == "exclusiveMinimum";
    bool ex = key.rfind("exclusive", 0) == 0;
    auto& slot = is_min ? lo : hi;
    bool& slot_ex = is_min ? lo_ex : hi_ex;
    if (!slot || (is_min ? d > *slot : d < *slot) || (d == *slot && ex)) {
      slot = d;
      slot_ex = ex;
    }
  }
  if (!lo && !hi) {
    if (!integer) return Seq{any_number()};
    return Seq{
        b_.opt(b_.lit("-")),
        b_.alt({b_.lit("0"), Seq{b_.cls(byte_range('1', '9')), b_.star({b_.cls(byte_range('0', '9'))})}})};
  }
  if (integer) {
    int64_t L = INT64_MIN, H = INT64_MAX;
    if (lo) L = static_cast<int64_t>(lo_ex ? std::floor(*lo) + 1 : std::ceil(*lo));
    if (hi) H = static_cast<int64_t>(hi_ex ? std::ceil(*hi) - 1 : std::floor(*hi));
    if (L > H) return err("integer bounds admit no value (unsatisfiable)");
    std::vector<Seq> alts;
    if (H >= 0) alts.push_back(uint_range(b_, std::max<int64_t>(L, 0), H == INT64_MAX ? -1 : H));
    if (L < 0)
      alts.push_back(b_.lit("-") +
                     uint_range(b_, std::max<int64_t>(H < 0 ? -H : 1, 1), L == INT64_MIN ? -1 : -L));
    return Seq{b_.alt(std::move(alts))};
  }
  for (auto* v : {&lo, &hi})
    if (*v && std::floor(**v) != **v)
      return err("minimum/maximum with a fraction on type number is not supported");
  if (lo && hi && (*lo > *hi || (*lo == *hi && (lo_ex || hi_ex))))
    return err("number bounds admit no value (unsatisfiable)");
  // Magnitude k.f over a side with integer bounds A <= x <= B: whole parts strictly inside take any
  // fraction, k == A needs a nonzero one if A is exclusive, k == B only a zero one (no exponents here).
  Sym digit = b_.cls(byte_range('0', '9'));
  Sym any_frac = b_.opt(b_.lit(".") + Seq{b_.rep({digit}, 1, kUnbounded)});
  Sym zero_frac = b_.opt(b_.lit(".") + Seq{b_.rep(b_.lit("0"), 1, kUnbounded)});
  Sym nz_frac =
      b_.seq_rule(b_.lit(".") + Seq{b_.star({digit}), b_.cls(byte_range('1', '9')), b_.star({digit})});
  auto side = [&](int64_t A, bool a_ex, int64_t B, bool b_ex) -> Seq {  // B < 0: unbounded
    std::vector<Seq> alts;
    if (B >= 0 && A == B)
      return (a_ex || b_ex) ? Seq{b_.alt({})} : b_.lit(std::to_string(A)) + Seq{zero_frac};
    alts.push_back(b_.lit(std::to_string(A)) + Seq{a_ex ? nz_frac : any_frac});
    if (B < 0 || B - A >= 2) alts.push_back(uint_range(b_, A + 1, B < 0 ? -1 : B - 1) + Seq{any_frac});
    if (B >= 0 && !b_ex) alts.push_back(b_.lit(std::to_string(B)) + Seq{zero_frac});
    return Seq{b_.alt(std::move(alts))};
  };
  std::vector<Seq> alts;
  if (!hi || *hi > 0 || (*hi == 0 && !hi_ex)) {
    int64_t A = lo && *lo >= 0 ? static_cast<int64_t>(*lo) : 0;
    bool aex = lo && *lo >= 0 ? lo_ex : false;
    alts.push_back(side(A, aex, hi ? static_cast<int64_t>(*hi) : -1, hi_ex));
  }
  if (!lo || *lo < 0) {
    // -x with x in [max(-hi, 0), -lo]; x == 0 is left to the positive side ("-0" is not emitted).
    int64_t A = hi && *hi < 0 ? static_cast<int64_t>(-*hi) : 0;
    bool aex = hi && *hi < 0 ? hi_ex : true;
    alts.push_back(b_.lit("-") + side(A, aex, lo ? static_cast<int64_t>(-*lo) : -1, lo_ex));
  }
  return Seq{b_.alt(std::move(alts))};
}

}  // namespace gridq::grammar
