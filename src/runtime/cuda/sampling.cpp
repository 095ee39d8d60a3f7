// forward_sampled's last part: a step's logits rows sampled on the device (kernels/sample.cu) from their
// plans, so a token per row crosses PCIe instead of a row of logits. Rows the device leaves to the host (a
// candidate set beyond its sort, status 1) and rows that want top_logprobs alternatives download their row
// and run the host half of the same algorithm (runtime::Sampler::run / add_logprobs). Rows whose plan carries
// an allowed mask (structured outputs) are not launched: they are sampled on the host from the start.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/forward.h"
#include "runtime/cuda/sample_args.h"

namespace gridq::cuda {

Status CudaBackend::sample_step(const Step& st, std::vector<runtime::SampledToken>& out) {
  const int V = spec_.vocab_size;
  const long long ld = dm_->lm_head.out_rows();
  Work& w = *work_;
  // Logit row i of the step (lm_head output row i) with plan st.plans[i]; rows without a plan are skipped.
  std::vector<detail::SampleRowArgs> rows;
  std::vector<detail::SampleEdit> edits;
  std::vector<int> launch_of(st.plans.size(), -1);
  unsigned kinds = 0;
  for (size_t i = 0; i < st.plans.size(); ++i) {
    const runtime::SamplePlan* p = st.plans[i];
    if (!p || !p->allowed.empty()) continue;
    launch_of[i] = static_cast<int>(rows.size());
    GRIDQ_RETURN_IF_ERROR(detail::append_sample_row(*p, static_cast<int>(i), V, rows, edits));
    kinds |= detail::plain_chunked(rows.back()) ? detail::kSampleChunked : detail::kSampleOther;
  }
  std::vector<detail::SampleResult> res(rows.size());
  if (!rows.empty()) {
    if (edits.size() * sizeof(detail::SampleEdit) > w.sample_edits.bytes()) {
      GRIDQ_CUDA(cudaStreamSynchronize(stream_));  // the old buffer may still be read
      GRIDQ_ASSIGN_OR_RETURN(
          w.sample_edits,
          DeviceBuffer::alloc(edits.size() * sizeof(detail::SampleEdit) * 2, "sampling edits"));
    }
    GRIDQ_CUDA(cudaMemcpyAsync(w.sample_rows.as(), rows.data(), rows.size() * sizeof(rows[0]),
                               cudaMemcpyHostToDevice, stream_));
    if (!edits.empty())
      GRIDQ_CUDA(cudaMemcpyAsync(w.sample_edits.as(), edits.data(), edits.size() * sizeof(edits[0]),
                                 cudaMemcpyHostToDevice, stream_));
    GRIDQ_CUDA(detail::raw_sample_rows(w.logits.as<float>(), ld, V, w.sample_rows.as<detail::SampleRowArgs>(),
                                       static_cast<int>(rows.size()), w.sample_edits.as<detail::SampleEdit>(),
                                       w.sample_scratch.as<double>(), w.sample_greedy.as(),
                                       w.sample_out.as<detail::SampleResult>(), kinds, stream_));
    GRIDQ_CUDA(cudaMemcpyAsync(res.data(), w.sample_out.as(), res.size() * sizeof(res[0]),
                               cudaMemcpyDeviceToHost, stream_));
  }
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  // Rows the host finishes (an allowed mask, a row left by the device, top_logprobs alternatives): their
  // logits rows downloaded first, then sampled in parallel (each row's result depends on its row and plan
  // alone; a flat 100k-vocabulary top-p row is ~3 ms of host time, and a batch-64 step can leave every row).
  // The device's token and logprob are written here; host_sample[i]: the host samples row i instead.
  const size_t first = out.size();
  out.resize(first + st.plans.size());
  std::vector<uint8_t> host_sample(st.plans.size(), 0);
  std::vector<size_t> host_rows;
  for (size_t i = 0; i < st.plans.size(); ++i) {
    const runtime::SamplePlan* p = st.plans[i];
    runtime::SampledToken& t = out[first + i];
    t.token = -1;
    if (!p) continue;
    if (launch_of[i] < 0) {
      host_sample[i] = 1;
    } else {
      const detail::SampleResult& r = res[static_cast<size_t>(launch_of[i])];
      host_sample[i] = r.status == 1 || r.status == 2;
      host_sampled_rows_ += r.status == 1 ? 1 : 0;
      if (!host_sample[i]) t.token = r.token, t.logprob = r.logprob;
    }
    if (host_sample[i] || p->top_logprobs > 0) host_rows.push_back(i);
  }
  std::vector<float> dl(host_rows.size() * static_cast<size_t>(V));
  for (size_t h = 0; h < host_rows.size(); ++h)
    GRIDQ_CUDA(cudaMemcpyAsync(dl.data() + h * static_cast<size_t>(V),
                               w.logits.as<float>() + static_cast<long long>(host_rows[h]) * ld,
                               static_cast<size_t>(V) * 4, cudaMemcpyDeviceToHost, stream_));
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
#pragma omp parallel for schedule(dynamic, 1) if (host_rows.size() > 1)
  for (size_t h = 0; h < host_rows.size(); ++h) {
    const size_t i = host_rows[h];
    const std::span<const float> row(dl.data() + h * static_cast<size_t>(V), static_cast<size_t>(V));
    runtime::SampledToken& t = out[first + i];
    if (host_sample[i])
      t = runtime::Sampler::run(*st.plans[i], row);
    else
      runtime::add_logprobs(row, st.plans[i]->top_logprobs, t);
  }
  return {};
}

}  // namespace gridq::cuda
