// The one token sampler. `gridq generate`/`chat` (runtime/generate.h) and the server's scheduler
// (serve/sampling.h maps a request onto it) both sample here, so the same seed, parameters and logits give
// the same tokens on every path; a device kernel is checked against this file.
//
// The algorithm, exactly (V = vocab size; all arithmetic in fp64; a "sum" is a sequential left-to-right sum
// in the order named):
//  1. Scores s[i] = (double)logits[i].
//  2. Penalties (skipped when repetition = 1, presence = 0 and frequency = 0). For every distinct id i that
//     occurs in prompt or generated: if repetition != 1, s[i] = s[i] > 0 ? s[i] / r : s[i] * r (HF). Then
//     for every id with count c > 0, s[i] -= presence + frequency * c (OpenAI), where c counts occurrences
//     in `generated`, plus in `prompt` when penalties_count_prompt (generate; serve sets it false, as vLLM).
//  3. s[i] += logit_bias[i].  4. Banned ids: s[i] = -inf; with an allowed mask (structured outputs,
//     SamplePlan::allowed), every id outside it too.
//  5. temperature <= 0 (greedy): the token is the lowest i with s[i] == max s. No uniform is drawn.
//  6. Otherwise m = max s, T = temperature, and w[i] = exp((s[i] - m) / T), so the most likely id has w = 1
//     and banned ids w = 0. Candidates: ids sorted by w descending, ties by id ascending; keep the first n,
//     starting from n = V, filtered in this order (as HF and vLLM):
//       top_k > 0:  n = min(n, top_k);
//       top_p < 1:  K = sum of the first n w (sorted order); n = the smallest n' >= 1 whose sum of the
//                   first n' w (sorted order) is >= top_p * K;
//       min_p > 0:  n = max(1, how many of the first n have w >= min_p * w[first]).
//     Dropped ids get w = 0; W = sum of w over ids ascending; p[i] = w[i] / W (filtered_probs()).
//     If every score is -inf (everything banned) p is all 0 and the token is 0.
//  7. Exactly one u = Rng::uniform() per sampled token, drawn whatever the parameters: the token is the
//     lowest id i with u < sum_{j <= i} p[j] (ids ascending: inverse CDF); when rounding leaves u at or
//     above every partial sum, the highest id with p > 0 (pick_token()).
//  8. Reported logprobs are of the raw model distribution (not the processed scores, as OpenAI reports):
//     logprob(i) = logits[i] - lse, lse = mx + log(sum over ids ascending of exp(logits[i] - mx)),
//     mx = max logits; top_logprobs = the k highest raw logits, ties by id ascending, most likely first.
// Parameters are fp32 (what the CLI parses; the server narrows the request's JSON numbers) so a value
// written on either side is the same number; the arithmetic above widens them to fp64.
//
// Reproducing it on a device: xoshiro256** is integer-only, so a kernel can run the same generator bit for
// bit from the same seed (or take u from the host Rng, one per sequence per step). A parallel reduction
// sums in another order than step 6, and device exp is not glibc's, which moves each w and partial sum by a
// few ulps (~V * 2^-53 relative). So a device kernel is checked by feeding it the same scores and u and
// requiring the same kept set and p to ~1e-12 relative, and the same token whenever u is not within ~1e-12
// of a partial sum of step 7 (nor a top_p / min_p comparison within that of its threshold).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace gridq::runtime {

struct SamplingParams {
  float temperature = 1.0f;         // <= 0: greedy
  int32_t top_k = 0;                // <= 0: off (OpenAI's -1 and HF's 0 both mean off)
  float top_p = 1.0f;               // >= 1: off
  float min_p = 0.0f;               // <= 0: off
  float repetition_penalty = 1.0f;  // HF style, on every id of prompt and generated (step 2)
  float presence_penalty = 0.0f;    // OpenAI style: minus presence once per counted id
  float frequency_penalty = 0.0f;   // minus frequency * count
  // Whether presence/frequency also count the prompt's tokens: true for gridq generate/chat (their historic
  // behaviour); false is OpenAI/vLLM's "tokens generated so far", which serve sets.
  bool penalties_count_prompt = true;
  std::map<int32_t, float> logit_bias;  // id -> added to the score after the penalties (ids >= V ignored)
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
};

// xoshiro256** (Blackman & Vigna), state = the first four outputs of splitmix64 started at the seed.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();  // [0, 1): (next() >> 11) * 2^-53
 private:
  uint64_t s_[4];
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                        // step 8, of `token`
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, most likely first
  // Non-empty: the row held a NaN or +inf, or no finite logit (nonfinite_logits); nothing was sampled and
  // token is -1. The caller fails the request or command with this message.
  std::string bad_logits;
};

