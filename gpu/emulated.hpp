// What the emulated implementations of the kernel families (<family>_emulated.cc) need from the
// emulated backend's runtime (emulated_runtime.cc). Internal to gpu/.
#pragma once

#include <functional>

#include "backend.hpp"

namespace ccoll::gpu::emulated {

/// Queues `work` on the calling thread's current emulated queue: a kernel launch. It runs when
/// the queue is run (backend.hpp's emulated model), not now.
void launch(std::function<void()> work);
/// Throws ccoll::Error(kCudaError) when `p` is device memory of another device than the current
/// one: a kernel's operand there faults on a GPU (no peer access is enabled).
void require_current_device(const Backend& b, const void* p, const char* kernel);
/// Counts one cast decode (16-bit values widened into fp32) for emulated_widenings().
void count_widening();

}  // namespace ccoll::gpu::emulated
