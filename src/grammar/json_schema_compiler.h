// Internal to the JSON Schema front end: one compiler object per compile, split over json_schema*.cpp.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/compile.h"
#include "grammar/grammar.h"

namespace gridq::grammar {

using ojson = nlohmann::ordered_json;

class SchemaCompiler {
 public:
  SchemaCompiler(Builder& b, const ojson& root, const CompileOptions& opt) : b_(b), root_(root), opt_(opt) {}

  Expected<Seq> value(const ojson& schema, size_t depth);
  Sym any_value();
  Sym any_object();
  Seq ws();

  // json_schema_merge.cpp
  // The schema of `$ref` (a local JSON pointer), or an error naming the unsupported form.
  Expected<const ojson*> resolve_ref(const std::string& ref) const;
  // allOf (and $ref with siblings) folded into one schema where the keywords combine.
  Expected<ojson> merge(const ojson& a, const ojson& b, size_t depth) const;
  // `s` with its own $ref (if any) replaced by the target merged with the siblings, one level.
  Expected<ojson> inline_ref(const ojson& s, size_t depth) const;

  // json_schema_types.cpp
  Expected<Seq> string_type(const ojson& s);
  Expected<Seq> number_type(const ojson& s, bool integer);
  Expected<Seq> object_type(const ojson& s, size_t depth);
  Expected<Seq> array_type(const ojson& s, size_t depth);
  Expected<Seq> format_body(const std::string& format);

 private:
  Expected<Seq> value_inner(const ojson& s, size_t depth);
  Expected<Seq> typed(const ojson& s, const std::string& type, size_t depth);
  Expected<Seq> enum_values(const ojson& s, std::vector<ojson> values, size_t depth);
  Expected<Seq> one_or_any_of(const ojson& s, const char* key, size_t depth);
  Sym json_string_sym();
  Sym any_number();
  Sym key_not_in(const std::vector<std::string>& names);

  Builder& b_;
  const ojson& root_;
  CompileOptions opt_;
  std::map<std::string, uint32_t> ref_rules_;
  std::optional<Sym> any_value_, any_object_, any_string_, any_number_, ws_;
};

// Keywords the front end knows; json_schema.cpp rejects any other one.
bool is_annotation_keyword(const std::string& k);
bool is_supported_keyword(const std::string& k);
// The JSON types a schema can produce, from `type` or inferred from type-specific keywords; empty: any.
std::set<std::string> schema_types(const ojson& s);
// No value can match both schemas (by type, or by a required const/enum discriminator property).
bool disjoint(const ojson& a, const std::set<std::string>& ta, const ojson& b,
              const std::set<std::string>& tb);

}  // namespace gridq::grammar
