// The generation fields every request shares (GenParams) and /v1/completions' own (the prompt, echo,
// best_of), checked as OpenAI's schema and vLLM's extensions define them.
#include <fmt/format.h>

#include "serve/openai_fields.h"

namespace gridq::serve {

namespace fields {

// The sampling ranges are runtime/sampling_limits.h's, the table `gridq generate`/`chat` check their flags
// against, so the CLI and the server refuse the same values.
std::optional<ApiError> parse_gen(const ojson& b, const Limits& lim, bool chat, GenParams& g) {
  std::optional<int64_t> i;
  std::optional<double> d;
  // max_completion_tokens wins over the deprecated max_tokens when both are given.
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (!chat && std::string_view(k) == "max_completion_tokens") continue;
    i.reset();
    // Completions take 0 too, for prompt scoring with echo (checked with echo in parse_completion_request).
    GQ_TRY(get_int(b, k, chat ? 1 : 0, kInt32Max, i));
    if (i) g.max_tokens = i;
  }
  GQ_TRY(get_num(b, runtime::kTemperatureRange, d));
  if (d) g.sampling.temperature = static_cast<float>(*d);
  d.reset();
  GQ_TRY(get_num(b, runtime::kTopPRange, d));
  if (d) g.sampling.top_p = static_cast<float>(*d);
  i.reset();
  GQ_TRY(get_int(b, "top_k", runtime::kTopKMin, kInt32Max, i));
  if (i) g.sampling.top_k = static_cast<int32_t>(*i);
  d.reset();
  GQ_TRY(get_num(b, runtime::kMinPRange, d));
  if (d) g.sampling.min_p = static_cast<float>(*d);
  i.reset();
  GQ_TRY(get_int(b, "n", 1, 16, i));
  if (i) g.n = static_cast<int>(*i);
  d.reset();
  GQ_TRY(get_num(b, runtime::kPresencePenaltyRange, d));
  if (d) g.sampling.presence_penalty = static_cast<float>(*d);
  d.reset();
  GQ_TRY(get_num(b, runtime::kFrequencyPenaltyRange, d));
  if (d) g.sampling.frequency_penalty = static_cast<float>(*d);
  d.reset();
  GQ_TRY(get_num(b, runtime::kRepetitionPenaltyRange, d));
  if (d) g.sampling.repetition_penalty = static_cast<float>(*d);
  // The sampler takes fp32: a positive value that narrows to 0 would divide by zero.
  if (d && g.sampling.repetition_penalty <= 0.0f)
    return invalid("repetition_penalty", fmt::format("repetition_penalty {} is below the fp32 range", *d));
  i.reset();
  GQ_TRY(get_int(b, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), i));
  if (i) g.seed = i;
  i.reset();
  GQ_TRY(get_int(b, "min_tokens", 0, kInt32Max, i));
  if (i) g.min_tokens = *i;
  if (g.max_tokens && g.min_tokens > *g.max_tokens)
    return invalid("min_tokens", "min_tokens must not exceed max_tokens");
  GQ_TRY(get_bool(b, "ignore_eos", g.ignore_eos));
  GQ_TRY(get_bool(b, "skip_special_tokens", g.skip_special_tokens));
  GQ_TRY(get_bool(b, "include_stop_str_in_output", g.include_stop_str_in_output));
  GQ_TRY(get_bool(b, "allow_special_tokens", g.allow_special_tokens));

  if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
    if (it->is_string()) {
      if (it->get_ref<const std::string&>().empty()) return invalid("stop", "stop strings must be non-empty");
      g.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      if (it->size() > 16) return invalid("stop", "stop allows at most 16 strings");
      for (const auto& s : *it) {
        if (!s.is_string() || s.get_ref<const std::string&>().empty())
          return invalid("stop", "stop must be a string or a list of non-empty strings");
        g.stop.push_back(s.get<std::string>());
      }
    } else {
      return invalid("stop",
                     fmt::format("stop must be a string or a list of strings, got {}", type_name(*it)));
    }
  }
  if (auto it = b.find("stop_token_ids"); it != b.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > 1024)
      return invalid("stop_token_ids", "stop_token_ids must be a list of token ids");
    for (const auto& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= lim.vocab_size)
        return invalid("stop_token_ids",
                       fmt::format("stop_token_ids entries must be token ids in [0, {})", lim.vocab_size));
      g.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (auto it = b.find("logit_bias"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) return invalid("logit_bias", "logit_bias must be an object of token id -> bias");
    if (it->size() > 1024) return invalid("logit_bias", "logit_bias allows at most 1024 entries");
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      const std::string& k = kv.key();
      int64_t id = -1;
      bool digits = !k.empty() && k.size() <= 10;
      for (char c : k) digits = digits && c >= '0' && c <= '9';
      if (digits) id = std::stoll(k);
      if (!digits || id >= lim.vocab_size)
        return invalid("logit_bias",
                       fmt::format("logit_bias key \"{}\" is not a token id in [0, {})", k, lim.vocab_size));
      if (!kv.value().is_number() || kv.value().get<double>() < -100.0 || kv.value().get<double>() > 100.0)
        return invalid("logit_bias", "logit_bias values must be numbers in [-100, 100]");
      g.sampling.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(kv.value().get<double>());
    }
  }
  if (chat) {
    GQ_TRY(get_bool(b, "logprobs", g.logprobs));
    if (auto it = b.find("top_logprobs"); it != b.end() && !it->is_null()) {
      i.reset();
      GQ_TRY(get_int(b, "top_logprobs", 0, 20, i));
      if (!g.logprobs) return invalid("top_logprobs", "top_logprobs is only allowed when logprobs is true");
      g.top_logprobs = static_cast<int>(*i);
    }
  } else {
    if (auto it = b.find("logprobs"); it != b.end() && !it->is_null()) {
      i.reset();
      GQ_TRY(get_int(b, "logprobs", 0, 5, i));
      g.logprobs = true;
      g.top_logprobs = static_cast<int>(*i);
    }
  }
  GQ_TRY(parse_structured(b, g.grammar));
  GQ_TRY(get_bool(b, "stream", g.stream));
  if (auto it = b.find("stream_options"); it != b.end() && !it->is_null()) {
    if (!g.stream) return invalid("stream_options", "stream_options is only allowed when stream is true");
    if (!it->is_object()) return invalid("stream_options", "stream_options must be an object");
    if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean())
        return invalid("stream_options", "stream_options.include_usage must be a boolean");
      g.include_usage = u->get<bool>();
    }
  }
  return std::nullopt;
}

}  // namespace fields

