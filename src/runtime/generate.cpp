#include "runtime/generate.h"

#include <chrono>

namespace gridq::runtime {

namespace {
// Length of the longest suffix of `text` that is a proper prefix of some stop string: that much text
// may still turn into a stop string and is held back.
size_t holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops)
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); n > best; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
  return best;
}
}  // namespace

Expected<GenerateResult> generate(Engine& engine, const text::Tokenizer& tok, std::span<const int32_t> prompt,
                                  int max_tokens, Sampler& sampler,
                                  const std::function<bool(const std::string&)>& on_text, bool skip_special) {
  using clock = std::chrono::steady_clock;
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  r.finish_reason = "length";
  if (prompt.empty()) return err("generate: empty prompt (encode at least one token)");
  const SeqId seq = engine.create_sequence();
  struct Free {
    Engine& e;
    SeqId s;
    ~Free() { e.free_sequence(s); }
  } guard{engine, seq};
  auto t0 = clock::now();
  const size_t V = static_cast<size_t>(engine.vocab_size());
  // Each token's plan (penalties over the prompt and the tokens so far, r.tokens) is made before the forward
  // that yields its logits, so the backend can sample where the logits are.
  SamplePlan plan = sampler.plan(V, prompt, r.tokens);
  GRIDQ_ASSIGN_OR_RETURN(SampledToken next, engine.prefill_sampled(seq, prompt, plan));
  r.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  text::StreamDecoder dec(tok, skip_special);
  std::string text;
  size_t emitted = 0;
  auto t1 = clock::now();
  bool stopped = false;
  for (int i = 0; i < max_tokens && !stopped; ++i) {
    if (!next.bad_logits.empty()) return err("generate: {}", next.bad_logits);
    const int32_t id = next.token;
    r.tokens.push_back(id);
    if (sampler.is_stop_token(id)) {
      r.finish_reason = "stop";
      break;
    }
    text += dec.push(id);
    const int64_t cut = sampler.stop_string_cut(text);
    size_t final_len = text.size() - holdback(text, sampler.params().stop_strings);
    if (cut >= 0) {
      final_len = static_cast<size_t>(cut);
      text.resize(final_len);
      r.finish_reason = "stop";
      stopped = true;
    }
    if (final_len > emitted) {
      if (on_text && !on_text(text.substr(emitted, final_len - emitted))) stopped = true;
      emitted = final_len;
    }
    if (stopped || i + 1 >= max_tokens) break;
    SeqId ids[1] = {seq};
    int32_t in[1] = {id};
    plan = sampler.plan(V, prompt, r.tokens);
    const SamplePlan* plans[1] = {&plan};
    GRIDQ_ASSIGN_OR_RETURN(auto step, engine.decode_sampled(ids, in, plans));
    next = step.at(0);
  }
  if (r.finish_reason != "stop" || !stopped) {
    text += dec.flush();
    if (text.size() > emitted && on_text) on_text(text.substr(emitted));
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  r.text = text;
  return r;
}

}  // namespace gridq::runtime
