// `gridq bench kernels`: the MoE layer row (bench.cpp runs it), split from bench.cpp to keep files small.
#include <algorithm>
#include <vector>

#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/relayout.h"

namespace gridq::cuda::bench {

// 47 MoE layers (Laguna-S: H 3072, 256 experts of I 1024, top-10, K16 v2 routed, BF16 router and shared
// expert): rmsnorm(+FP4) -> router GEMV -> route -> shared gate_up -> shared down -> routed gate_up -> down.
Status moe_row(Ctx& c, int M) {
  const std::string name = "moe layer (256x1024 experts top-10 K16 v2 + shared)";
  if (!wanted(c, name)) return {};
  const int H = 3072, I = 1024, E = 256, topk = 10, L = kMoeLayers;
  const long long gu_bytes = static_cast<long long>(2 * I / 16) * (H / 256) * cb_unit_bytes(16, 2);
  const long long dn_bytes = static_cast<long long>(H / 16) * (I / 256) * cb_unit_bytes(16, 2);
  const long long layer_cb = (gu_bytes + dn_bytes) * E;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer cbw,
                         DeviceBuffer::alloc(static_cast<size_t>(layer_cb) * L + 16, "experts"));
  GRIDQ_RETURN_IF_ERROR(
      fill_random_cb_tiles(cbw.as<uint8_t>(), 16, 2, layer_cb * L / cb_unit_bytes(16, 2), 21, c.s));
  const size_t router_n = static_cast<size_t>(E) * H, sgu_n = static_cast<size_t>(2 * I) * H,
               sdn_n = static_cast<size_t>(H) * I;
  const size_t layer_bf16 = router_n + sgu_n + sdn_n + H;  // + norm weight
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer bf, DeviceBuffer::alloc(layer_bf16 * L * 2 + 16, "bf16 weights"));
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(bf.as<uint16_t>(), layer_bf16 * L, 0.05f, 22, c.s));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer bias, DeviceBuffer::alloc(static_cast<size_t>(E) * L * 4, "bias"));
  GRIDQ_RETURN_IF_ERROR(
      fill_random_f32(bias.as<float>(), static_cast<size_t>(E) * L, -0.01f, 0.01f, 23, c.s));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer cb, DeviceBuffer::alloc(size_t{2} * 256 * 4 * 2, "codebook"));
  {
    std::vector<uint16_t> h(2 * 256 * 4);
    const uint16_t e2m1[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
    uint64_t st = 777;
    for (auto& x : h) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<uint16_t>(e2m1[(st >> 33) & 7] | (((st >> 40) & 1) << 15));
    }
    GRIDQ_RETURN_IF_ERROR(cb.upload(h.data(), h.size() * 2));
  }
  // Per-layer activations (rotated).
  const size_t xh = static_cast<size_t>(M) * H;
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::alloc(xh * 2 * L, "x"));
  GRIDQ_RETURN_IF_ERROR(fill_random_bf16(x.as<uint16_t>(), xh * L, 1.0f, 24, c.s));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer a2, DeviceBuffer::alloc(xh * 2 * L, "a2"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer a2q, DeviceBuffer::alloc(xh * 2 * L, "a2 fp4"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer logits,
                         DeviceBuffer::alloc(static_cast<size_t>(M) * E * 4 * L, "logits"));
  const int max_slots = std::min(E, M * topk);
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer nslots, DeviceBuffer::alloc(static_cast<size_t>(L) * 4, "nslots"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer sexp,
                         DeviceBuffer::alloc(static_cast<size_t>(max_slots) * L * 4, "slot_expert"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer sw,
                         DeviceBuffer::alloc(static_cast<size_t>(max_slots) * M * L * 4, "slot_weight"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer hs,
                         DeviceBuffer::alloc(static_cast<size_t>(M) * I * 2 * L, "shared h"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer ys, DeviceBuffer::alloc(xh * 4 * L, "shared out"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer hr,
                         DeviceBuffer::alloc(static_cast<size_t>(max_slots) * M * I * 2 * L, "routed h"));
  GRIDQ_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::alloc(xh * 2 * L, "out"));
  GRIDQ_CUDA(cudaStreamSynchronize(c.s));

  std::vector<DeviceMatrix> gu(L), dn(L), router(L), sgu(L), sdn(L);
  for (int l = 0; l < L; ++l) {
    auto cbm = [&](DeviceMatrix& m, int rows, int in, const uint8_t* base, long long stride) {
      m.format = WeightFormat::CB;
      m.rows = rows;
      m.in = in;
      m.k = 16;
      m.layout_version = 2;
      m.tiles = base;
      m.expert_stride = stride;
      m.codebook = cb.as<uint16_t>();
      for (int cc = 0; cc < 16; ++cc) m.v2_table_bf16[cc] = static_cast<uint16_t>(127 * 128 + 16 * cc);
    };
    const uint8_t* lb = cbw.as<uint8_t>() + layer_cb * l;
    cbm(gu[static_cast<size_t>(l)], 2 * I, H, lb, gu_bytes);
    cbm(dn[static_cast<size_t>(l)], H, I, lb + gu_bytes * E, dn_bytes);
    const uint16_t* bl = bf.as<uint16_t>() + layer_bf16 * l;
    auto bfm = [](DeviceMatrix& m, int rows, int in, const uint16_t* p) {
      m.format = WeightFormat::BF16;
      m.rows = rows;
      m.in = in;
      m.tiles = reinterpret_cast<const uint8_t*>(p);
    };
    bfm(router[static_cast<size_t>(l)], E, H, bl);
    bfm(sgu[static_cast<size_t>(l)], 2 * I, H, bl + router_n);
    bfm(sdn[static_cast<size_t>(l)], H, I, bl + router_n + sgu_n);
  }
  auto enqueue = [&](cudaStream_t s) -> Status {
    for (int l = 0; l < L; ++l) {
      const size_t li = static_cast<size_t>(l);
      uint16_t* a2l = a2.as<uint16_t>() + xh * li;
      uint16_t* a2ql = a2q.as<uint16_t>() + xh * li;
      RmsNormArgs rn;
      rn.x = x.as<uint16_t>() + xh * li;
      rn.w = bf.as<uint16_t>() + layer_bf16 * li + router_n + sgu_n + sdn_n;
      rn.M = M;
      rn.H = H;
      rn.y = a2l;
      rn.y_fp4 = a2ql;
      GRIDQ_RETURN_IF_ERROR(rmsnorm(rn, s, c.o.pdl));
      float* lg = logits.as<float>() + static_cast<size_t>(M) * E * li;
      GemvArgs ga;
      ga.w = &router[li];
      ga.M = M;
      ga.x = a2l;
      ga.y = lg;
      ga.out = OutType::F32;
      GRIDQ_RETURN_IF_ERROR(gemv(ga, c.ws, s, c.o.pdl));
      RouteArgs ra;
      ra.logits = lg;
      ra.bias = bias.as<float>() + static_cast<size_t>(E) * li;
      ra.M = M;
      ra.E = E;
      ra.topk = topk;
      ra.nslots = nslots.as<int>() + l;
      ra.slot_expert = sexp.as<int>() + static_cast<size_t>(max_slots) * li;
      ra.slot_weight = sw.as<float>() + static_cast<size_t>(max_slots) * M * li;
      GRIDQ_RETURN_IF_ERROR(route(ra, s, c.o.pdl));
      uint16_t* hsl = hs.as<uint16_t>() + static_cast<size_t>(M) * I * li;
      GRIDQ_RETURN_IF_ERROR(gemv_swiglu(sgu[li], M, a2l, hsl, false, c.ws, s, c.o.pdl));
      GemvArgs sd;
      sd.w = &sdn[li];
      sd.M = M;
      sd.x = hsl;
      sd.y = ys.as<float>() + xh * li;
      sd.out = OutType::F32;
      GRIDQ_RETURN_IF_ERROR(gemv(sd, c.ws, s, c.o.pdl));
      MoeArgs ma;
      ma.gate_up = &gu[li];
      ma.down = &dn[li];
      ma.M = M;
      ma.max_slots = max_slots;
      ma.x = a2ql;
      ma.nslots = ra.nslots;
      ma.slot_expert = ra.slot_expert;
      ma.slot_weight = ra.slot_weight;
      ma.h = hr.as<uint16_t>() + static_cast<size_t>(max_slots) * M * I * li;
      ma.routed_scale = 2.5f;
      ma.add = ys.as<float>() + xh * li;
      ma.out = out.as<uint16_t>() + xh * li;
      GRIDQ_RETURN_IF_ERROR(moe_gate_up(ma, c.ws, s, c.o.pdl));
      GRIDQ_RETURN_IF_ERROR(moe_down(ma, c.ws, s, c.o.pdl));
    }
    return {};
  };
  double spread = 0;
  GRIDQ_ASSIGN_OR_RETURN(double ms, time_graph(c.s, enqueue, c.o, &spread));
  std::vector<int> ns(static_cast<size_t>(L));
  GRIDQ_RETURN_IF_ERROR(nslots.download(ns.data(), ns.size() * 4));
  double slots = 0;
  for (int n : ns) slots += n;
  slots /= L;
  const double act = static_cast<double>(xh) * 2 * 4 + static_cast<double>(M) * E * 4;
  const double bytes = (static_cast<double>(router_n + sgu_n + sdn_n + H) * 2) +
                       slots * static_cast<double>(gu_bytes + dn_bytes) + act;
  json row = {{"name", name},
              {"rows", H},
              {"in", H},
              {"M", M},
              {"count", L},
              {"launches_per_item", 7},
              {"format", "NVFP4_CB_K16 v2 routed + BF16 router/shared"},
              {"avg_active_experts", slots}};
  record(c, std::move(row), ms, spread, L, bytes);
  return {};
}

}  // namespace gridq::cuda::bench
