// Autoregressive generation for one sequence on an Engine: chunked prefill of the prompt, then decode
// steps with a Sampler, streaming UTF-8-safe text pieces (stop strings are held back until decided).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace gridq::runtime {

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (a stop token is included)
  std::string text;             // generated text (stop strings excluded)
  std::string finish_reason;    // "stop" (stop token or string) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;  // time of the decode steps (tokens after the first)
};

// on_text receives each piece of text as soon as it is final; returning false stops generation.
// When `skip_special` is set, special tokens are not rendered.
Expected<GenerateResult> generate(Engine& engine, const text::Tokenizer& tok, std::span<const int32_t> prompt,
                                  int max_tokens, Sampler& sampler,
                                  const std::function<bool(const std::string&)>& on_text = {},
                                  bool skip_special = false);

}  // namespace gridq::runtime
