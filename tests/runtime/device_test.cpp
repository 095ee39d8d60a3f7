// choose_device and the CUDA hook registry, with fake hooks: what `--device cpu|cuda|auto` picks and says in
// a program without CUDA, with a GPU the probe rejects, and with a usable one. Every test restores the
// registry (this binary has no CUDA backend), so test order does not matter.
#include "runtime/device.h"

#include <gtest/gtest.h>

#include "runtime/engine.h"
#include "synthetic_model.h"

namespace gridq::runtime {
namespace {

// Installs fake hooks for one test and puts back whatever was registered before.
class ScopedHooks {
 public:
  explicit ScopedHooks(CudaBackendHooks h) {
    if (const CudaBackendHooks* old = cuda_backend_hooks()) saved_ = *old;
    register_cuda_backend(std::move(h));
  }
  ~ScopedHooks() { register_cuda_backend(saved_); }

 private:
  CudaBackendHooks saved_;  // empty: restoring it clears the registry
};

CudaBackendHooks fake(bool usable, std::string description, int* probes = nullptr, int* creates = nullptr) {
  CudaBackendHooks h;
  h.probe = [=] {
    if (probes) ++*probes;
    return CudaProbe{usable, description};
  };
  h.create = [=](const model::ModelSpec&, const ModelWeights&, std::shared_ptr<void>,
                 const DeviceOptions&) -> Expected<std::unique_ptr<Backend>> {
    if (creates) ++*creates;
    return err("fake cuda backend: create is not implemented");
  };
  return h;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ChooseDevice, CpuIsAlwaysCpu) {
  int probes = 0;
  ScopedHooks hooks(fake(true, "NVIDIA H200 (sm_90, 139.8 GiB)", &probes));
  auto c = choose_device("cpu");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->kind, DeviceKind::kCpu);
  EXPECT_EQ(c->log_line, "device: cpu (--device cpu)");
  EXPECT_EQ(probes, 0);  // --device cpu never touches the GPU
}

TEST(ChooseDevice, WithoutCudaBackend) {
  register_cuda_backend({});  // this binary registers none; make sure
  ASSERT_EQ(cuda_backend_hooks(), nullptr);
  auto a = choose_device("auto");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->kind, DeviceKind::kCpu);
  EXPECT_EQ(a->log_line, "device: cpu (--device auto: this gridq was built without the CUDA backend)");
  auto c = choose_device("cuda");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.message(),
            "--device cuda: this gridq was built without the CUDA backend; use --device cpu or auto");
}

TEST(ChooseDevice, UnusableGpu) {
  int probes = 0;
  ScopedHooks hooks(fake(false, "no CUDA device is visible (cudaGetDeviceCount: 0)", &probes));
  auto a = choose_device("auto");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->kind, DeviceKind::kCpu);
  EXPECT_EQ(a->log_line, "device: cpu (--device auto: no CUDA device is visible (cudaGetDeviceCount: 0))");
  auto c = choose_device("cuda");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.message(),
            "--device cuda: no CUDA device is visible (cudaGetDeviceCount: 0); use --device cpu or auto");
  EXPECT_EQ(probes, 2);
}

TEST(ChooseDevice, UnusableGpuWithoutDescription) {
  ScopedHooks hooks(fake(false, ""));
  auto c = choose_device("cuda");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.message(), "no usable GPU")) << c.message();
}

TEST(ChooseDevice, UsableGpu) {
  ScopedHooks hooks(fake(true, "NVIDIA H200 (sm_90, 139.8 GiB)"));
  auto a = choose_device("auto");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->kind, DeviceKind::kCuda);
  EXPECT_EQ(a->log_line,
            "device: cuda, NVIDIA H200 (sm_90, 139.8 GiB) (--device auto: a usable GPU was found)");
  auto c = choose_device("cuda");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->kind, DeviceKind::kCuda);
  EXPECT_TRUE(contains(c->log_line, "device: cuda, NVIDIA H200")) << c->log_line;
}

TEST(ChooseDevice, UnknownValuesNameTheFlag) {
  for (const char* bad : {"bogus", "", "CPU", "gpu", "cuda:0"}) {
    auto c = choose_device(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_TRUE(contains(c.message(), "--device")) << c.message();
    EXPECT_TRUE(contains(c.message(), "cpu, cuda or auto")) << c.message();
  }
}

TEST(ChooseDevice, RegistryClearsAndRestores) {
  register_cuda_backend({});
  {
    ScopedHooks hooks(fake(true, "fake"));
    ASSERT_NE(cuda_backend_hooks(), nullptr);
    CudaBackendHooks half;  // a probe without a factory cannot run anything: it clears
    half.probe = [] { return CudaProbe{true, "half"}; };
    register_cuda_backend(half);
    EXPECT_EQ(cuda_backend_hooks(), nullptr);
  }
  EXPECT_EQ(cuda_backend_hooks(), nullptr);
}

// The engine asks the device before it reads the model: a refused --device costs no load.
TEST(ChooseDevice, EngineRefusesBeforeLoading) {
  register_cuda_backend({});
  EngineOptions o;
  o.device = "cuda";
  auto e = Engine::open("/nonexistent/model", o);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.message(), "--device cuda")) << e.message();
  o.device = "bogus";
  e = Engine::open("/nonexistent/model", o);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.message(), "--device bogus")) << e.message();
}

// With a usable GPU, Engine::open hands the host weights to the registered factory (and its error back).
TEST(ChooseDevice, EngineUsesTheCudaFactory) {
  int creates = 0;
  ScopedHooks hooks(fake(true, "fake GPU", nullptr, &creates));
  EngineOptions o;
  o.device = "auto";
  o.dev.max_num_seqs = 3;
  auto e = Engine::open(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code", o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.message(), "fake cuda backend: create is not implemented");
  EXPECT_EQ(creates, 1);
}

TEST(ChooseDevice, EngineSaysWhichDevice) {
  register_cuda_backend({});
  EngineOptions o;
  o.device = "cpu";
  auto e = Engine::open(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code", o);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ((*e)->device(), DeviceKind::kCpu);
  // The device, then the CPU kernels (the machine's instruction set: reference is the library default).
  EXPECT_EQ((*e)->device_log().rfind("device: cpu (--device cpu); cpu kernels reference (", 0), 0u)
      << (*e)->device_log();

  testing::SynthModelOptions so;
  auto m = testing::make_synthetic(so);
  ASSERT_NE(m.engine, nullptr);
  EXPECT_EQ(m.engine->device_log(), "device: custom backend");
}

TEST(ChooseDevice, EngineChecksDeviceOptions) {
  EngineOptions o;
  o.device = "cpu";
  o.dev.gpu_memory_utilization = 0.0;
  EXPECT_FALSE(Engine::open("/nonexistent/model", o).ok());
  o.dev.gpu_memory_utilization = 1.5;
  EXPECT_FALSE(Engine::open("/nonexistent/model", o).ok());
  o.dev.gpu_memory_utilization = 0.9;
  o.dev.max_num_seqs = 0;
  auto e = Engine::open("/nonexistent/model", o);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(contains(e.message(), "max_num_seqs")) << e.message();
}

}  // namespace
}  // namespace gridq::runtime
