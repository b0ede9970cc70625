// Mailbox transport between threads (see inproc_transport.hpp).
#include "inproc_transport.hpp"

#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "ccoll/error.hpp"

namespace ccoll {
namespace {

// FNV-1a over a send buffer's bytes: what isend() copied, checked again when the send completes
std::uint64_t digest(const std::byte* p, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<std::uint64_t>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

coll::Request InprocTransport::add(const Pending& p) {
  std::size_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
    pending_[id] = p;
  } else {
    id = pending_.size();
    pending_.push_back(p);
  }
  return coll::Request{id};
}

coll::Request InprocTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  std::vector<std::byte> msg(bytes);
  if (bytes != 0) std::memcpy(msg.data(), buf, bytes);
  if (fabric_.tamper_) fabric_.tamper_(rank_, peer, tag, msg);
  {
    std::lock_guard<std::mutex> lock(fabric_.mu_);
    auto& box = fabric_.boxes_[{rank_, peer, tag}];
    box.messages.emplace(box.sent++, std::move(msg));
  }
  fabric_.arrivals_.at(static_cast<std::size_t>(peer)).notify_all();
  // the message is copied now, but MPI may read the buffer until the send completes: a buffer
  // that changes before wait() is a schedule's error that a real transport turns into corrupt
  // data (checked there)
  Pending p;
  p.bytes = bytes;
  p.buf = const_cast<std::byte*>(static_cast<const std::byte*>(buf));
  p.key = {rank_, peer, tag};
  p.digest = digest(p.buf, bytes);
  return add(p);
}

coll::Request InprocTransport::irecv(void* buf, std::size_t capacity, int peer, int tag) {
  Pending p;
  p.recv = true;
  p.buf = static_cast<std::byte*>(buf);
  p.bytes = capacity;
  p.key = {peer, rank_, tag};
  {
    std::lock_guard<std::mutex> lock(fabric_.mu_);
    p.seq = fabric_.boxes_[p.key].posted++;
  }
  return add(p);
}

std::size_t InprocTransport::wait(coll::Request& request) {
  const Pending p = pending_.at(request.id);
  free_.push_back(request.id);
  request.id = static_cast<std::size_t>(-1);
  if (!p.recv) {
    check_unchanged(p);
    return p.bytes;
  }
  std::vector<std::byte> msg;
  {
    std::unique_lock<std::mutex> lock(fabric_.mu_);
    auto& box = fabric_.boxes_[p.key];
    const bool arrived = fabric_.arrivals_[static_cast<std::size_t>(rank_)].wait_for(
        lock, fabric_.timeout_, [&] { return box.messages.count(p.seq) != 0; });
    if (!arrived) {
      throw Error(Status::kInternal, "inproc transport: rank " + std::to_string(rank_) +
                                         " timed out waiting for rank " +
                                         std::to_string(std::get<0>(p.key)));
    }
    auto node = box.messages.extract(p.seq);
    msg = std::move(node.mapped());
  }
  if (msg.size() > p.bytes) {
    throw Error(Status::kCorruptData, "message of " + std::to_string(msg.size()) +
                                          " bytes exceeds the receive capacity of " +
                                          std::to_string(p.bytes) + " bytes");
  }
  if (!msg.empty()) std::memcpy(p.buf, msg.data(), msg.size());
  return msg.size();
}

void InprocTransport::check_unchanged(const Pending& send) const {
  if (send.buf == nullptr || send.bytes == 0 || digest(send.buf, send.bytes) == send.digest) return;
  throw Error(Status::kInternal, "inproc transport: rank " + std::to_string(rank_) + "'s send of " +
                                     std::to_string(send.bytes) + " bytes to rank " +
                                     std::to_string(std::get<1>(send.key)) + " (tag " +
                                     std::to_string(std::get<2>(send.key)) +
                                     ") changed its buffer before the send completed");
}

bool InprocTransport::test(coll::Request& request) {
  Pending& p = pending_.at(request.id);
  if (!p.recv) {  // complete: checked now, and its buffer free from here on
    check_unchanged(p);
    p.buf = nullptr;
    return true;
  }
  std::lock_guard<std::mutex> lock(fabric_.mu_);
  return fabric_.boxes_[p.key].messages.count(p.seq) != 0;
}

void run_inproc(int size, const std::function<void(coll::Transport&)>& body,
                const InprocFabric::Tamper& tamper) {
  InprocFabric fabric(size);
  if (tamper) fabric.set_tamper(tamper);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        InprocTransport t(fabric, r);
        body(t);
        if (t.outstanding() != 0) {
          throw Error(Status::kInternal, "inproc transport: rank " + std::to_string(r) + " left " +
                                             std::to_string(t.outstanding()) +
                                             " requests unwaited");
        }
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (const auto& [key, box] : fabric.boxes_) {
    if (!box.messages.empty()) {
      throw Error(Status::kInternal, "inproc transport: " + std::to_string(box.messages.size()) +
                                         " messages from rank " + std::to_string(std::get<0>(key)) +
                                         " to rank " + std::to_string(std::get<1>(key)) +
                                         " were never received");
    }
  }
}

}  // namespace ccoll
