// Test hooks (testing.hpp).
#include "testing.hpp"

#include <mpi.h>

#include <cstring>
#include <vector>

#include "agreement.hpp"
#include "backend.hpp"
#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "comm_context.hpp"
#include "config.hpp"
#include "device_codec.hpp"
#include "device_ops.hpp"
#include "hierarchical.hpp"
#include "levels.hpp"
#include "mpi_stream.hpp"
#include "mpi_transport.hpp"
#include "nccl_transport.hpp"
#include "node_gather.hpp"
#include "placement.hpp"
#include "spec.hpp"

namespace ccoll::testing {
namespace {

gpu::Backend& current() {
  const char* why = nullptr;
  gpu::Backend* b = gpu::backend(&why);
  if (b == nullptr) throw Error(Status::kUnsupported, std::string("no device backend: ") + why);
  return *b;
}

}  // namespace

void use_emulated_device() {
  gpu::install_backend(gpu::make_emulated_backend());
  // CCOLL_EMULATED_EAGER=compute|copy: that queue runs work as it is queued (tests of ordering)
  if (const int q = env_emulated_eager(); q >= 0) gpu::emulated_set_eager(q);
}
void set_emulated_device(int device) { gpu::emulated_set_device(device); }
void fail_emulated_pointer_queries(bool fail) { gpu::emulated_fail_pointer_queries(fail); }
std::size_t emulated_allocations() { return gpu::emulated_allocations(); }
std::size_t emulated_widenings() { return gpu::emulated_widenings(); }
std::size_t emulated_host_syncs() { return gpu::emulated_host_syncs(); }
void device_synchronize() { current().synchronize(); }
void corrupt_next_stream_receive(std::size_t bytes) { ccoll::corrupt_next_stream_receive(bytes); }
void corrupt_next_receive(std::size_t bytes) { ccoll::corrupt_next_transport_receive(bytes); }

std::size_t device_payload_workspaces(MPI_Comm comm) {
  gpu::Backend* b = gpu::backend();
  CommContext* ctx = CommContext::find(comm);
  if (b == nullptr || ctx == nullptr) return 0;
  return ctx->plans_allocating_with(&device_allocator(*b));
}

const char* device_backend(const char** why) {
  gpu::Backend* b = gpu::backend(why);
  return b == nullptr ? nullptr : b->name();
}

void scale_round_max(double* values, std::size_t n, MPI_Comm comm) {
  call::MpiExchange(comm).max(values, n);
}

namespace {
void choose(MPI_Comm comm, const char* codec, std::size_t count, int candidate, bool device) {
  CommContext& ctx = CommContext::get(comm);
  LevelChoice& l =
      ctx.level_choice(static_cast<int>(call::Kind::kAllreduce), device,
                       parse_codec_spec(codec).canonical, size_class_of(count * sizeof(float)));
  l.calls = LevelChoice::kTuningCalls;
  l.choice = candidate;
}
}  // namespace

void choose_hierarchical(MPI_Comm comm, const char* codec, std::size_t count) {
  choose(comm, codec, count, LevelChoice::kHierarchical, false);
}

void choose_flat(MPI_Comm comm, const char* codec, std::size_t count, bool device_buffers) {
  choose(comm, codec, count, LevelChoice::kFlat, device_buffers);
}

std::uint64_t node_pieces_sent_early() { return call::pieces_sent_early(); }

std::size_t level_buffer_bytes(MPI_Comm comm, const char* codec) {
  const CommContext* ctx = CommContext::find(comm);
  return ctx == nullptr ? 0
                        : call::level_buffer_bytes(*ctx, call::Kind::kAllreduce,
                                                   parse_codec_spec(codec).canonical);
}

std::size_t folded_scale_rounds() { return call::folded_scale_rounds(); }

std::size_t allreduce_plan_bytes(MPI_Comm comm, const char* codec, std::size_t count) {
  const CommContext* ctx = CommContext::find(comm);
  if (ctx == nullptr) return 0;
  PlanKey key;
  key.kind = static_cast<int>(call::Kind::kAllreduce);
  key.count = count;
  key.codec = parse_codec_spec(codec).canonical;
  const Plan* plan = ctx->find_plan(key);
  return plan == nullptr ? 0 : plan->held_bytes();
}

std::size_t hierarchical_node_sums_block(const char* codec, std::size_t count, int node_ranks,
                                         int nodes) {
  std::vector<int> shards;
  for (int i = 0; i < node_ranks; ++i) {
    shards.push_back(static_cast<int>(coll::chunk_count(count, node_ranks, i)));
  }
  return call::node_sums_block(codec, codec::DType::kFloat32, shards, nodes);
}

void* device_alloc(std::size_t bytes) { return current().device_alloc(bytes); }
void device_free(void* p) { current().device_free(p); }
void device_copy(void* dst, const void* src, std::size_t bytes) {
  gpu::Backend& b = current();
  b.set_stream(nullptr);
  b.copy(dst, src, bytes);
  b.synchronize();
}

bool nccl_send_to_self(std::size_t bytes, std::string& why) {
  try {
    gpu::Backend& b = current();
    if (b.host_accessible()) {
      why = "the emulated device has no NCCL";
      return false;
    }
    MPI_Comm self;
    MPI_Comm_dup(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
    std::vector<unsigned char> in(bytes), out(bytes, 0);
    for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 7 + 1);
    void* src = b.device_alloc(bytes);
    void* dst = b.device_alloc(bytes);
    b.set_stream(nullptr);
    b.copy(src, in.data(), bytes);
    b.synchronize();
    bool same = false;
    {
      auto t = make_nccl_transport(self, env_config());
      t->set_stream(nullptr);
      t->begin_group();
      coll::Request s = t->isend(src, bytes, 0, 0);
      coll::Request r = t->irecv(dst, bytes, 0, 0);
      t->end_group();
      const std::size_t got = t->wait(r);
      t->wait(s);
      b.copy(out.data(), dst, bytes);
      b.synchronize();
      same = got == bytes && std::memcmp(in.data(), out.data(), bytes) == 0;
    }
    b.device_free(src);
    b.device_free(dst);
    MPI_Comm_free(&self);
    if (!same) why = "the bytes that arrived differ from those sent";
    return same;
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
}

bool mpi_cuda_aware() { return call::mpi_cuda_aware(); }

}  // namespace ccoll::testing
