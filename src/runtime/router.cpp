#include "runtime/router.h"

#include <cmath>
#include <vector>

namespace gridq::runtime {

void route_token(const float* z, int n_experts, const float* bias, int k, model::RouterScore score,
                 bool renormalize, int* idx, float* weight) {
  thread_local std::vector<float> s, sel;
  s.resize(static_cast<size_t>(n_experts));
  sel.resize(static_cast<size_t>(n_experts));
  if (score == model::RouterScore::kSigmoid) {
    for (int e = 0; e < n_experts; ++e) s[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-z[e]));
  } else {
    float mx = z[0];
    for (int e = 1; e < n_experts; ++e) mx = std::max(mx, z[e]);
    float sum = 0.0f;
    for (int e = 0; e < n_experts; ++e) sum += (s[static_cast<size_t>(e)] = std::exp(z[e] - mx));
    for (int e = 0; e < n_experts; ++e) s[static_cast<size_t>(e)] /= sum;
  }
  for (int e = 0; e < n_experts; ++e) sel[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + (bias ? bias[e] : 0.0f);
  // Partial selection sort: k is small (<= ~10).
  std::vector<bool> taken(static_cast<size_t>(n_experts), false);
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n_experts; ++e) {
      if (taken[static_cast<size_t>(e)]) continue;
      if (best < 0 || sel[static_cast<size_t>(e)] > sel[static_cast<size_t>(best)]) best = e;
    }
    taken[static_cast<size_t>(best)] = true;
    idx[j] = best;
    weight[j] = s[static_cast<size_t>(best)];
  }
  if (renormalize) {
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += weight[j];
    for (int j = 0; j < k; ++j) weight[j] /= sum;
  }
}

}  // namespace gridq::runtime
