#include "runtime/device.h"

#include <fmt/format.h>

#include <optional>

namespace gridq::runtime {
namespace {

// Set once at program start (before any thread asks), replaced only by tests; so no lock.
std::optional<CudaBackendHooks>& hooks_slot() {
  static std::optional<CudaBackendHooks> slot;
  return slot;
}

// "the CUDA backend", not "CUDA": a build can carry the CUDA kernels (bench) before it registers a backend.
constexpr const char* kNoCuda = "this gridq was built without the CUDA backend";

}  // namespace

void register_cuda_backend(CudaBackendHooks hooks) {
  // Hooks without a probe or a factory cannot run anything: registering them clears the slot (what tests
  // use to restore a program without CUDA).
  if (!hooks.probe || !hooks.create) {
    hooks_slot().reset();
    return;
  }
  hooks_slot() = std::move(hooks);
}

const CudaBackendHooks* cuda_backend_hooks() {
  const auto& slot = hooks_slot();
  return slot ? &*slot : nullptr;
}

Expected<DeviceChoice> choose_device(const std::string& flag) {
  if (flag == "cpu") return DeviceChoice{DeviceKind::kCpu, "device: cpu (--device cpu)"};
  if (flag != "auto" && flag != "cuda")
    return err("--device {}: expected cpu, cuda or auto", flag.empty() ? "''" : flag);
  // Probe only when CUDA is asked for or may be chosen: the probe initialises the CUDA runtime.
  const CudaBackendHooks* hooks = cuda_backend_hooks();
  std::optional<CudaProbe> probe;
  if (hooks) probe = hooks->probe();
  const bool usable = probe && probe->usable;
  std::string why_not = !hooks ? kNoCuda : probe->description;
  if (why_not.empty()) why_not = "the CUDA backend found no usable GPU";
  if (flag == "cuda") {
    if (!usable) return err("--device cuda: {}; use --device cpu or auto", why_not);
    return DeviceChoice{DeviceKind::kCuda,
                        fmt::format("device: cuda, {} (--device cuda)", probe->description)};
  }
  if (usable)
    return DeviceChoice{
        DeviceKind::kCuda,
        fmt::format("device: cuda, {} (--device auto: a usable GPU was found)", probe->description)};
  return DeviceChoice{DeviceKind::kCpu, fmt::format("device: cpu (--device auto: {})", why_not)};
}

}  // namespace gridq::runtime
