// The ranges sampling values must lie in, one table for every front end: `gridq generate`/`chat` check their
// flags against it and the server's request parser uses the same bounds (OpenAI's ranges for the OpenAI
// fields, vLLM's for the extensions), so a value the server refuses with a 400 is refused at the CLI too.
#pragma once

#include <cstdint>

namespace gridq::runtime {

struct SamplingRange {
  const char* name;  // the request field; the CLI flag is --name with '-' for '_'
  double lo, hi;
  bool lo_open;  // (lo, hi] instead of [lo, hi]
};

inline constexpr SamplingRange kTemperatureRange{"temperature", 0.0, 2.0, false};
inline constexpr SamplingRange kTopPRange{"top_p", 0.0, 1.0, true};
inline constexpr SamplingRange kMinPRange{"min_p", 0.0, 1.0, false};
inline constexpr SamplingRange kPresencePenaltyRange{"presence_penalty", -2.0, 2.0, false};
inline constexpr SamplingRange kFrequencyPenaltyRange{"frequency_penalty", -2.0, 2.0, false};
inline constexpr SamplingRange kRepetitionPenaltyRange{"repetition_penalty", 0.0, 100.0, true};
// top_k: -1 (vLLM) and 0 both mean off; otherwise the k most likely tokens.
inline constexpr int64_t kTopKMin = -1;

}  // namespace gridq::runtime
