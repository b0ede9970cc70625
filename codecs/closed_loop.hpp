// ClosedLoopCodec: what the host codecs that keep temporal's state per tensor share (temporal,
// ef=21): the inner maxnorm codec, the canonical spec, the state (TemporalState) with its
// checksum, the restart on reset or on a call that went uncompressed, checkpoints in temporal's
// form, the fallback test's room for past coding errors, and the output transform y <- beta·y +
// decoded sum.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "forwarding.hpp"
#include "state_io.hpp"
#include "temporal_rules.hpp"

namespace ccoll::codec {

template <class T>
class ClosedLoopCodec : public ForwardingCodec {
 public:
  const std::string& spec() const override { return spec_; }
  // what is coded carries past coding errors: test x against a limit that leaves that room
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return inner_->needs_fallback(data, count, temporal_fallback_ranks(ranks));
  }
  void reset_state() override { state_.clear(); }
  void uncompressed_call() override { reset_state(); }
  std::uint64_t state_fingerprint() const override { return state_.fingerprint; }
  void save_state(std::vector<std::byte>& out) const override {
    save_temporal<T>(out, state_.fingerprint,
                     [&](int k) -> const std::vector<T>& { return state_.array(k); });
  }
  void load_state(const std::byte* in, std::size_t bytes) override {
    load_temporal<T>(in, bytes, spec_, state_.fingerprint,
                     [&](int k, std::vector<T> v) { state_.array(k) = std::move(v); });
  }

 protected:
  ClosedLoopCodec(std::unique_ptr<Codec> inner, std::string spec)
      : inner_(std::move(inner)), spec_(std::move(spec)) {
    set_target(inner_.get());
  }
  // o <- beta·y + o and y <- o, element by element (y restarts at zero for another count), and
  // in the same pass a position-dependent checksum of y's bits (the state that must match
  // across ranks), never 0
  void finish_output(T beta, void* out, std::size_t count) {
    T* o = static_cast<T*>(out);
    std::vector<T>& y = state_.y;
    if (y.size() != count) y.assign(count, T(0));
    std::uint64_t terms = 0;
    for (std::size_t i = 0; i < count; ++i) {
      o[i] = beta * y[i] + o[i];
      y[i] = o[i];
      std::uint64_t b = 0;
      std::memcpy(&b, &y[i], sizeof(T));
      terms += temporal_checksum_term(b, i);
    }
    state_.fingerprint = temporal_fingerprint(terms);
  }

  std::unique_ptr<Codec> inner_;
  std::string spec_;
  TemporalState<std::vector<T>> state_;
};

}  // namespace ccoll::codec