using namespace fields;

std::variant<CompletionRequest, ApiError> parse_completion_request(const ojson& b, const Limits& lim) {
  if (!b.is_object()) return invalid("", "request body must be a JSON object");
  CompletionRequest r;
  GQ_TRY(get_model(b, r.model));
  auto it = b.find("prompt");
  if (it == b.end() || it->is_null()) return invalid("prompt", "prompt is required");
  auto ids_of = [&](const ojson& a, std::vector<int32_t>& out) -> std::optional<ApiError> {
    if (a.empty()) return invalid("prompt", "prompt token list must not be empty");
    for (const auto& t : a) {
      if (!t.is_number_integer()) return invalid("prompt", "prompt token ids must be integers");
      // Huge unsigned ids map to vocab_size so they fail the range check below.
      const bool huge = t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(kInt32Max);
      const int64_t v = huge ? static_cast<int64_t>(lim.vocab_size) : t.get<int64_t>();
      if (v < 0 || v >= lim.vocab_size)
        return invalid("prompt", fmt::format("prompt token id {} is out of vocabulary [0, {})", t.dump(),
                                             lim.vocab_size));
      out.push_back(static_cast<int32_t>(v));
    }
    return std::nullopt;
  };
  if (it->is_string()) {
    if (it->get_ref<const std::string&>().empty()) return invalid("prompt", "prompt must not be empty");
    r.prompts.emplace_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->empty()) return invalid("prompt", "prompt must not be empty");
    const auto& first = (*it)[0];
    if (first.is_number()) {  // one prompt of token ids: its length is checked against the context later
      std::vector<int32_t> ids;
      GQ_TRY(ids_of(*it, ids));
      r.prompts.emplace_back(std::move(ids));
    } else {
      if (it->size() > 64) return invalid("prompt", "at most 64 prompts per request");
      for (const auto& p : *it) {
        if (p.is_string()) {
          if (p.get_ref<const std::string&>().empty())
            return invalid("prompt", "prompt strings must not be empty");
          r.prompts.emplace_back(p.get<std::string>());
        } else if (p.is_array()) {
          std::vector<int32_t> ids;
          GQ_TRY(ids_of(p, ids));
          r.prompts.emplace_back(std::move(ids));
        } else {
          return invalid("prompt",
                         "prompt must be a string, a list of strings, token ids or lists of token ids");
        }
      }
    }
  } else {
    return invalid("prompt", "prompt must be a string, a list of strings, token ids or lists of token ids");
  }
  GQ_TRY(get_bool(b, "echo", r.echo));
  if (auto s = b.find("suffix"); s != b.end() && !s->is_null())
    return invalid("suffix", "suffix is not supported", "unsupported_parameter");
  GQ_TRY(parse_gen(b, lim, false, r.gen));
  // max_tokens 0 asks only for the echoed prompt and its logprobs (lm-evaluation-harness's loglikelihood
  // requests); without echo it would ask for nothing.
  if (r.gen.max_tokens && *r.gen.max_tokens == 0 && !r.echo)
    return invalid("max_tokens",
                   "max_tokens must be at least 1; 0 is allowed only with echo (prompt scoring)");
  if (auto bo = b.find("best_of"); bo != b.end() && !bo->is_null()) {
    std::optional<int64_t> v;
    GQ_TRY(get_int(b, "best_of", 1, 16, v));
    if (*v != r.gen.n)
      return invalid("best_of", "best_of other than n is not supported", "unsupported_parameter");
  }
  return r;
}

}  // namespace gridq::serve
