// In-process transport: ranks are threads of one process and messages are copied through shared
// mailboxes with MPI matching order. Used to unit-test schedules quickly, at any rank count,
// without MPI. A receive that waits longer than the fabric's timeout throws instead of hanging;
// a send whose buffer changes before its wait() (which MPI may still be reading) throws there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "transport.hpp"

namespace ccoll {

class InprocFabric {
 public:
  /// Called on every message as it is sent (src, dst, tag, payload); tests use it to corrupt.
  using Tamper = std::function<void(int, int, int, std::vector<std::byte>&)>;

  explicit InprocFabric(int size, std::chrono::seconds timeout = std::chrono::seconds(120))
      : size_(size), timeout_(timeout), arrivals_(static_cast<std::size_t>(size)) {}
  int size() const { return size_; }
  void set_tamper(Tamper t) { tamper_ = std::move(t); }

 private:
  friend class InprocTransport;
  friend void run_inproc(int, const std::function<void(coll::Transport&)>&, const Tamper&);
  using Key = std::tuple<int, int, int>;  // src, dst, tag
  struct Mailbox {
    std::uint64_t sent = 0;
    std::uint64_t posted = 0;
    std::map<std::uint64_t, std::vector<std::byte>> messages;  // by send sequence number
  };
  int size_;
  std::chrono::seconds timeout_;
  Tamper tamper_;
  std::mutex mu_;
  /// One per receiving rank, so that a send wakes its receiver only (not every rank's thread:
  /// at hundreds of ranks waking all of them at each message dominated the run)
  std::vector<std::condition_variable> arrivals_;
  std::map<Key, Mailbox> boxes_;
};

class InprocTransport final : public coll::Transport {
 public:
  InprocTransport(InprocFabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return fabric_.size(); }
  coll::Request isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  coll::Request irecv(void* buf, std::size_t capacity, int peer, int tag) override;
  std::size_t wait(coll::Request& request) override;
  bool test(coll::Request& request) override;
  /// Requests posted and not waited for yet.
  std::size_t outstanding() const { return pending_.size() - free_.size(); }

 private:
  struct Pending {
    bool recv = false;
    std::byte* buf = nullptr;  // the receive buffer, or the send's (checked unchanged at wait)
    std::size_t bytes = 0;     // capacity (recv) or length (send)
    InprocFabric::Key key{};
    std::uint64_t seq = 0;     // a receive's place in its mailbox
    std::uint64_t digest = 0;  // a send's: its bytes as isend() copied them
  };
  coll::Request add(const Pending& p);
  /// Throws kInternal when a send's buffer no longer holds what isend() copied.
  void check_unchanged(const Pending& send) const;
  InprocFabric& fabric_;
  int rank_;
  std::vector<Pending> pending_;
  std::vector<std::size_t> free_;
};

/// Runs `body(transport)` on `size` threads, one per rank, and rethrows the first exception
/// (after all threads have finished). A body that returns with requests it never waited for, or
/// leaves messages nobody received, is an error (kInternal): a schedule must finish every
/// transfer it starts, even when it fails, or a later call's messages would match them.
void run_inproc(int size, const std::function<void(coll::Transport&)>& body,
                const InprocFabric::Tamper& tamper = {});

}  // namespace ccoll
