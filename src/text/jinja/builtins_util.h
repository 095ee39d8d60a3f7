// The helpers the Jinja builtins share (builtins.cpp: objects, methods, tests, globals; filters.cpp:
// filters): argument access and Python's string semantics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/jinja/value.h"

namespace gridq::text::jinja::detail {

inline const Value kUndef;
inline const Value kNone = Value::none();

// Argument access: positional index `i` or keyword `name`, else `dflt`.
const Value& arg(const CallArgs& a, size_t i, const char* name, const Value& dflt);
bool fits_int64(double d);
std::string ascii_lower(std::string s);
std::string ascii_upper(std::string s);
bool is_alpha(char c);
std::vector<char32_t> cps(const std::string& s);
// Python str.strip family. which: 1 left, 2 right, 3 both. chars: undefined/none = whitespace.
std::string py_strip(const std::string& s, const Value& chars, int which);
Expected<List> py_split(const std::string& s, const Value& sep, int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& a, const std::string& b, int64_t count);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
bool starts_or_ends(const std::string& s, const Value& what, bool start, bool* ok);
Expected<int64_t> to_int_arg(const Value& v, const char* what);
Expected<Value> attr_path(const Value& v, const std::string& path);
std::string html_escape(const std::string& s);
Value sort_key(const Value& v, bool case_sensitive);
Expected<List> sorted(List items, bool reverse, bool case_sensitive, const Value& attribute);
CallArgs rest_args(const CallArgs& a, size_t from);

}  // namespace gridq::text::jinja::detail
