// GPTQ of the FP8 formats on the GPU (gptq.h fp8_gptq) and its quantizer hook
// (runtime::CudaBackendHooks::fp8_gptq): the factorization of gptq.cpp, then per 256-column block the slab
// steps (gptq_fp8.cu) and the lazy trailing update (gptq_core.cu).
#include <numeric>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/cuda/gptq/gptq_hook.h"

namespace gridq::cuda {
namespace {

// Every sub-table has 1 to 65535 entries (the indices are 16-bit).
Status check_entries(const std::vector<int>& entries) {
  if (entries.empty()) return err("gpu fp8 gptq: no sub-tables");
  for (int k : entries)
    if (k <= 0 || k > 65535) return err("gpu fp8 gptq: a sub-table of {} entries (1..65535)", k);
  return {};
}

Status check(const CbGptqBatch& j, const ScalarBook& book, const std::vector<double>& scale) {
  using gptq::kSB;
  if (j.R <= 0 || j.C <= 0 || j.C % kSB != 0 || j.M <= 0 || j.nH <= 0 || !j.W || !j.H)
    return err(
        "gpu fp8 gptq: batch [{} × {}, {}] with {} Hessians; rows > 0, in_features % 256 == 0, W and H "
        "on the device",
        j.M, j.R, j.C, j.nH);
  if (j.h_of.size() != size_t(j.M) || j.n_tokens.size() != size_t(j.nH))
    return err("gpu fp8 gptq: h_of has {} entries for {} matrices, n_tokens {} for {} Hessians",
               j.h_of.size(), j.M, j.n_tokens.size(), j.nH);
  for (int h : j.h_of)
    if (h < 0 || h >= j.nH) return err("gpu fp8 gptq: h_of names Hessian {} of {}", h, j.nH);
  const bool dyn = book.sub_dim == 1 && !book.bf16_decode, cb = book.sub_dim == 2 && book.bf16_decode;
  if (!dyn && !cb)
    return err(
        "gpu fp8 gptq: sub-vectors of {} ({} decode); the device encoder covers 1 (FP8_DYNAMIC) and 2 "
        "in BF16 (FP8-CB)",
        book.sub_dim, book.bf16_decode ? "BF16" : "exact");
  GRIDQ_RETURN_IF_ERROR(check_entries(book.entries));
  size_t n = 0;
  for (int k : book.entries) n += size_t(k) * book.sub_dim;
  if (book.t.size() != n)
    return err("gpu fp8 gptq: {} table values for {} sub-tables of {}-vectors", book.t.size(),
               book.entries.size(), book.sub_dim);
  if (scale.size() != size_t(j.M) * j.R)
    return err("gpu fp8 gptq: {} scales for {} rows", scale.size(), size_t(j.M) * j.R);
  return {};
}

}  // namespace

Expected<Fp8GptqResult> fp8_gptq(const CbGptqBatch& j, const ScalarBook& book,
                                 const std::vector<double>& scale, const CbGptqSettings& o, cudaStream_t s) {
  using gptq::kSB;
  GRIDQ_RETURN_IF_ERROR(check(j, book, scale));
  Fp8GptqResult out;
  DeviceBuffer U, identity;
  CbGptqResult fac;
  GRIDQ_RETURN_IF_ERROR(gptq_factor(j, o, s, U, identity, fac));
  out.identity = std::move(fac.identity);
  out.damp_used = std::move(fac.damp_used);
  const size_t rows = size_t(j.M) * j.R, n = rows * j.C, nidx = n / size_t(book.sub_dim);
  const int n_sub = static_cast<int>(book.entries.size());
  std::vector<int> off(n_sub, 0);
  for (int i = 1; i < n_sub; ++i) off[i] = off[i - 1] + book.entries[i - 1] * book.sub_dim;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer W, DeviceBuffer::alloc(n * 8, "gpu fp8 gptq weights (float64)"));
  GRIDQ_CUDA(gptq::raw_widen(j.W, static_cast<long long>(n), W.as<double>(), s));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer t, DeviceBuffer::alloc(book.t.size() * 8, "gpu fp8 gptq tables"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer meta,
                         DeviceBuffer::alloc(size_t(2 * n_sub + j.M) * 4, "gpu fp8 gptq index"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer sc, DeviceBuffer::alloc(rows * 8, "gpu fp8 gptq scales"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer Err, DeviceBuffer::alloc(rows * kSB * 8, "gpu fp8 gptq slab errors"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer idx, DeviceBuffer::alloc(nidx * 2, "gpu fp8 gptq indices"));
  GRIDQ_RETURN_IF_ERROR(t.upload(book.t.data(), book.t.size() * 8));
  GRIDQ_RETURN_IF_ERROR(meta.upload(off.data(), size_t(n_sub) * 4));
  GRIDQ_RETURN_IF_ERROR(meta.upload(book.entries.data(), size_t(n_sub) * 4, size_t(n_sub) * 4));
  GRIDQ_RETURN_IF_ERROR(meta.upload(j.h_of.data(), size_t(j.M) * 4, size_t(2 * n_sub) * 4));
  GRIDQ_RETURN_IF_ERROR(sc.upload(scale.data(), rows * 8));
  gptq::ScalarTables tab;
  tab.t = t.as<double>();
  tab.off = meta.as<int>();
  tab.entries = meta.as<int>() + n_sub;
  tab.n_sub = n_sub;
  tab.sub_dim = book.sub_dim;
  tab.bf16_decode = book.bf16_decode;
  const int* h_of = meta.as<int>() + 2 * n_sub;
  for (int b = 0; b < j.C / kSB; ++b) {
    GRIDQ_CUDA(gptq::raw_scalar_gptq_block(W.as<double>(), j.M, j.R, j.C, b, h_of, identity.as<uint8_t>(),
                                           U.as<double>(), tab, sc.as<double>(), Err.as<double>(),
                                           idx.as<uint16_t>(), s));
    GRIDQ_CUDA(gptq::raw_gptq_trailing(W.as<double>(), j.M, j.R, j.C, b, h_of, identity.as<uint8_t>(),
                                       U.as<double>(), Err.as<double>(), s));
  }
  out.idx.resize(nidx);
  GRIDQ_CUDA(cudaMemcpyAsync(out.idx.data(), idx.as<uint16_t>(), nidx * 2, cudaMemcpyDeviceToHost, s));
  GRIDQ_CUDA(cudaStreamSynchronize(s));
  return out;
}

Expected<runtime::Fp8GptqReply> fp8_gptq_host(const runtime::Fp8GptqRequest& r) {
  if (!r.W || !r.H || !r.scale || !r.tables || r.R <= 0 || r.C <= 0 || r.sub_dim <= 0)
    return err("gpu fp8 gptq: W, H, the scales and the tables are required, R, C > 0 (got [{}, {}])", r.R,
               r.C);
  GRIDQ_RETURN_IF_ERROR(check_entries(r.entries));  // before the tables' size is taken from them
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  const size_t RC = size_t(r.R) * r.C, CC = size_t(r.C) * r.C;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer W, DeviceBuffer::alloc(RC * 4, "gpu fp8 gptq input weights"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer H, DeviceBuffer::alloc(CC * 4, "gpu fp8 gptq Hessian"));
  GRIDQ_RETURN_IF_ERROR(W.upload(r.W, RC * 4));
  GRIDQ_RETURN_IF_ERROR(H.upload(r.H, CC * 4));
  const CbGptqBatch job = CbGptqBatch::one(r.R, r.C, W.as<float>(), H.as<float>(), nullptr, r.n_tokens);
  CbGptqSettings o;
  o.damp = r.damp;
  o.max_retries = r.max_retries;
  ScalarBook book;
  book.sub_dim = r.sub_dim;
  book.entries = r.entries;
  const size_t nt = size_t(std::accumulate(r.entries.begin(), r.entries.end(), 0LL)) * r.sub_dim;
  book.t.assign(r.tables, r.tables + nt);
  book.bf16_decode = r.bf16_decode;
  const std::vector<double> scale(r.scale, r.scale + r.R);
  GRIDQ_ASSIGN_OR_RETURN(Fp8GptqResult res, fp8_gptq(job, book, scale, o, stream.get()));
  runtime::Fp8GptqReply out;
  out.idx = std::move(res.idx);
  out.identity = res.identity[0] != 0;
  out.damp_used = res.damp_used[0];
  return out;
}

}  // namespace gridq::cuda
