// Test hooks (testing.hpp).
#include "testing.hpp"

#include "backend.hpp"
#include "ccoll/error.hpp"

namespace ccoll::testing {
namespace {

gpu::Backend& current() {
  const char* why = nullptr;
  gpu::Backend* b = gpu::backend(&why);
  if (b == nullptr) throw Error(Status::kUnsupported, std::string("no device backend: ") + why);
  return *b;
}

}  // namespace

void use_emulated_device() { gpu::install_backend(gpu::make_emulated_backend()); }

const char* device_backend(const char** why) {
  gpu::Backend* b = gpu::backend(why);
  return b == nullptr ? nullptr : b->name();
}

void* device_alloc(std::size_t bytes) { return current().device_alloc(bytes); }
void device_free(void* p) { current().device_free(p); }
void device_copy(void* dst, const void* src, std::size_t bytes) {
  gpu::Backend& b = current();
  b.set_stream(nullptr);
  b.copy(dst, src, bytes);
  b.synchronize();
}

}  // namespace ccoll::testing
