// Engine: timed, counted, poison-aware wrappers around codec and transport calls.
#include "engine.hpp"

#include <cstring>

#include "wire.hpp"

namespace ccoll::coll {

std::size_t Engine::encode(const void* in, std::size_t count, std::uint64_t stream,
                           std::uint64_t offset, std::byte* out, codec::BlockContext::Role role,
                           std::uint32_t rescale) {
  const auto t0 = Clock::now();
  std::size_t n = 0;
  try {
    n = cx_.codec.encode(in, count, {cx_.seed, cx_.call, stream, offset, role, rescale}, out);
  } catch (const Error& err) {
    // a failed encode (a device error) must not leave peers waiting: send a poisoned payload,
    // finish the schedule, and throw at the end on every rank that depends on it
    poison(err);
    n = write_poisoned(out);
  }
  if (poisoned_) poison_payload(out);
  cx_.counters.encode_seconds += since(t0);
  return n;
}

void Engine::encode_many(codec::EncodeJob* jobs, std::size_t n, const codec::JobFn& ready) {
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    jobs[i].ctx.seed = cx_.seed;
    jobs[i].ctx.call = cx_.call;
  }
  std::size_t handed = 0;  // jobs whose ready() has run
  Hooks hook;
  const codec::JobFn hand_over = [&](std::size_t i) {
    if (poisoned_) poison_payload(jobs[i].out);
    ++handed;
    if (ready) hook([&] { ready(i); });
  };
  try {
    cx_.codec.encode_many(jobs, n, hand_over);
  } catch (const Error& err) {
    if (hook.running) throw;
    poison(err);  // no peer waits: the rest go out poisoned
    for (std::size_t i = handed; i < n; ++i) {
      jobs[i].bytes = write_poisoned(jobs[i].out);
      hand_over(i);
    }
  }
  cx_.counters.encode_seconds += since(t0) - hook.seconds;
}

void Engine::decode_many(codec::DecodeJob* jobs, std::size_t n, const codec::JobFn& arrive) {
  const auto t0 = Clock::now();
  std::size_t arrived = 0;
  Hooks hook;
  const codec::JobFn take = [&](std::size_t i) {
    ++arrived;
    if (arrive) hook([&] { arrive(i); });
    codec::DecodeJob& j = jobs[i];
    if (!j.skip && unusable(j.in, j.bytes)) j.skip = true;
  };
  try {
    cx_.codec.decode_many(jobs, n, take);
  } catch (const Error& err) {
    if (hook.running) throw;
    poison(err);
    for (std::size_t i = arrived; i < n; ++i) take(i);  // the schedule still forwards them
  }
  cx_.counters.decode_seconds += since(t0) - hook.seconds;
}

bool Engine::decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out,
                    bool accumulate) {
  if (unusable(in, bytes)) return false;
  const auto t0 = Clock::now();
  try {
    if (accumulate) {
      cx_.codec.decode_accumulate(in, bytes, count, out);
    } else {
      cx_.codec.decode(in, bytes, count, out);
    }
  } catch (const Error& err) {
    poison(err);
    cx_.counters.decode_seconds += since(t0);
    return false;
  }
  cx_.counters.decode_seconds += since(t0);
  return true;
}

std::size_t Engine::reduce_encode(const std::byte* in, std::size_t bytes, std::size_t count,
                                  void* acc, std::uint64_t stream, std::uint64_t offset,
                                  std::byte* out) {
  const codec::BlockContext::Role hop = codec::BlockContext::Role::kHop;
  if (unusable(in, bytes)) return encode(acc, count, stream, offset, out, hop);
  const auto t0 = Clock::now();
  std::size_t n = 0;
  try {
    n = cx_.codec.reduce_encode(in, bytes, count, acc, {cx_.seed, cx_.call, stream, offset, hop},
                                out);
  } catch (const Error& err) {
    poison(err);
    cx_.counters.decode_seconds += since(t0);
    return encode(acc, count, stream, offset, out, hop);
  }
  if (poisoned_) poison_payload(out);
  cx_.counters.decode_seconds += since(t0);
  return n;
}

void Engine::reduce_encode_many(codec::ReduceJob* jobs, std::size_t n,
                                const codec::HopHooks& hooks) {
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    jobs[i].ctx.seed = cx_.seed;
    jobs[i].ctx.call = cx_.call;
  }
  std::size_t arrived = 0;
  std::size_t handed = 0;
  Hooks hook;
  auto take = [&](std::size_t i) {  // job i has arrived: skip what cannot be added
    ++arrived;
    codec::ReduceJob& j = jobs[i];
    if (!j.skip && unusable(j.in, j.bytes)) j.skip = true;
  };
  codec::HopHooks mine;
  mine.arrive = [&](std::size_t i) {
    hook([&] { hooks.arrive(i); });
    take(i);
  };
  mine.poll = [&](std::size_t i) {
    const bool here = hook([&] { return hooks.poll(i); });
    if (here) take(i);
    return here;
  };
  mine.ready = [&](std::size_t i) {
    if (poisoned_) poison_payload(jobs[i].out);
    ++handed;
    hook([&] { hooks.ready(i); });
  };
  try {
    cx_.codec.reduce_encode_many(jobs, n, mine);
  } catch (const Error& err) {
    if (hook.running) throw;
    poison(err);
    cx_.counters.decode_seconds += since(t0) - hook.seconds;
    for (std::size_t i = handed; i < n; ++i) {  // the rest: `acc` as it is, marked poisoned
      if (i >= arrived) mine.arrive(i);
      jobs[i].out_bytes = encode(jobs[i].acc, jobs[i].count, jobs[i].ctx.stream, jobs[i].ctx.offset,
                                 jobs[i].out, codec::BlockContext::Role::kHop);
      mine.ready(i);
    }
    return;
  }
  cx_.counters.decode_seconds += since(t0) - hook.seconds;
}

