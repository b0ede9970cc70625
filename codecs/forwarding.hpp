// ForwardingCodec: a codec that passes every call to another codec (`target()`), for the
// wrappers (error feedback, temporal, dq) to override only what they change. scan() is not
// forwarded: a wrapper whose scales cover something other than its input (ef: x + e, temporal:
// the residual) keeps Codec's default, which asks needs_fallback() and leaves the scales to
// local_scales(), or scans what it encodes itself (error feedback). Neither are the fused forms
// of error feedback (scan_feedback(), encode_feedback()), which describe the codec itself.
#pragma once

#include <string>

#include "codec.hpp"

namespace ccoll::codec {

class ForwardingCodec : public Codec {
 public:
  Capabilities capabilities() const override { return target_->capabilities(); }
  DType dtype() const override { return target_->dtype(); }
  double unit_roundoff() const override { return target_->unit_roundoff(); }
  std::size_t max_encoded_bytes(std::size_t count) const override {
    return target_->max_encoded_bytes(count);
  }
  bool needs_fallback(const void* data, std::size_t count, int ranks) const override {
    return target_->needs_fallback(data, count, ranks);
  }
  std::size_t payload_bytes(std::size_t count, std::uint64_t offset,
                            std::uint32_t contributions) const override {
    return target_->payload_bytes(count, offset, contributions);
  }
  std::size_t encode(const void* in, std::size_t count, const BlockContext& ctx,
                     std::byte* out) override {
    return target_->encode(in, count, ctx, out);
  }
  void decode(const std::byte* in, std::size_t bytes, std::size_t count, void* out) override {
    target_->decode(in, bytes, count, out);
  }
  void decode_accumulate(const std::byte* in, std::size_t bytes, std::size_t count,
                         void* acc) override {
    target_->decode_accumulate(in, bytes, count, acc);
  }
  // reduce_encode, encode_many and decode_many are not forwarded: Codec's default calls this
  // wrapper's decode_accumulate and encode, which is what a wrapper that changes either needs
  void reset_state() override { target_->reset_state(); }
  void save_state(std::vector<std::byte>& out) const override { target_->save_state(out); }
  void load_state(const std::byte* in, std::size_t bytes) override {
    target_->load_state(in, bytes);
  }
  unsigned bits_used() const override { return target_->bits_used(); }
  std::uint64_t state_fingerprint() const override { return target_->state_fingerprint(); }
  void uncompressed_call() override { target_->uncompressed_call(); }
  void finish_allreduce(void* out, std::size_t count) override {
    target_->finish_allreduce(out, count);
  }
  bool finishes_allreduce() const override { return target_->finishes_allreduce(); }
  std::size_t sum_slots() const override { return target_->sum_slots(); }
  void local_sums(const void* data, std::size_t count, double* out) const override {
    target_->local_sums(data, count, out);
  }
  void set_sums(const double* summed, std::size_t n, double lr) override {
    target_->set_sums(summed, n, lr);
  }
  void begin_call(int ranks) override { target_->begin_call(ranks); }
  void set_call(std::uint64_t seed, std::uint64_t call) override { target_->set_call(seed, call); }
  std::size_t scale_slots(std::size_t count) const override { return target_->scale_slots(count); }
  std::size_t scale_block() const override { return target_->scale_block(); }
  void local_scales(const void* data, std::size_t count, double* out) const override {
    target_->local_scales(data, count, out);
  }
  void set_scales(const double* shared, std::size_t n) override { target_->set_scales(shared, n); }
  std::size_t mask_bytes(std::size_t count) const override { return target_->mask_bytes(count); }
  void local_mask(const void* data, std::size_t count, std::uint8_t* out) const override {
    target_->local_mask(data, count, out);
  }
  void set_mask(const std::uint8_t* shared, std::size_t bytes) override {
    target_->set_mask(shared, bytes);
  }
  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, const BlockContext& ctx,
                          std::byte* out) override {
    return target_->add_encoded(a, a_bytes, b, b_bytes, count, ctx, out);
  }

 protected:
  /// The codec calls go to; set by the wrapper (which owns it), and may change between calls.
  Codec* target() const { return target_; }
  void set_target(Codec* c) { target_ = c; }

 private:
  Codec* target_ = nullptr;
};

}  // namespace ccoll::codec
