// JSON Schema (draft 2020-12, with the draft-04/07 spellings seen in the wild) compiled to a Grammar. What
// is supported is listed in docs/grammar.md; any other keyword, format or $ref form is a compile error that
// names it. A schema that admits no instance at all (false, empty type intersection, min > max) is an error.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/compile.h"
#include "grammar/grammar.h"

namespace gridq::grammar {

// Compiles `schema` into `b` and returns the symbol of its instances.
Expected<Sym> compile_json_schema(Builder& b, const nlohmann::ordered_json& schema,
                                  const CompileOptions& opt);
// Any JSON object (response_format json_object).
Sym compile_json_any_object(Builder& b, const CompileOptions& opt);

}  // namespace gridq::grammar
