// A runtime::SamplePlan as the device sampler reads it (kernels/sample_kernels.h): one row's parameters and
// its edits appended to the step's edit list. Host only; shared by the backend (sampling.cpp) and the tests.
#pragma once

#include <vector>

#include "core/status.h"
#include "runtime/cuda/kernels/sample_kernels.h"
#include "runtime/sampler.h"

namespace gridq::cuda::detail {

// Appends plan `p` for logits row `row` of a vocabulary of V ids; an edit outside it is an error.
inline Status append_sample_row(const runtime::SamplePlan& p, int row, int V,
                                std::vector<SampleRowArgs>& rows, std::vector<SampleEdit>& edits) {
  SampleRowArgs a;
  a.temperature = p.temperature, a.top_p = p.top_p, a.min_p = p.min_p, a.repetition = p.repetition;
  a.u = p.u, a.top_k = p.top_k, a.greedy = p.greedy ? 1 : 0, a.row = row;
  a.edit_begin = static_cast<int>(edits.size());
  for (const runtime::ScoreEdit& e : p.edits) {
    if (e.id < 0 || e.id >= V) return err("cuda sampler: edit of id {} outside the vocabulary {}", e.id, V);
    edits.push_back(SampleEdit{e.id, (e.rep ? 1 : 0) | (e.banned ? 2 : 0), e.sub, e.bias});
  }
  a.edit_end = static_cast<int>(edits.size());
  rows.push_back(a);
  return {};
}

}  // namespace gridq::cuda::detail
