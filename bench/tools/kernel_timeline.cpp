// A CUPTI injection library that records every kernel the process runs (graph replays included): start and
// end on the GPU clock, stream, graph and node ids, grid, block, shared memory, registers and the demangled
// name, one CSV line per kernel. It lives outside gridq: no code of the engine knows about it. With
// GRIDQ_TIMELINE_API=FILE it also writes the host's CUDA runtime calls (cudaGraphLaunch, cudaMemcpyAsync,
// cudaStreamSynchronize, ...: start and end on the same clock) and the copies' GPU times to FILE, so the host
// time between two graph replays can be named (timeline_report.py --api).
//
//   g++ -std=c++17 -O2 -shared -fPIC bench/tools/kernel_timeline.cpp -I$CUDA/include -L$CUDA/lib64 -lcupti
//       -o /tmp/libkernel_timeline.so
//   CUDA_INJECTION64_PATH=/tmp/libkernel_timeline.so GRIDQ_TIMELINE=/tmp/k.csv
//       gridq bench decode --synthetic laguna-s-2.1 --batches 1 --contexts 0 --steps 4
//   python3 bench/tools/timeline_report.py /tmp/k.csv
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

constexpr size_t kBufBytes = 8 << 20;
std::FILE* g_out = nullptr;
std::FILE* g_api = nullptr;  // GRIDQ_TIMELINE_API: kind,start_ns,end_ns,name,bytes
std::mutex g_mu;

void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, kBufBytes));
  *size = kBufBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard lk(g_mu);
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (g_api && rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name)
        name = "?";
      std::fprintf(g_api, "api,%llu,%llu,%s,0\n", static_cast<unsigned long long>(a->start),
                   static_cast<unsigned long long>(a->end), name);
      continue;
    }
    if (g_api && rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      std::fprintf(g_api, "memcpy,%llu,%llu,kind%u,%llu\n", static_cast<unsigned long long>(m->start),
                   static_cast<unsigned long long>(m->end), static_cast<unsigned>(m->copyKind),
                   static_cast<unsigned long long>(m->bytes));
      continue;
    }
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    int st = 0;
    char* dm = abi::__cxa_demangle(k->name, nullptr, nullptr, &st);
    const char* name = st == 0 && dm ? dm : k->name;
    std::fprintf(g_out, "%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,\"", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->streamId, k->graphId,
                 static_cast<unsigned long long>(k->graphNodeId), k->gridX * k->gridY * k->gridZ,
                 k->blockX * k->blockY * k->blockZ, k->dynamicSharedMemory + k->staticSharedMemory,
                 static_cast<int>(k->registersPerThread));
    for (const char* c = name; *c; ++c) std::fputc(*c == '"' ? '\'' : *c, g_out);
    std::fputs("\"\n", g_out);
    std::free(dm);
  }
  std::fflush(g_out);
  if (g_api) std::fflush(g_api);
  std::free(buf);
}

void flush_at_exit() { cuptiActivityFlushAll(1); }

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("GRIDQ_TIMELINE");
  g_out = std::fopen(path ? path : "kernel_timeline.csv", "w");
  if (!g_out) return 0;
  std::fputs("start_ns,end_ns,stream,graph,node,grid,block,smem,regs,name\n", g_out);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  if (const char* api = std::getenv("GRIDQ_TIMELINE_API")) {
    g_api = std::fopen(api, "w");
    if (g_api) {
      std::fputs("kind,start_ns,end_ns,name,bytes\n", g_api);
      if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
          cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS)
        return 0;
    }
  }
  cuptiActivityFlushPeriod(200);
  std::atexit(flush_at_exit);
  return 1;
}
