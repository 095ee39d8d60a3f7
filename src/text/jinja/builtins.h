// Jinja2 filters, tests, globals and the Python str/dict/list methods templates call.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "text/jinja/value.h"

namespace gridq::text::jinja {

// Byte offsets of each code point of `s`, plus s.size() at the end.
std::vector<size_t> cp_offsets(const std::string& s);
// Items a for loop visits: list items, dict keys, string characters; undefined: none.
Expected<List> iterate(const Value& v);
// obj.name: dict key (else undefined); error on undefined obj.
Expected<Value> get_attr(const Value& obj, const std::string& name);
// obj[key]: list/str index (negative from the end), dict key; undefined when missing.
Expected<Value> get_item(const Value& obj, const Value& key);
Expected<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

bool has_method(const Value& obj, const std::string& name);
Expected<Value> call_method(const Value& obj, const std::string& name, CallArgs& args);

Expected<Value> apply_filter(const std::string& name, const Value& subject, CallArgs& args);
Expected<bool> apply_test(const std::string& name, const Value& v, CallArgs& args);

// Globals available to every template: range, namespace, dict, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> make_globals();

// Python `%` string formatting with %s %r %d %i %f %%.
Expected<std::string> percent_format(const std::string& fmt, const Value& args);

}  // namespace gridq::text::jinja
