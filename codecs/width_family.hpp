// The maxnorm codecs of every width a width-adaptive codec (dq) chooses among, `min` to `max`
// bits, on the host or the device. The width is chosen in the call's sum round, after
// begin_call and before set_call and the scale round, so every member receives the call's
// set-up and the chosen one codes: one definition for the CPU and the device dq.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "codec.hpp"

namespace ccoll::codec {

class WidthFamily {
 public:
  explicit WidthFamily(unsigned min_bits) : min_(min_bits) {}
  void add(std::unique_ptr<Codec> c) { members_.push_back(std::move(c)); }
  /// The member of `bits` bits (min <= bits <= max).
  Codec& at(unsigned bits) const { return *members_[bits - min_]; }
  Codec& widest() const { return *members_.back(); }
  Codec& narrowest() const { return *members_.front(); }
  void begin_call(int ranks) {
    for (auto& c : members_) c->begin_call(ranks);
  }
  void set_call(std::uint64_t seed, std::uint64_t call) {
    for (auto& c : members_) c->set_call(seed, call);
  }
  void set_scales(const double* shared, std::size_t n) {
    for (auto& c : members_) c->set_scales(shared, n);
  }

 private:
  unsigned min_;
  std::vector<std::unique_ptr<Codec>> members_;
};

}  // namespace ccoll::codec
