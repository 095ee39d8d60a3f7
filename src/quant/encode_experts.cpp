// A layer's routed experts encoded on the GPU in chunks (`gridq quantize --device cuda`, pipeline.h
// encode_experts_on_device): the experts' gate/up matrices of one rung in batches sharing each expert's
// input statistics, then their down matrices, each batch one device call (cb_gptq_device.h
// encode_fp4_batch_on_device) and one for the kept candidates' output proxies; encode_tensor makes each
// matrix's choices among the batch's candidates, so the bytes and the records are those of the one-matrix
// path. The next batch's device call runs while the host chooses among the current one's candidates.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <regex>
#include <tuple>

#include "core/async.h"
#include "quant/cb_gptq_device.h"
#include "quant/hessian_factor.h"
#include "quant/pipeline.h"

namespace gridq::quant {

namespace {

// "layers.3.moe.experts.17.up" → 17 and "up"; false for other roles.
bool expert_role(const std::string& role, int* e, std::string* proj) {
  const size_t at = role.find(".moe.experts.");
  if (at == std::string::npos) return false;
  const size_t b = at + 13, dot = role.find('.', b);
  if (dot == std::string::npos) return false;
  *e = std::stoi(role.substr(b, dot - b));
  *proj = role.substr(dot + 1);
  return *proj == "gate" || *proj == "up" || *proj == "down";
}

// The tasks the device batch encodes: a rung the device encoder covers (device_encodes), by CB-GPTQ without
// act-order or by RTN.
bool batchable(const TensorTask& t, const gridbook::Codebook* cb) {
  if (!t.params.device_encode || t.budget || !cb || !device_encodes(cb->rung)) return false;
  return t.params.encoder == "rtn" || (t.params.encoder == "cb_gptq" && !t.params.cb_gptq.act_order);
}

struct Member {
  size_t task;  // index into tasks
  int expert;
  const InputStats* in;
};

// The device factorization names a failed input by its place in the batch ("H 3: ..."): which input that is,
// what its H looks like, and whether the CPU factorization (the same rule) fails on it too.
std::string describe_failed_input(const std::string& msg, const std::vector<const InputStats*>& inputs,
                                  const CbGptqOptions& opt) {
  std::smatch m;
  static const std::regex re(R"(^H (\d+):)");
  if (!std::regex_search(msg, m, re)) return "";
  const size_t h = std::stoul(m[1].str());
  if (h >= inputs.size()) return "";
  const InputStats& s = *inputs[h];
  const int C = s.cols;
  double max_asym = 0.0, max_corr = 0.0, min_diag = INFINITY, mean_diag = 0.0;
  for (int i = 0; i < C; ++i) {
    const double di = s.H[size_t(i) * C + i];
    min_diag = std::min(min_diag, di);
    mean_diag += di / C;
    for (int j = 0; j < i; ++j) {
      const double a = s.H[size_t(i) * C + j], b = s.H[size_t(j) * C + i];
      max_asym = std::max(max_asym, std::abs(a - b));
      const double dj = s.H[size_t(j) * C + j];
      if (di > 0 && dj > 0) max_corr = std::max(max_corr, std::abs(a) / std::sqrt(di * dj));
    }
  }
  auto cpu = inverse_cholesky_upper(s.H.data(), C, s.n, opt.damp, opt.max_retries, "H");
  return fmt::format(
      " [input '{}': n {}, mean diag {:.6g}, min diag {:.6g}, max |H_ij|/sqrt(H_ii H_jj) {:.6g}, max "
      "asymmetry {:.6g}; the CPU factorization {}]",
      s.name, s.n, mean_diag, min_diag, max_corr, max_asym,
      cpu.ok() ? fmt::format("succeeds (damping {})", cpu->damp_used) : "fails too");
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One device batch: members [M] (gate/up pairs share an input) with their source weights as fp32.
struct Batch {
  std::string label;  // progress: rung, experts, role, matrices
  std::vector<Member> mem;
  const gridbook::Codebook* cb = nullptr;
  std::vector<SourceWeight> src;
  std::vector<std::vector<float>> W32;
  std::vector<const InputStats*> inputs;  // in order of first use; matrix m reads inputs[h_of[m]]
  std::vector<int> h_of;
};

Status prepare(const std::vector<TensorTask>& tasks, const io::Checkpoint& ckpt, Batch& b) {
  const size_t M = b.mem.size();
  b.src.resize(M);
  b.W32.resize(M);
  std::vector<Status> bad(M);
  for (size_t m = 0; m < M; ++m) {
    GRIDQ_ASSIGN_OR_RETURN(b.src[m], source_weight(ckpt, tasks[b.mem[m].task].name));
    if (b.src[m].shape.size() != 2 || b.src[m].shape != b.src[0].shape)
      return err("tensor '{}': the experts of a device batch must share one 2-D shape", b.src[m].name);
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t m = 0; m < M; ++m) {
    auto w = source_to_f32(b.src[m]);
    if (w.ok())
      b.W32[m] = std::move(*w);
    else
      bad[m] = w.status();
  }
  for (const Status& s : bad) GRIDQ_RETURN_IF_ERROR(s);
  b.h_of.resize(M);
  for (size_t m = 0; m < M; ++m) {
    auto it = std::find(b.inputs.begin(), b.inputs.end(), b.mem[m].in);
    b.h_of[m] = static_cast<int>(it - b.inputs.begin());
    if (it == b.inputs.end()) b.inputs.push_back(b.mem[m].in);
  }
  return {};
}

// The batch's device call: every candidate of every matrix with its holdout MSE.
Expected<DeviceFp4Batch> run_on_device(const std::vector<TensorTask>& tasks, const Batch& b) {
  const EncodeParams& p = tasks[b.mem.front().task].params;
  std::vector<const float*> W(b.mem.size());
  for (size_t m = 0; m < W.size(); ++m) W[m] = b.W32[m].data();
  const bool gptq = p.encoder == "cb_gptq";
  const CbGptqOptions opt = gptq_options(p);
  const auto R = static_cast<int>(b.src[0].shape[0]), C = static_cast<int>(b.src[0].shape[1]);
  auto made = encode_fp4_batch_on_device(*b.cb, R, C, W, b.h_of, b.inputs, opt, p.cb_gptq.refine_passes,
                                         p.cb_gptq.refine_scales, gptq, gptq && p.cb_gptq.holdout_gate);
  if (!made.ok()) return err("{}{}", made.message(), describe_failed_input(made.message(), b.inputs, opt));
  return made;
}

// The host's choices among the batch's candidates (encode_tensor with `pre`), then the kept ones' output
// proxies on the device, into out[task].
Status finish(const std::vector<TensorTask>& tasks, Batch& b, DeviceFp4Batch& batch,
              std::map<size_t, EncodedTensor>& out, EncodeSeconds& secs) {
  auto t0 = std::chrono::steady_clock::now();
  const size_t M = b.mem.size();
  std::vector<EncodedTensor> enc(M);
  std::vector<Status> bad(M);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t m = 0; m < M; ++m) {
    const TensorTask& t = tasks[b.mem[m].task];
    auto e = encode_tensor(b.src[m], b.mem[m].in, t.params, b.cb, &b.W32[m], &batch.m[m]);
    if (e.ok())
      enc[m] = std::move(*e);
    else
      bad[m] = err("{}: {}", t.name, e.message());
    b.W32[m] = {};
  }
  for (const Status& s : bad) GRIDQ_RETURN_IF_ERROR(s);
  secs.expert_host += since(t0);
  t0 = std::chrono::steady_clock::now();
  std::vector<int> which(M);
  for (size_t m = 0; m < M; ++m) which[m] = enc[m].device_candidate;
  GRIDQ_ASSIGN_OR_RETURN(std::vector<double> half, batch.dev->half_traces(which));
  for (size_t m = 0; m < M; ++m) enc[m].stats.half_trace = half[m];
  secs.expert_proxy += since(t0);
  for (size_t m = 0; m < M; ++m) out[b.mem[m].task] = std::move(enc[m]);
  return {};
}

}  // namespace

bool is_routed_expert_role(const std::string& role) {
  int e = -1;
  std::string proj;
  return expert_role(role, &e, &proj);
}

Expected<std::map<size_t, EncodedTensor>> encode_experts_on_device(
    const std::vector<TensorTask>& tasks, int layer, const LayerCapture& cap, const io::Checkpoint& ckpt,
    const std::map<std::string, gridbook::Codebook>& codebooks,
    const std::function<void(const std::string&)>& on_tensor, EncodeSeconds* secs) {
  EncodeSeconds own;
  EncodeSeconds& sec = secs ? *secs : own;
  // Groups by (format, encoder, gate/up or down), experts ascending.
  std::map<std::tuple<std::string, std::string, bool>, std::vector<Member>> groups;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TensorTask& t = tasks[i];
    int e = -1;
    std::string proj;
    if (t.layer != layer || !expert_role(t.role, &e, &proj)) continue;
    auto cb = codebook_for(codebooks, t.format, t.name);
    if (!cb.ok() || !batchable(t, *cb)) continue;
    const bool down = proj == "down";
    GRIDQ_ASSIGN_OR_RETURN(const InputStats* in, input_for_role(cap, t.role));
    if (!in) continue;
    groups[{t.format, t.params.encoder, down}].push_back(Member{i, e, in});
  }
  // The batches in order: per group, chunks of device_batch_experts experts.
  std::vector<Batch> batches;
  for (auto& [key, mem] : groups) {
    std::stable_sort(mem.begin(), mem.end(),
                     [](const Member& a, const Member& b) { return a.expert < b.expert; });
    std::vector<int> experts;  // distinct, ascending
    for (const Member& m : mem)
      if (experts.empty() || experts.back() != m.expert) experts.push_back(m.expert);
    const auto per = static_cast<size_t>(std::max(1, tasks[mem.front().task].params.device_batch_experts));
    for (size_t c0 = 0; c0 < experts.size(); c0 += per) {
      const int lo = experts[c0], hi = experts[std::min(experts.size(), c0 + per) - 1];
      Batch b;
      GRIDQ_ASSIGN_OR_RETURN(b.cb, codebook_for(codebooks, std::get<0>(key), tasks[mem.front().task].name));
      for (const Member& m : mem)
        if (m.expert >= lo && m.expert <= hi) b.mem.push_back(m);
      b.label = fmt::format("{} experts {}-{} {} ({} matrices on the GPU)", std::get<0>(key), lo, hi,
                            std::get<2>(key) ? "down" : "gate/up", b.mem.size());
      batches.push_back(std::move(b));
    }
  }
  // While batch i's device call runs on a second thread, the host reads and widens batch i+1's weights;
  // batch i+1's device call starts as soon as batch i's returns, and runs while the host chooses among batch
  // i's candidates and the device computes their proxies: the GPU waits for the host less. Every batch's
  // results are its own, so the bytes do not depend on the overlap. (At most two batches' weights are held.)
  std::map<size_t, EncodedTensor> out;
  std::future<Expected<DeviceFp4Batch>> next;
  auto prepare_timed = [&](size_t i) -> Status {
    auto t0 = std::chrono::steady_clock::now();
    GRIDQ_RETURN_IF_ERROR(prepare(tasks, ckpt, batches[i]));
    sec.expert_host += since(t0);
    return {};
  };
  auto launch = [&](size_t i) {
    next = async_like_caller([&tasks, &b = batches[i]] { return run_on_device(tasks, b); });
  };
  if (!batches.empty()) {
    GRIDQ_RETURN_IF_ERROR(prepare_timed(0));
    launch(0);
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    if (on_tensor) on_tensor(batches[i].label);
    Status ahead = i + 1 < batches.size() ? prepare_timed(i + 1) : Status{};
    auto t0 = std::chrono::steady_clock::now();
    auto made = next.get();
    sec.expert_device += since(t0);  // the device time the host waited for
    if (!made.ok()) return err("layer {}: {}", layer, made.message());
    GRIDQ_RETURN_IF_ERROR(ahead);
    if (i + 1 < batches.size()) launch(i + 1);
    auto st = finish(tasks, batches[i], *made, out, sec);
    if (!st.ok()) return err("layer {}: {}", layer, st.message());
    batches[i] = Batch{};
  }
  return out;
}

}  // namespace gridq::quant
