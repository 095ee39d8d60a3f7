// `gridq bench kernels --diag`: where the per-kernel time of a stack goes. In the same graph harness as the
// real rows: a stack of 48 empty kernels (what a graph node costs), stacks of 48 pure streaming reads of
// weight-sized buffers (the floor for a kernel that moves that many bytes), one persistent kernel streaming
// the same 48 buffers with a grid barrier between them, and per-kernel timelines of real GEMV stacks.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::bench {

json TraceSummary::to_json() const {
  return json{{"kernels", kernels},          {"blocks", blocks},
              {"period_us", period},         {"first_start_us", first_start},
              {"last_start_us", last_start}, {"tables_us", tables},
              {"released_us", released},     {"first_end_us", first_end}};
}

TraceSummary summarize_trace(const std::vector<unsigned long long>& w, int kernels) {
  TraceSummary s;
  if (kernels < 2 || w.size() % (4 * static_cast<size_t>(kernels)) != 0) return s;
  const size_t nb = w.size() / 4 / static_cast<size_t>(kernels);
  s.kernels = kernels;
  s.blocks = static_cast<int>(nb);
  auto at = [&](int k, size_t b, int i) { return static_cast<double>(w[(k * nb + b) * 4 + i]); };
  double prev_end = 0;
  for (int k = 0; k < kernels; ++k) {
    double s0 = 1e300, s1 = 0, rel = 1e300, e0 = 1e300, e1 = 0, tab = 0;
    for (size_t b = 0; b < nb; ++b) {
      s0 = std::min(s0, at(k, b, 0));
      s1 = std::max(s1, at(k, b, 0));
      tab += at(k, b, 1) - at(k, b, 0);
      rel = std::min(rel, at(k, b, 2));
      e0 = std::min(e0, at(k, b, 3));
      e1 = std::max(e1, at(k, b, 3));
    }
    if (k > 0) {
      s.period += (e1 - prev_end) / 1e3;
      s.first_start += (s0 - prev_end) / 1e3;
      s.last_start += (s1 - prev_end) / 1e3;
      s.released += (rel - prev_end) / 1e3;
      s.first_end += (e0 - prev_end) / 1e3;
      s.tables += tab / static_cast<double>(nb) / 1e3;
    }
    prev_end = e1;
  }
  const double n = kernels - 1;
  s.period /= n, s.first_start /= n, s.last_start /= n, s.released /= n, s.first_end /= n, s.tables /= n;
  return s;
}

json ChainTraceSummary::to_json() const {
  return json{{"phases", phases},
              {"blocks", blocks},
              {"period_us", period},
              {"first_release_us", first_release},
              {"last_release_us", last_release},
              {"first_done_us", first_done}};
}

ChainTraceSummary summarize_chain_trace(const std::vector<unsigned long long>& w, int phases, int blocks) {
  ChainTraceSummary s;
  if (phases < 2 || blocks < 1 || w.size() < size_t{2} * phases * blocks) return s;
  s.phases = phases;
  s.blocks = blocks;
  auto at = [&](int ph, int b, int i) {
    return static_cast<double>(w[(static_cast<size_t>(ph) * blocks + b) * 2 + i]);
  };
  double prev_done = 0;
  for (int ph = 0; ph < phases; ++ph) {
    double r0 = 1e300, r1 = 0, d0 = 1e300, d1 = 0;
    for (int b = 0; b < blocks; ++b) {
      r0 = std::min(r0, at(ph, b, 0));
      r1 = std::max(r1, at(ph, b, 0));
      d0 = std::min(d0, at(ph, b, 1));
      d1 = std::max(d1, at(ph, b, 1));
    }
    if (ph > 0) {
      s.period += (d1 - prev_done) / 1e3;
      s.first_release += (r0 - prev_done) / 1e3;
      s.last_release += (r1 - prev_done) / 1e3;
      s.first_done += (d0 - prev_done) / 1e3;
    }
    prev_done = d1;
  }
  const double n = phases - 1;
  s.period /= n, s.first_release /= n, s.last_release /= n, s.first_done /= n;
  return s;
}

namespace {

Status launched(cudaError_t e, const char* what) { return cuda_status(e, what, __FILE__, __LINE__); }

void diag_row(Ctx& c, const std::string& name, double ms, double spread, double bytes, int launches) {
  json row = {{"name", name}, {"M", 1}, {"count", kStack}, {"launches_per_item", launches}, {"diag", true}};
  record(c, std::move(row), ms, spread, kStack, bytes);
}

}  // namespace