// Why a row of logits cannot be sampled: a NaN or +inf (a broken weight, an overflow; sampling would serve
// garbage or a token picked by NaN comparison order), or no finite value at all; nullopt for a usable row
// (-inf entries only rule tokens out).
std::optional<std::string> nonfinite_logits(std::span<const float> row);

// Steps 2-4 for one id, in the order they apply: s = rep ? (s > 0 ? s / r : s * r) : s; s -= sub; s += bias;
// then banned → -inf. Every other id keeps s = logits[i].
struct ScoreEdit {
  int32_t id = 0;
  bool rep = false, banned = false;
  double sub = 0.0, bias = 0.0;
};

// One token's sampling, planned before its logits exist, so that it can run where the logits are (a device
// kernel, runtime/cuda/kernels/sample.cu) exactly as sample() runs it on the host: the per-id edits of steps
// 2-4 (ids ascending), the parameters of steps 5-6, and step 7's uniform (drawn by plan() iff not greedy).
struct SamplePlan {
  bool greedy = true;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition = 1.0;
  int32_t top_k = 0;
  std::vector<ScoreEdit> edits;
  // Step 4's allowed mask, set by the server for a constrained choice (serve/constraint.h); empty: every id.
  // Bit (i & 63) of word i >> 6 set: id i may be chosen; an id past the mask's end may not. A bitmask, not
  // an id list, because a grammar's mask is a walk result over the whole vocabulary (V / 8 bytes either
  // way at worst); the CUDA backend samples rows that carry one on the host (cuda/sampling.cpp).
  std::vector<uint64_t> allowed;
  double u = 0.0;
  int top_logprobs = 0;  // step 8 alternatives wanted (0: only the token's own logprob)
};

// The edits of steps 2-4 for a vocabulary of V ids (ids >= V ignored).
std::vector<ScoreEdit> score_edits(size_t V, std::span<const int32_t> prompt,
                                   std::span<const int32_t> generated, std::span<const int32_t> banned,
                                   const SamplingParams& p);
// Applies edits to scores s[V] (steps 2-4); `repetition` is the plan's.
void apply_edits(std::span<double> s, std::span<const ScoreEdit> edits, double repetition);
// Step 4's allowed mask (SamplePlan::allowed, non-empty): every id outside it gets s = -inf.
void apply_allowed(std::span<double> s, std::span<const uint64_t> allowed);
// Step 8 into `out` for out.token: its logprob and the k most likely raw logits.
void add_logprobs(std::span<const float> logits, int k, SampledToken& out);

// Step 2 in place on fp64 scores.
void apply_penalties(std::span<double> scores, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, const SamplingParams& p);
// Steps 1-4: the scores the filters see.
std::vector<double> sampling_scores(std::span<const float> logits, std::span<const int32_t> prompt,
                                    std::span<const int32_t> generated, std::span<const int32_t> banned,
                                    const SamplingParams& p);
// Step 6: p over the vocabulary (filtered ids exactly 0; all 0 when every score is -inf).
std::vector<double> filtered_probs(std::span<const double> scores, const SamplingParams& p);
// Step 7: the token `u` picks from `probs`.
int32_t pick_token(std::span<const double> probs, double u);

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(std::move(p)), rng_(p_.seed) {}
  // `logits` [vocab] as the model returned them; `prompt` and `generated` feed the penalties; `banned` ids
  // are never chosen (the server's min_tokens); `top_logprobs` alternatives are reported (0: none).
  SampledToken sample(std::span<const float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> generated, std::span<const int32_t> banned = {},
                      int top_logprobs = 0);
  // sample() in two halves: plan() draws the uniform (when not greedy) and lists the edits; run() is steps
  // 1-8 on the host. sample(l, ...) == run(plan(l.size(), ...), l).
  SamplePlan plan(size_t V, std::span<const int32_t> prompt, std::span<const int32_t> generated,
                  std::span<const int32_t> banned = {}, int top_logprobs = 0);
  static SampledToken run(const SamplePlan& plan, std::span<const float> logits);
  bool is_stop_token(int32_t id) const;
  // If `text` (the full generated text so far) contains a stop string, returns the length of `text` to keep
  // (up to the earliest stop string, which is excluded); otherwise -1.
  int64_t stop_string_cut(const std::string& text) const;
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  Rng rng_;
};

// Sampler::run for each row r of logits [plans.size(), V] with plans[r]; a null plan gives token -1 (the
// host half of Engine::forward_sampled and of the server's engines).
std::vector<SampledToken> sample_rows(std::span<const float> logits, size_t V,
                                      std::span<const SamplePlan* const> plans);

// Lowest index of the maximum (greedy's tie rule).
int32_t argmax(std::span<const float> logits);
int32_t argmax(std::span<const double> scores);

}  // namespace gridq::runtime
