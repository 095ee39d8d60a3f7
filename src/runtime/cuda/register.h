// The CUDA backend's one entry point for programs: registers its probe and factory with runtime/device.h
// (register_cuda_backend), so `--device cuda|auto` can pick it. runtime/ never links CUDA; cli/main.cpp calls
// this at start in a CUDA build. Defined in cuda_backend.cpp.
#pragma once

namespace gridq::cuda {
void register_backend();
}