std::size_t Engine::add(const std::byte* a, std::size_t a_bytes, const std::byte* own,
                        std::size_t own_bytes, std::size_t count, std::uint64_t stream,
                        std::uint64_t offset, std::byte* out) {
  const auto t0 = Clock::now();
  std::size_t n = 0;
  // an empty message where a summand was due: this rank's failure (the codec is not asked)
  if (a_bytes == 0) poison(Status::kCorruptData, "an empty message where a payload was due", rank_);
  if (!unusable(a, a_bytes)) {
    try {
      n = cx_.codec.add_encoded(
          a, a_bytes, own, own_bytes, count,
          {cx_.seed, cx_.call, stream, offset, codec::BlockContext::Role::kHop}, out);
    } catch (const Error& err) {
      poison(err);
    }
  }
  if (poisoned_) {
    if (out != own) copy_payload(out, own, own_bytes);
    n = own_bytes;
    poison_payload(out);
  }
  cx_.counters.decode_seconds += since(t0);
  return n;
}

Request Engine::send(const std::byte* buf, std::size_t bytes, int peer, int tag) {
  cx_.counters.bytes_sent += bytes;
  return cx_.transport.isend(buf, bytes, peer, tag);
}

Request Engine::recv(std::byte* buf, std::size_t capacity, int peer, int tag) {
  return cx_.transport.irecv(buf, capacity, peer, tag);
}

std::size_t Engine::wait_recv(Request& r) {
  const auto t0 = Clock::now();
  std::size_t n = 0;
  try {
    n = cx_.transport.wait(r);
  } catch (const Error& err) {
    poison(err);
    n = 0;
  }
  cx_.counters.comm_seconds += since(t0);
  cx_.counters.bytes_received += n;
  return n;
}

bool Engine::test_recv(Request& r) {
  try {
    return cx_.transport.test(r);
  } catch (const Error&) {
    return true;  // wait_recv() reports it
  }
}

void Engine::wait_send(Request& r) {
  const auto t0 = Clock::now();
  cx_.transport.wait(r);
  cx_.counters.comm_seconds += since(t0);
}

bool Engine::payload_poisoned(const std::byte* p, std::size_t bytes, wire::Poison* who) {
  return cx_.payloads != nullptr ? cx_.payloads->is_poisoned(p, bytes, who)
                                 : wire::is_poisoned(p, bytes, who);
}

void Engine::poison_payload(std::byte* p) {
  if (cx_.payloads != nullptr) {
    cx_.payloads->set_poisoned(p, poison_mark());
  } else {
    wire::set_poisoned(p, poison_mark());
  }
}

std::size_t Engine::write_poisoned(std::byte* out) {
  return cx_.payloads != nullptr ? cx_.payloads->write_poisoned(out, poison_mark())
                                 : wire::write_poisoned(out, poison_mark());
}

std::size_t Engine::received_nothing(std::byte* slot, int peer) {
  poison(Status::kCorruptData,
         "an empty message from " + rank_name(peer) + " where a payload was due", rank_);
  return write_poisoned(slot);
}

void Engine::copy_payload(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (cx_.payloads != nullptr) {
    cx_.payloads->copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

bool Engine::unusable(const std::byte* in, std::size_t bytes) {
  if (bytes == 0 && poisoned_) return true;  // the receive failed and poisoned this rank
  wire::Poison who;
  if (!payload_poisoned(in, bytes, &who)) return false;
  if (!poisoned_) {
    // the mark came from a peer: a rank named only when it is one of this communicator's
    const bool known = who.rank >= 0 && who.rank < size_ && who.rank != rank_;
    const int origin = known ? who.rank : -1;
    const auto status = static_cast<Status>(who.status);
    const bool named = who.status >= static_cast<int>(Status::kInvalidArgument) &&
                       who.status <= static_cast<int>(Status::kNcclError);
    poison(Status::kCorruptData,
           known ? rank_name(origin) + " failed in this call" +
                       (named ? std::string(" (") + status_string(status) + ")" : "") +
                       ", so this result is invalid; " + rank_name(origin) + "'s error says why"
                 : "a peer rank failed in this call, so this result is invalid",
           origin);
  }
  return true;
}

void Engine::poison(Status code, const std::string& why, int origin) {
  if (!poisoned_) {
    poisoned_ = true;
    code_ = code;
    why_ = why;
    origin_ = origin;
  }
}

void Engine::finish() const {
  if (poisoned_) throw Error(code_, rank_name(rank_) + ": " + why_);
}

void divide_elements(void* data, std::size_t count, codec::DType dtype, int ranks) {
  if (dtype == codec::DType::kFloat64) {
    auto* x = static_cast<double*>(data);
    const auto d = static_cast<double>(ranks);
    for (std::size_t i = 0; i < count; ++i) x[i] /= d;
  } else {
    auto* x = static_cast<float*>(data);
    const auto d = static_cast<float>(ranks);
    for (std::size_t i = 0; i < count; ++i) x[i] /= d;
  }
}

void divide_elements(Context& cx, void* data, std::size_t count, int ranks) {
  if (cx.elements != nullptr) {
    cx.elements->divide(data, count, cx.codec.dtype(), ranks);
  } else {
    divide_elements(data, count, cx.codec.dtype(), ranks);
  }
}

void copy_elements(Context& cx, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (cx.elements != nullptr) {
    cx.elements->copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace ccoll::coll