Status run_diag(Ctx& c) {
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer sink, DeviceBuffer::alloc(64 * 4, "diag sink"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer bar, DeviceBuffer::alloc(16, "diag barrier"));
  GRIDQ_RETURN_IF_ERROR(sink.zero());
  GRIDQ_RETURN_IF_ERROR(bar.zero());
  double spread = 0;
  // 1. Empty kernels: the harness's cost per node.
  for (bool pdl : {false, true}) {
    auto enq = [&](cudaStream_t s) -> Status {
      for (int i = 0; i < kStack; ++i)
        GRIDQ_RETURN_IF_ERROR(launched(detail::raw_diag_empty(264, pdl, s), "empty"));
      return {};
    };
    GRIDQ_ASSIGN_OR_RETURN(double ms, time_graph(c.s, enq, c.o, &spread));
    diag_row(c, fmt::format("diag empty kernel 264x256{}", pdl ? " pdl" : ""), ms, spread, 0, 1);
  }
  // 2. Streaming reads of 48 distinct buffers of the stack sizes, 3. the persistent version.
  for (double mb : {3.1457, 8.0978, 28.3115}) {
    const size_t bytes = static_cast<size_t>(mb * 1e6) / 4096 * 4096;
    GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::alloc(bytes * kStack, "diag stream"));
    GRIDQ_RETURN_IF_ERROR(fill_random_bytes(src.as(), bytes * kStack, 5, c.s));
    struct V {
      const char* name;
      int bps;
      bool pdl, early;
    };
    for (V v : {V{"", 8, false, false}, V{" pdl", 8, true, false}, V{" pdl early", 8, true, true},
                V{" pdl early half-occupancy", 4, true, true}}) {
      auto enq = [&](cudaStream_t s) -> Status {
        for (int i = 0; i < kStack; ++i)
          GRIDQ_RETURN_IF_ERROR(
              launched(detail::raw_diag_stream(src.as<uint8_t>() + bytes * i, bytes, sink.as<uint32_t>(),
                                               v.bps, v.pdl, v.early, s),
                       "stream"));
        return {};
      };
      GRIDQ_ASSIGN_OR_RETURN(double ms, time_graph(c.s, enq, c.o, &spread));
      diag_row(c, fmt::format("diag stream {:.1f} MB{}", bytes / 1e6, v.name), ms, spread,
               static_cast<double>(bytes), 1);
    }
    auto enq = [&](cudaStream_t s) -> Status {
      return launched(detail::raw_diag_stream_persistent(src.as(), bytes, kStack, sink.as<uint32_t>(),
                                                         bar.as<unsigned>(), s),
                      "persistent stream");
    };
    auto ms = time_graph(c.s, enq, c.o, &spread);
    if (ms.ok())
      diag_row(c, fmt::format("diag persistent stream {:.1f} MB + barrier", bytes / 1e6), *ms, spread,
               static_cast<double>(bytes), 0);
    else
      std::fprintf(stderr, "diag persistent stream %.1f MB: %s\n", bytes / 1e6, ms.message().c_str());
  }
  // 4. Timelines of real GEMV stacks.
  struct G {
    const char* name;
    WeightFormat f;
    int k, rows, in;
  };
  for (G g : {G{"fp8 k/v_proj 3072->1024", WeightFormat::FP8, 0, 1024, 3072},
              G{"fp8 q_proj 3072->9216", WeightFormat::FP8, 0, 9216, 3072},
              G{"cb K16 v2 3072->9216", WeightFormat::CB, 16, 9216, 3072},
              G{"cb K16 v2 9216->3072", WeightFormat::CB, 16, 3072, 9216}}) {
    TraceSummary t;
    ChainTraceSummary ct;
    GRIDQ_RETURN_IF_ERROR(
        dense_row(c, fmt::format("trace {}", g.name), g.f, g.k, 2, g.rows, g.in, 1, false, &t, &ct));
    std::fprintf(
        stderr,
        "  graph timeline (us, vs previous kernel's end; %d blocks): period %.2f, first block start %.2f, "
        "last block start %.2f, tables %.2f, released %.2f, first block end %.2f\n",
        t.blocks, t.period, t.first_start, t.last_start, t.tables, t.released, t.first_end);
    std::fprintf(stderr,
                 "  chain timeline (us, vs last block done with the previous phase; %d blocks): period %.2f, "
                 "first past barrier %.2f, last past barrier %.2f, first done %.2f\n",
                 ct.blocks, ct.period, ct.first_release, ct.last_release, ct.first_done);
  }
  return {};
}

}  // namespace gridq::cuda::bench
