// `gridq bench quantize`: times the GPU CB-GPTQ encoder (runtime/cuda/gptq/bench_gptq.h) on one MoE layer's
// routed experts at a model's shapes, with the lattice book of the rung, and extrapolates to the model.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "cli/bench_quant_cli.h"
#include "cli/command.h"
#include "gridbook/rung.h"
#include "quant/dense_book.h"
#include "quant/lattice_codebook.h"

#ifdef GRIDQ_HAVE_CUDA
#include "runtime/cuda/bench_checkpoint.h"
#include "runtime/cuda/gptq/bench_gptq.h"
#endif

namespace gridq::cli {

int run_bench_quant(const BenchQuantFlags& f) {
#ifdef GRIDQ_HAVE_CUDA
  auto rung = gridbook::parse_rung_name(f.rung, 2);
  if (!rung.ok()) return fail("bench quantize: --rung: " + rung.message());
  auto cb = quant::lattice_codebook(*rung);
  if (!cb.ok()) return fail("bench quantize: " + cb.message());
  const quant::DenseBook book = quant::DenseBook::from(*cb);
  if (book.n_sub != 2 || book.sub_dim != 4)
    return fail("bench quantize: --rung " + f.rung + ": the GPU encoder covers NVFP4_CB product rungs");
  cuda::CbGptqBook gb;
  gb.K = book.entries[0];
  gb.t = book.flat();
  cuda::CbGptqBenchOptions o;
  o.shape = f.shape;
  o.experts = f.experts;
  o.chunk = f.chunk;
  o.rows = f.rows;
  o.seed = f.seed;
  o.rtn = f.rtn;
  o.refine_passes = f.refine_passes;
  o.progress = [](int done, int total) { std::fprintf(stderr, "\r  experts %d/%d", done, total); };
  auto r = cuda::bench_cb_gptq(o, gb);
  std::fprintf(stderr, "\n");
  if (!r.ok()) return fail("bench quantize: " + r.message());
  (*r)["rung"] = f.rung;
  if (!f.out.empty()) {
    std::ofstream os(f.out);
    os << r->dump(2) << "\n";
    if (!os) return fail("bench quantize: cannot write " + f.out);
  }
  if (f.json) {
    std::printf("%s\n", r->dump(2).c_str());
  } else {
    const auto& j = *r;
    std::printf("CB-GPTQ %s on %s, %d experts (%s)\n", f.rung.c_str(), f.shape.c_str(),
                j["experts"].get<int>(), j["device"].get<std::string>().c_str());
    std::printf("  device copy %.0f GB/s (CUDA driver %s)\n", j["copy_gbps"].get<double>(),
                j["cuda_driver"].get<std::string>().c_str());
    for (const char* part : {"gate_up", "down"})
      std::printf("  %-8s factor %.2f s, encode %.2f s, refine %.2f s%s\n", part,
                  j[part]["factor_s"].get<double>(), j[part]["encode_s"].get<double>(),
                  j[part]["refine_s"].get<double>(),
                  f.rtn ? fmt::format(", rtn {:.2f} s", j[part]["rtn_s"].get<double>()).c_str() : "");
    std::printf("  per MoE layer (%d experts): %.1f s; %d MoE layers: %.1f min\n",
                j["layer_experts"].get<int>(), j["cb_gptq_s_per_layer"].get<double>(),
                j["moe_layers"].get<int>(), j["cb_gptq_s_model"].get<double>() / 60.0);
  }
  return 0;
#else
  (void)f;
  return fail("bench quantize: this gridq was built without CUDA (configure with -DGRIDQ_CUDA=ON)");
#endif
}

int run_bench_checkpoint(const BenchCheckpointFlags& f) {
#ifdef GRIDQ_HAVE_CUDA
  cuda::CheckpointOptions o;
  o.shape = f.shape, o.layers = f.layers, o.seed = f.seed, o.tokenizer_from = f.tokenizer_from, o.out = f.out;
  auto r = cuda::write_synthetic_checkpoint(o);
  if (!r.ok()) return fail(r.message());
  const nlohmann::json j = {{"out", f.out},        {"shape", f.shape},     {"layers", f.layers},
                            {"seed", f.seed},      {"params", r->params},  {"bytes", r->bytes},
                            {"shards", r->shards}, {"seconds", r->seconds}};
  if (f.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    std::printf("%s: %s, %d layers, %.2fB parameters, %.1f GB in %d shards, %.1f s\n", f.out.c_str(),
                f.shape.c_str(), f.layers, static_cast<double>(r->params) / 1e9,
                static_cast<double>(r->bytes) / 1e9, r->shards, r->seconds);
  return 0;
#else
  (void)f;
  return fail("bench checkpoint: this gridq was built without CUDA (configure with -DGRIDQ_CUDA=ON)");
#endif
}

}  // namespace gridq::cli
