// Private to the request parsers (openai_protocol.cpp, openai_request.cpp, openai_chat_request.cpp): typed
// reads of one body field with the 400 the OpenAI schema implies, and the generation fields both
// endpoints share. Every reader returns the error or nullopt; GQ_TRY returns the first error.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "runtime/sampling_limits.h"
#include "serve/openai_protocol.h"

namespace gridq::serve::fields {

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// "a string", "an object", ... for messages naming what a field held instead.
const char* type_name(const ojson& v);

// Integer fields reject floats, bools and strings (T8). null means absent: the OpenAI schema marks every
// optional integer nullable and clients send it (LangChain's completions client sends "seed": null).
std::optional<ApiError> get_int(const ojson& b, const char* key, int64_t lo, int64_t hi,
                                std::optional<int64_t>& out);
// Number fields accept int or float; null means absent.
std::optional<ApiError> get_num(const ojson& b, const char* key, double lo, double hi, bool lo_open,
                                std::optional<double>& out);
// A sampling field in its runtime::SamplingRange (the request field is the range's name).
inline std::optional<ApiError> get_num(const ojson& b, const runtime::SamplingRange& r,
                                       std::optional<double>& out) {
  return get_num(b, r.name, r.lo, r.hi, r.lo_open, out);
}
std::optional<ApiError> get_bool(const ojson& b, const char* key, bool& out);
std::optional<ApiError> get_model(const ojson& b, std::string& model);

// The generation fields (GenParams) of a chat (`chat`) or completions request.
std::optional<ApiError> parse_gen(const ojson& b, const Limits& lim, bool chat, GenParams& g);

}  // namespace gridq::serve::fields

#define GQ_TRY(expr)                  \
  do {                                \
    if (auto _e = (expr)) return *_e; \
  } while (0)
