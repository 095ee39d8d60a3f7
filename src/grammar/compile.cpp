#include "grammar/compile.h"

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/regex.h"

namespace gridq::grammar {
namespace {

// JSON nesting depth and the most keys in one object, counted before parsing: a deeply nested document is
// refused without recursing, and an object with very many keys without the ordered map's quadratic insert.
struct JsonShape {
  size_t depth = 0, keys = 0;
};

JsonShape json_shape(std::string_view t) {
  JsonShape out;
  std::vector<size_t> keys;  // [open containers]: ':' seen in each
  bool in_str = false;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (in_str) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      keys.push_back(0);
      out.depth = std::max(out.depth, keys.size());
    } else if ((c == '}' || c == ']') && !keys.empty()) {
      keys.pop_back();
    } else if (c == ':' && !keys.empty()) {
      out.keys = std::max(out.keys, ++keys.back());
    }
  }
  return out;
}

Expected<ojson> parse_json(std::string_view text, const Limits& limits, const char* what) {
  // A schema's own nesting is about twice its subschema depth (properties, then the schema object).
  JsonShape sh = json_shape(text);
  if (sh.depth > 2 * limits.max_depth + 8)
    return err("{} nests {} levels deep (limit {})", what, sh.depth, 2 * limits.max_depth + 8);
  if (sh.keys > limits.max_object_keys)
    return err("{} has an object with {} keys (limit {})", what, sh.keys, limits.max_object_keys);
  try {
    return ojson::parse(text);
  } catch (const std::exception& e) {
    return err("{} is not valid JSON: {}", what, e.what());
  }
}

}  // namespace

Expected<InputKind> parse_input_kind(std::string_view name) {
  if (name == "json_schema" || name == "json") return InputKind::kJsonSchema;
  if (name == "json_object") return InputKind::kJsonObject;
  if (name == "regex") return InputKind::kRegex;
  if (name == "choice") return InputKind::kChoice;
  if (name == "gbnf" || name == "grammar") return InputKind::kGbnf;
  return err("unknown grammar kind '{}' (json_schema, json_object, regex, choice, gbnf)", name);
}

Expected<std::shared_ptr<const Grammar>> compile(InputKind kind, std::string_view text,
                                                 const CompileOptions& opt) {
  if (text.size() > opt.limits.max_input_bytes)
    return err("input is {} bytes, over the {} byte limit", text.size(), opt.limits.max_input_bytes);
  Builder b(opt.limits);
  switch (kind) {
    case InputKind::kJsonSchema: {
      GRIDQ_ASSIGN_OR_RETURN(ojson schema, parse_json(text, opt.limits, "schema"));
      GRIDQ_ASSIGN_OR_RETURN(Sym root, compile_json_schema(b, schema, opt));
      return b.finish(root);
    }
    case InputKind::kJsonObject:
      return b.finish(compile_json_any_object(b, opt));
    case InputKind::kRegex: {
      GRIDQ_ASSIGN_OR_RETURN(Sym root, compile_regex(b, text, RegexOptions{}, opt.limits.max_depth));
      return b.finish(root);
    }
    case InputKind::kChoice: {
      GRIDQ_ASSIGN_OR_RETURN(ojson list, parse_json(text, opt.limits, "choice list"));
      if (!list.is_array() || list.empty())
        return err("choice list must be a non-empty JSON array of strings");
      std::vector<Seq> alts;
      for (const ojson& c : list) {
        if (!c.is_string()) return err("choice list must contain only strings");
        alts.push_back(b.lit(c.get<std::string>()));
      }
      Sym root = b.alt(std::move(alts));
      return b.finish(root);
    }
    case InputKind::kGbnf: {
      GRIDQ_ASSIGN_OR_RETURN(Sym root, compile_gbnf(b, text, opt.limits.max_depth));
      return b.finish(root);
    }
  }
  return err("unknown grammar kind");
}

}  // namespace gridq::grammar
