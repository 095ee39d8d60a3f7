#include "runtime/cuda/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <vector>

#include "core/version.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/relayout.h"
#include "runtime/cuda/upload.h"

namespace gridq::cuda {
namespace bench {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

Expected<double> copy_bandwidth(cudaStream_t s, int copies) {
  const size_t n = size_t{1} << 30;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::alloc(n, "copy source"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::alloc(n, "copy destination"));
  GRIDQ_RETURN_IF_ERROR(fill_random_bytes(a.as(), n, 1, s));
  Events ev;
  GRIDQ_CUDA(cudaEventCreate(&ev.a));
  GRIDQ_CUDA(cudaEventCreate(&ev.b));
  for (int i = 0; i < 3; ++i) GRIDQ_CUDA(cudaMemcpyAsync(b.as(), a.as(), n, cudaMemcpyDeviceToDevice, s));
  std::vector<double> t;
  for (int i = 0; i < copies; ++i) {
    GRIDQ_CUDA(cudaEventRecord(ev.a, s));
    GRIDQ_CUDA(cudaMemcpyAsync(b.as(), a.as(), n, cudaMemcpyDeviceToDevice, s));
    GRIDQ_CUDA(cudaEventRecord(ev.b, s));
    GRIDQ_CUDA(cudaEventSynchronize(ev.b));
    float ms = 0;
    GRIDQ_CUDA(cudaEventElapsedTime(&ms, ev.a, ev.b));
    t.push_back(ms);
  }
  return 2.0 * static_cast<double>(n) / (median(t) * 1e-3) / 1e9;
}

Expected<double> time_graph(cudaStream_t s, const std::function<Status(cudaStream_t)>& enqueue,
                            const BenchOptions& o, double* spread) {
  GRIDQ_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  Status st = enqueue(s);
  cudaGraph_t graph = nullptr;
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  if (!st.ok()) {
    if (graph) (void)cudaGraphDestroy(graph);
    return st.error();
  }
  GRIDQ_CUDA(ce);
  cudaGraphExec_t exec = nullptr;
  ce = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  GRIDQ_CUDA(ce);
  struct ExecGuard {
    cudaGraphExec_t e;
    ~ExecGuard() { (void)cudaGraphExecDestroy(e); }
  } guard{exec};
  Events ev;
  GRIDQ_CUDA(cudaEventCreate(&ev.a));
  GRIDQ_CUDA(cudaEventCreate(&ev.b));
  for (int i = 0; i < o.warmup; ++i) GRIDQ_CUDA(cudaGraphLaunch(exec, s));
  GRIDQ_CUDA(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int i = 0; i < o.replays; ++i) {
    GRIDQ_CUDA(cudaEventRecord(ev.a, s));
    GRIDQ_CUDA(cudaGraphLaunch(exec, s));
    GRIDQ_CUDA(cudaEventRecord(ev.b, s));
    GRIDQ_CUDA(cudaEventSynchronize(ev.b));
    float ms = 0;
    GRIDQ_CUDA(cudaEventElapsedTime(&ms, ev.a, ev.b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  if (spread) *spread = (t.back() - t.front()) / t[t.size() / 2];
  return t[t.size() / 2];
}

void record(Ctx& c, json row, double ms, double spread, double items, double bytes_per_item) {
  const double us = ms * 1e3 / items;
  const double gbs = bytes_per_item / (us * 1e-6) / 1e9;
  row["us_per_item"] = us;
  row["bytes_per_item"] = bytes_per_item;
  row["gbs"] = gbs;
  row["pct_copy"] = 100.0 * gbs / c.copy_gbs;
  row["spread"] = spread;
  row["pdl"] = c.o.pdl;
  if (c.o.progress)
    std::fprintf(stderr, "%-44s M=%-2d %9.2f us %9.2f MB %7.0f GB/s %5.1f%%\n",
                 row["name"].get<std::string>().c_str(), row["M"].get<int>(), us, bytes_per_item / 1e6, gbs,
                 100.0 * gbs / c.copy_gbs);
  c.rows.push_back(std::move(row));
}

bool wanted(const Ctx& c, const std::string& name) {
  if (c.o.filter.empty()) return true;
  size_t b = 0;
  while (b <= c.o.filter.size()) {
    size_t e = c.o.filter.find('|', b);
    if (e == std::string::npos) e = c.o.filter.size();
    if (e > b && name.find(c.o.filter.substr(b, e - b)) != std::string::npos) return true;
    b = e + 1;
  }
  return false;
}

}  // namespace bench

namespace {

using namespace bench;

}  // namespace

namespace bench {

Status dense_row(Ctx& c, const std::string& name, WeightFormat f, int k, int v, int rows, int in, int M,
                 bool swiglu, TraceSummary* trace, ChainTraceSummary* chain_trace) {
  if (trace == nullptr && !wanted(c, name)) return {};
  long long mat_bytes;
  if (f == WeightFormat::CB)
    mat_bytes = static_cast<long long>(rows / 16) * (in / 256) * cb_unit_bytes(k, v);
  else
    mat_bytes = static_cast<long long>(rows) * in * (f == WeightFormat::BF16 ? 2 : 1);
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer w,
                         DeviceBuffer::alloc(static_cast<size_t>(mat_bytes) * kStack + 16, name));
  DeviceBuffer scales, cb;
  std::vector<DeviceMatrix> mats(kStack);
  if (f == WeightFormat::CB) {
    GRIDQ_RETURN_IF_ERROR(
        fill_random_cb_tiles(w.as<uint8_t>(), k, v, mat_bytes / cb_unit_bytes(k, v) * kStack, 7, c.s));
    const size_t ncb = (size_t{2} << (k / 2)) * 4;
    GRIDQ_ASSIGN_OR_RETURN(cb, DeviceBuffer::alloc(ncb * 2, "codebook"));
    // On-grid codebook values: random E2M1 magnitudes and signs, as BF16.
    std::vector<uint16_t> h(ncb);
    const uint16_t e2m1[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
    uint64_t st = 12345;
    for (auto& x : h) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<uint16_t>(e2m1[(st >> 33) & 7] | (((st >> 40) & 1) << 15));
    }
    GRIDQ_RETURN_IF_ERROR(cb.upload(h.data(), ncb * 2));
  } else if (f == WeightFormat::FP8) {
    GRIDQ_RETURN_IF_ERROR(fill_random_e4m3(w.as<uint8_t>(), static_cast<size_t>(mat_bytes) * kStack, 7, c.s));
    GRIDQ_ASSIGN_OR_RETURN(scales,
                           DeviceBuffer::alloc(static_cast<size_t>(rows) * kStack * 4, "weight_scale"));
    GRIDQ_RETURN_IF_ERROR(
        fill_random_f32(scales.as<float>(), static_cast<size_t>(rows) * kStack, 1e-3f, 1e-2f, 8, c.s));
  } else {
    GRIDQ_RETURN_IF_ERROR(
        fill_random_bf16(w.as<uint16_t>(), static_cast<size_t>(mat_bytes / 2) * kStack, 0.05f, 7, c.s));
  }
  for (int i = 0; i < kStack; ++i) {
    DeviceMatrix& m = mats[static_cast<size_t>(i)];
    m.format = f;
    m.rows = rows;
    m.in = in;
    m.k = k;
    m.layout_version = v;
    m.tiles = w.as<uint8_t>() + mat_bytes * i;
    if (f == WeightFormat::FP8) m.row_scale = scales.as<float>() + static_cast<size_t>(rows) * i;
    if (f == WeightFormat::CB) {
      m.codebook = cb.as<uint16_t>();
      for (int cc = 0; cc < 16; ++cc) m.v2_table_bf16[cc] = static_cast<uint16_t>(127 * 128 + 16 * cc);
    }
  }
  // Inputs and outputs rotate with the weights.
  const size_t x_elem = f == WeightFormat::FP8 ? 1 : 2;
  const size_t xb = static_cast<size_t>(M) * in * x_elem;
  const int out_rows = swiglu ? rows / 2 : rows;
  const size_t yb = static_cast<size_t>(M) * out_rows * 2;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::alloc(xb * kStack + 16, "x"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::alloc(yb * kStack + 16, "y"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer xs,
                         DeviceBuffer::alloc(static_cast<size_t>(M) * kStack * 4, "x scales"));
  if (f == WeightFormat::FP8) {
    GRIDQ_RETURN_IF_ERROR(fill_random_e4m3(x.as<uint8_t>(), xb * kStack, 9, c.s));
    GRIDQ_RETURN_IF_ERROR(
        fill_random_f32(xs.as<float>(), static_cast<size_t>(M) * kStack, 1e-3f, 1e-2f, 10, c.s));
  } else {
    GRIDQ_RETURN_IF_ERROR(fill_random_bf16(x.as<uint16_t>(), xb / 2 * kStack, 1.0f, 9, c.s));
  }
  GRIDQ_CUDA(cudaStreamSynchronize(c.s));
  auto enqueue = [&](cudaStream_t s) -> Status {
    for (int i = 0; i < kStack; ++i) {
      const DeviceMatrix& m = mats[static_cast<size_t>(i)];
      uint8_t* xi = x.as<uint8_t>() + xb * i;
      uint8_t* yi = y.as<uint8_t>() + yb * i;
      if (swiglu) {
        GRIDQ_RETURN_IF_ERROR(
            gemv_swiglu(m, M, xi, reinterpret_cast<uint16_t*>(yi), f == WeightFormat::CB, c.ws, s, c.o.pdl));
      } else {
        GemvArgs a;
        a.w = &m;
        a.M = M;
        a.x = xi;
        a.xscale = xs.as<float>() + static_cast<size_t>(M) * i;
        a.y = yi;
        GRIDQ_RETURN_IF_ERROR(gemv(a, c.ws, s, c.o.pdl));
      }
    }
    return {};
  };
  double spread = 0;
  DeviceBuffer tr;
  if (trace != nullptr) {
    const long long words = 4LL * 2048 * kStack;
    GRIDQ_ASSIGN_OR_RETURN(tr, DeviceBuffer::alloc(static_cast<size_t>(words) * 8, "trace"));
    GRIDQ_RETURN_IF_ERROR(tr.zero());
    detail::raw_set_trace(tr.as<unsigned long long>(), words);
  }
  auto ms_or = time_graph(c.s, enqueue, c.o, &spread);
  const long long trace_words = detail::raw_trace_used();
  detail::raw_set_trace(nullptr, 0);
  GRIDQ_ASSIGN_OR_RETURN(double ms, std::move(ms_or));
  if (trace != nullptr) {
    std::vector<unsigned long long> h(static_cast<size_t>(trace_words));
    GRIDQ_RETURN_IF_ERROR(tr.download(h.data(), h.size() * 8));
    *trace = summarize_trace(h, kStack);
  }
  const double bytes = static_cast<double>(mat_bytes) + static_cast<double>(xb) + static_cast<double>(yb) +
                       (f == WeightFormat::FP8 ? rows * 4.0 + M * 4.0 : 0.0);
  json row = {{"name", name}, {"rows", rows},    {"in", in},
              {"M", M},       {"count", kStack}, {"launches_per_item", 1}};
  row["format"] = f == WeightFormat::CB    ? fmt::format("NVFP4_CB_K{} v{}", k, v)
                  : f == WeightFormat::FP8 ? "FP8 W8A8"
                                           : "BF16";
  if (swiglu) row["fused"] = "gate+up+SiLU·mul";
  if (trace != nullptr) row["trace"] = trace->to_json();
  row["engine"] = "graph of 48 kernels";
  json chain_row = row;
  record(c, std::move(row), ms, spread, kStack, bytes);
  if (!c.o.chain) return {};

  // The same 48 GEMVs as ONE persistent launch (gemv_chain): a grid barrier between consecutive GEMVs, so
  // GEMV i+1 reads its activations only after every output of GEMV i is written — the dependency a real
  // decode chain has — while its weights stream in during GEMV i's tail.
  auto enqueue_chain = [&](cudaStream_t s) -> Status {
    std::vector<ChainStep> steps(static_cast<size_t>(kStack));
    for (int i = 0; i < kStack; ++i) {
      ChainStep& st = steps[static_cast<size_t>(i)];
      st.w = &mats[static_cast<size_t>(i)];
      st.M = M;
      st.x = x.as<uint8_t>() + xb * i;
      st.xscale = xs.as<float>() + static_cast<size_t>(M) * i;
      st.y = y.as<uint8_t>() + yb * i;
      st.swiglu = swiglu;
      st.qdq_fp4 = swiglu && f == WeightFormat::CB;
    }
    return gemv_chain(steps.data(), kStack, c.ws, s, c.o.pdl);
  };
  DeviceBuffer ctr;
  if (chain_trace != nullptr) {
    GRIDQ_ASSIGN_OR_RETURN(ctr, DeviceBuffer::alloc(size_t{2} * 1024 * kStack * 8, "chain trace"));
    GRIDQ_RETURN_IF_ERROR(ctr.zero());
    detail::raw_set_chain_trace(ctr.as<unsigned long long>());
  }
  auto cms_or = time_graph(c.s, enqueue_chain, c.o, &spread);
  detail::raw_set_chain_trace(nullptr);
  GRIDQ_ASSIGN_OR_RETURN(double cms, std::move(cms_or));
  if (chain_trace != nullptr) {
    GRIDQ_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
    std::vector<unsigned long long> h(size_t{2} * static_cast<size_t>(info.sm_count) * kStack);
    GRIDQ_RETURN_IF_ERROR(ctr.download(h.data(), h.size() * 8));
    *chain_trace = summarize_chain_trace(h, kStack, info.sm_count);
    chain_row["trace"] = chain_trace->to_json();
  } else {
    chain_row.erase("trace");
  }
  chain_row["name"] = name + " [chain]";
  chain_row["engine"] = "persistent chain";
  chain_row["launches_per_item"] = 1.0 / kStack;
  record(c, std::move(chain_row), cms, spread, kStack, bytes);
  return {};
}

}  // namespace bench

Expected<json> run_kernel_bench(const BenchOptions& o) {
  GRIDQ_ASSIGN_OR_RETURN(DeviceInfo info, device_info());
  if (info.major != 9)
    return err("bench kernels: built for sm_90a, device is sm_{}{} ({})", info.major, info.minor, info.name);
  GRIDQ_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  GRIDQ_ASSIGN_OR_RETURN(WorkspaceBuffers wsb, WorkspaceBuffers::create());
  int driver = 0, runtime = 0;
  GRIDQ_CUDA(cudaDriverGetVersion(&driver));
  GRIDQ_CUDA(cudaRuntimeGetVersion(&runtime));
  if (o.min_warp_bytes > 0) set_gemv_min_warp_bytes(o.min_warp_bytes);
  if (o.blocks_per_sm >= 0) set_gemv_blocks_per_sm(o.blocks_per_sm);
  set_gemv_l2_prefetch(o.l2_prefetch);
  if (o.chain_copy_engine >= 0) set_gemv_chain_copy_engine(o.chain_copy_engine == 1);
  GRIDQ_ASSIGN_OR_RETURN(double copy, copy_bandwidth(stream.get(), std::max(5, o.replays / 2)));
  if (o.progress) std::fprintf(stderr, "device-to-device copy: %.0f GB/s (read + write)\n", copy);
  Ctx c{stream.get(), o, wsb.ws, copy};
  if (o.diag) GRIDQ_RETURN_IF_ERROR(run_diag(c));

  // Rows in order of importance (the acceptance rows first), so that a run cut short still has them.
  // NVFP4-CB K16 v2 GEMV alone at both decode shapes, M = 1, 8, 16.
  for (int M : {1, 8, 16}) {
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "cb K16 v2 3072->9216", WeightFormat::CB, 16, 2, 9216, 3072, M, false));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "cb K16 v2 9216->3072", WeightFormat::CB, 16, 2, 3072, 9216, M, false));
  }
  // FP8 W8A8 attention projections (Laguna-S: full layers 48 heads, sliding 72; 8 KV heads).
  for (int M : {1, 8}) {
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "fp8 q_proj 3072->6144", WeightFormat::FP8, 0, 0, 6144, 3072, M, false));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "fp8 q_proj 3072->9216", WeightFormat::FP8, 0, 0, 9216, 3072, M, false));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "fp8 k/v_proj 3072->1024", WeightFormat::FP8, 0, 0, 1024, 3072, M, false));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "fp8 o_proj 6144->3072", WeightFormat::FP8, 0, 0, 3072, 6144, M, false));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "fp8 o_proj 9216->3072", WeightFormat::FP8, 0, 0, 3072, 9216, M, false));
  }
  // One MoE layer (stack of 47).
  GRIDQ_RETURN_IF_ERROR(moe_row(c, 1));
  GRIDQ_RETURN_IF_ERROR(moe_row(c, 8));
  // BF16: lm_head, shared expert, dense layer-0 MLP.
  GRIDQ_RETURN_IF_ERROR(
      dense_row(c, "bf16 lm_head 3072->100352", WeightFormat::BF16, 0, 0, 100352, 3072, 1, false));
  for (int M : {1, 8}) {
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "bf16 shared gate_up+silu 3072->2x1024", WeightFormat::BF16, 0, 0, 2048, 3072, M, true));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "bf16 shared down 1024->3072", WeightFormat::BF16, 0, 0, 3072, 1024, M, false));
    GRIDQ_RETURN_IF_ERROR(dense_row(c, "bf16 layer0 gate_up+silu 3072->2x12288", WeightFormat::BF16, 0, 0,
                                    24576, 3072, M, true));
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, "bf16 layer0 down 12288->3072", WeightFormat::BF16, 0, 0, 3072, 12288, M, false));
  }
  // NVFP4-CB GEMV alone, the other rungs and v1, both decode shapes.
  for (int k : {16, 12, 20, 24})
    for (int v : {2, 1}) {
      if (k == 16 && v == 2) continue;
      for (int M : {1, 8}) {
        GRIDQ_RETURN_IF_ERROR(dense_row(c, fmt::format("cb K{} v{} 3072->9216", k, v), WeightFormat::CB, k, v,
                                        9216, 3072, M, false));
        GRIDQ_RETURN_IF_ERROR(dense_row(c, fmt::format("cb K{} v{} 9216->3072", k, v), WeightFormat::CB, k, v,
                                        3072, 9216, M, false));
      }
    }

  json r;
  r["date"] = utc_now();
  r["commit"] = gridq::git_commit();
  r["gpu"] = info.name;
  r["sms"] = info.sm_count;
  r["l2_bytes"] = info.l2_bytes;
  r["cuda_driver_api"] = driver;
  r["cuda_runtime"] = runtime;
  r["copy_gbs"] = copy;
  r["stack"] = kStack;
  r["moe_layers"] = kMoeLayers;
  r["replays"] = o.replays;
  r["pdl"] = o.pdl;
  r["min_warp_bytes"] = gemv_min_warp_bytes();
  r["blocks_per_sm"] = gemv_blocks_per_sm();
  r["l2_prefetch"] = o.l2_prefetch;
  r["chain"] = o.chain;
  r["chain_copy_engine"] = gemv_chain_copy_engine();
  r["rows"] = c.rows;
  return r;
}

std::string format_bench_table(const json& r) {
  std::string s =
      fmt::format("gridq bench kernels — {} — {} — copy {:.0f} GB/s\n", r["date"].get<std::string>(),
                  r["gpu"].get<std::string>(), r["copy_gbs"].get<double>());
  s += fmt::format("{:<46} {:>3} {:>10} {:>10} {:>8} {:>7}\n", "row", "M", "us/item", "MB/item", "GB/s",
                   "%copy");
  for (const auto& row : r["rows"])
    s += fmt::format("{:<46} {:>3} {:>10.2f} {:>10.3f} {:>8.0f} {:>6.1f}%\n", row["name"].get<std::string>(),
                     row["M"].get<int>(), row["us_per_item"].get<double>(),
                     row["bytes_per_item"].get<double>() / 1e6, row["gbs"].get<double>(),
                     row["pct_copy"].get<double>());
  return s;
}

}  // namespace gridq::cuda
