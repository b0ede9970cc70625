// Buffer placement and the choice of the data path (placement.hpp).
#include "placement.hpp"

#include "data_path.hpp"
#include "device_codec.hpp"
#include "half_call.hpp"

namespace ccoll::call {
namespace {

// The host copy of recvbuf: what the call writes, or in place what it reads if more.
std::size_t staged_recv_bytes(const Call& call, const Placement& pl, const CommContext& ctx,
                              std::size_t es) {
  // a reduce-scatter in place reads all of recvbuf, more than it writes
  const std::size_t in = call.in_place() ? call.input_count(ctx.size()) * es : 0;
  return in > pl.out_bytes ? in : pl.out_bytes;
}

// The host-copy path: this rank's input copied from the device into pinned host buffers, and
// `call` pointed at them (in-place calls stay in place). run_call() copies the output back.
void stage_in(Call& call, Placement& pl, CommContext& ctx, std::size_t es) {
  gpu::Backend& b = *pl.device;
  // 16-bit input no codec reads on this path: widened on the device before the copy
  widen_input(call, call.input_count(ctx.size()), &b);
  const std::size_t bytes = call.input_count(ctx.size()) * es;
  const std::size_t own_at = call.own_offset(es, ctx.rank());
  auto* recv =
      static_cast<std::byte*>(ctx.stage_recv().get(b, staged_recv_bytes(call, pl, ctx, es), true));
  if (call.in_place()) {
    b.copy(recv + own_at, static_cast<const std::byte*>(call.recvbuf) + own_at, bytes);
  } else {
    void* send = ctx.stage_send().get(b, bytes, true);
    b.copy(send, call.sendbuf, bytes);
    call.sendbuf = send;
  }
  b.synchronize();
  call.recvbuf = recv;
  pl.staged_recv = recv;
}

// A transport's own communicator (`t`, if made: NCCL's) belongs to the device it was made on.
void check_own_device(const TransportRow& row, DeviceTransport* t, const Placement& pl,
                      LocalError& bad) {
  if (t == nullptr || pl.device->host_accessible() || t->device() == pl.facts.current_device) {
    return;
  }
  const std::string d = std::to_string(t->device());
  bad.set(kArgDevice, Status::kInvalidArgument,
          std::string("CCOLL_TRANSPORT=") + row.name + ": this communicator's " + row.name +
              " communicator belongs to device " + d + ", but the current device is " +
              std::to_string(pl.facts.current_device) + " (valid: call on device " + d +
              ", or on another communicator)");
}

}  // namespace

Placement probe_buffers(const Call& call) {
  Placement pl;
  pl.user_recv = call.recvbuf;
  gpu::Backend* b = call.count > 0 ? device_backend() : nullptr;
  if (b == nullptr) return pl;
  BufferFacts& f = pl.facts;
  try {
    // one pointer query per buffer: its device, or -1 for host memory
    const bool has_send = !call.in_place() && call.sendbuf != nullptr;
    const int recv_on = call.recvbuf != nullptr ? b->device_of(call.recvbuf) : -1;
    const int send_on = has_send ? b->device_of(call.sendbuf) : -1;
    const bool recv_device = recv_on >= 0;
    f.mixed = has_send && call.recvbuf != nullptr && recv_device != (send_on >= 0);
    if (recv_device && !f.mixed) {
      pl.device = b;
      f.device = true;
      // kernels and copies run on the current device: buffers elsewhere are an error
      f.current_device = b->current_device();
      if (recv_on != f.current_device) {
        f.recv_elsewhere = true;
        f.elsewhere_arg = "recvbuf";
        f.elsewhere_device = recv_on;
      } else if (has_send && send_on != f.current_device) {
        f.elsewhere_arg = "sendbuf";
        f.elsewhere_device = send_on;
      }
    }
  } catch (const Error& e) {
    // a CUDA error while classifying: never take device memory for host memory; the call
    // still takes part in the agreement, which raises it on every rank
    pl = Placement{};
    pl.user_recv = call.recvbuf;
    pl.facts.probe_error = e.message();
    pl.facts.probe_code = e.code();
  }
  return pl;
}

void check_device_transport(const Placement& pl, Checked& c) {
  const TransportRow& row = transport_row(c.transport);
  std::string why;
  if (row.available == nullptr || row.available(pl.device->host_accessible(), why)) return;
  std::string valid;
  for (const TransportRow& r : transport_table()) {
    std::string unused;
    if (r.available == nullptr || r.available(pl.device->host_accessible(), unused)) {
      valid += (valid.empty() ? "" : ", ") + std::string(r.name);
    }
  }
  c.bad.set(
      kArgEnvironment, Status::kUnsupported,
      std::string("CCOLL_TRANSPORT=") + row.name + ": " + why + " (valid here: " + valid + ")");
}

void choose_device_path(Call& call, Placement& pl, Checked& c, CommContext& ctx, bool compress) {
  LocalError& bad = c.bad;
  if (!bad.ok()) return;
  const TransportRow& tr = transport_row(resolve_transport(c.transport));
  const bool emulated = pl.device->host_accessible();
  pl.out_bytes = c.total * c.elem_bytes;
  // algorithm=hierarchical on a transport of its own (NCCL): the node's steps on the device
  // buffers through it (on the emulated device MPI stands in), the cross-node step on device
  // memory, which takes its own path
  if (compress && tr.every_rank && coll::runs_two_level(c.algorithm)) {
    pl.path = tr.path_on(emulated);
    if (const Topology* topo = ctx.topology_if_made()) {
      CommContext* node = topo->node != MPI_COMM_NULL ? CommContext::find(topo->node) : nullptr;
      if (node != nullptr) check_own_device(tr, node->device_transport_if_made(tr.kind), pl, bad);
    }
    return;
  }
  // the codec's kernels where it has them and the schedule runs device codecs (the schedule
  // table), else host copies; a transport that needs exact lengths carries only the schedules
  // that run in lock step (the others move their payloads through MPI, staged)
  const coll::Op op = op_of(call);
  const bool kernels =
      compress && has_device_kernels(c.spec, c.dtype) && coll::device_codecs_run(c.algorithm, op);
  const bool carried = kernels && (!tr.exact_lengths || coll::runs_in_lock_step(c.algorithm, op));
  if (carried) {
    pl.path = tr.path_on(emulated);
    if (tr.every_rank) check_own_device(tr, ctx.device_transport_if_made(tr.kind), pl, bad);
  } else if (kernels) {
    pl.path = DataPath::kStaged;
  } else {
    pl.path = DataPath::kHostCopy;
    try {
      stage_in(call, pl, ctx, c.elem_bytes);
    } catch (const Error& e) {
      bad.set(kArgDevice, e.code(), "device buffers: copy to the host failed: " + e.message());
    }
  }
}

void fall_back_to_host_copy(Call& call, Placement& pl, CommContext& ctx, std::size_t es,
                            Status& code, std::string& error) {
  pl.path = DataPath::kHostCopy;
  try {
    stage_in(call, pl, ctx, es);
  } catch (const Error& e) {
    error = e.message();
    code = e.code();
    call.input_half = Half::kNone;  // the scratch below stands in for the input
    call.recvbuf = ctx.stage_recv().get(*pl.device, staged_recv_bytes(call, pl, ctx, es), true);
    if (!call.in_place()) {
      call.sendbuf = ctx.stage_send().get(*pl.device, call.input_count(ctx.size()) * es, true);
    }
  }
}

}  // namespace ccoll::call
