// Linked into the test build of the NCCL interposer only (libccoll_nccl_testing): ccoll's
// emulated device in place of CUDA, running each kernel as it is queued, so that the stand-in
// NCCL (standin_nccl.cc), which completes every call before it returns, finds its inputs
// written.
#include "backend.hpp"

namespace {

const bool g_installed = [] {
  ccoll::gpu::install_backend(ccoll::gpu::make_emulated_backend());
  ccoll::gpu::emulated_set_eager(0);  // the compute queue
  return true;
}();

}  // namespace
