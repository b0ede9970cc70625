// How a codec family's device kernels meet a backend. A family (maxnorm, sketch, topk, ...)
// declares its kernel interface, a class derived from Kernels with a kFamily name, in its
// <family>_device.hpp beside the per-thread functions the kernels share, and implements it once
// per backend kind: <family>_cuda.cu (CUDA kernels on the caller's stream) and
// <family>_emulated.cc (the same per-thread functions in host loops on the emulated queues).
// Each implementation file registers itself with a static RegisterKernels, so that neither
// backend lists the families: Backend::kernels<K>() makes the registered implementation for its
// kind on first use.
//
// The registrations are static objects, so their object files must be linked whole: every
// target links the objects themselves (the libraries, and ccoll_base for the tests), never an
// archive from which a linker could drop them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ccoll::gpu {

class Backend;

/// What a backend is, for the kernels registered for it.
enum class BackendKind : std::uint8_t { kCuda = 0, kEmulated = 1 };
inline constexpr std::size_t kBackendKinds = 2;
/// Kernel families a process may register (a fixed table: lookups take no lock).
inline constexpr std::size_t kMaxKernelFamilies = 32;

/// The base of every family's kernel interface.
class Kernels {
 public:
  virtual ~Kernels() = default;
};

using KernelFactory = std::unique_ptr<Kernels> (*)(Backend&);

/// A new family id (0, 1, ...); family_id<K>() keeps one per family.
std::size_t next_family_id();
template <class K>
std::size_t family_id() {
  static const std::size_t id = next_family_id();
  return id;
}

/// Registers `make` as family `family`'s kernels (named `name` in errors) on backends of `kind`.
/// A second registration of the same family and kind is ignored.
void register_kernels(BackendKind kind, std::size_t family, const char* name, KernelFactory make);
/// The factory registered for `family` on `kind`, or null.
KernelFactory registered_kernels(BackendKind kind, std::size_t family);

/// A static object of an implementation file: registers Impl (constructed from the Backend&) as
/// family K's kernels on backends of `kind`.
template <class K, class Impl>
struct RegisterKernels {
  explicit RegisterKernels(BackendKind kind) {
    register_kernels(kind, family_id<K>(), K::kFamily, [](Backend& b) -> std::unique_ptr<Kernels> {
      return std::make_unique<Impl>(b);
    });
  }
};

}  // namespace ccoll::gpu
