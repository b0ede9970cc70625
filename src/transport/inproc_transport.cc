// Mailbox transport between threads (see inproc_transport.hpp).
#include "inproc_transport.hpp"

#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "ccoll/error.hpp"

namespace ccoll {

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
  Pending p;
  p.bytes = bytes;
  return add(p);  // eager: the send is complete already
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
  if (!p.recv) return p.bytes;
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

bool InprocTransport::test(coll::Request& request) {
  const Pending& p = pending_.at(request.id);
  if (!p.recv) return true;
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
