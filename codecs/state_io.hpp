// The byte form of a codec's state (Codec::save_state, load_state): 64-bit little-endian words
// and arrays (element size, count, the elements' bytes), each codec's form opened by a tag, so
// that bytes of another codec, another element type or a truncated copy are refused, naming
// what differs, instead of being loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ccoll/error.hpp"

namespace ccoll::codec {

/// Tags of the stateful codecs' forms (their first word).
inline constexpr std::uint64_t kStateErrorFeedback = 0x63636F6C6C2D6566ull;  // "ccoll-ef"
inline constexpr std::uint64_t kStateTemporal = 0x63636F6C6C2D746Dull;       // "ccoll-tm"
inline constexpr std::uint64_t kStateDq = 0x63636F6C6C2D6471ull;             // "ccoll-dq"

class StateWriter {
 public:
  explicit StateWriter(std::vector<std::byte>& out) : out_(out) {}
  void u64(std::uint64_t v) { append(&v, 8); }
  template <class T>
  void array(const T* p, std::size_t n) {
    u64(sizeof(T));
    u64(n);
    append(p, n * sizeof(T));
  }
  template <class T>
  void array(const std::vector<T>& v) {
    array(v.data(), v.size());
  }
  void bytes(const std::vector<std::byte>& b) {
    u64(b.size());
    append(b.data(), b.size());
  }
  void text(const std::string& s) {
    u64(s.size());
    append(s.data(), s.size());
  }

 private:
  void append(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }
  std::vector<std::byte>& out_;
};

class StateReader {
 public:
  /// `who` names the reader in its errors ("load_state: <who>: ...").
  StateReader(const std::byte* p, std::size_t n, std::string who)
      : p_(p), left_(n), who_(std::move(who)) {}
  std::uint64_t u64() {
    std::uint64_t v = 0;
    std::memcpy(&v, take(8), 8);
    return v;
  }
  void tag(std::uint64_t want) {
    if (u64() != want) bad("not this codec's state (saved by another codec or spec)");
  }
  /// An array of T; `count`, when not null, must equal its length.
  template <class T>
  std::vector<T> array() {
    if (u64() != sizeof(T)) bad("saved with another element type");
    const std::uint64_t n = u64();
    if (n > left_ / sizeof(T)) bad("truncated");
    std::vector<T> v(static_cast<std::size_t>(n));
    if (n != 0) std::memcpy(v.data(), take(v.size() * sizeof(T)), v.size() * sizeof(T));
    return v;
  }
  std::vector<std::byte> bytes() {
    const std::uint64_t n = u64();
    if (n > left_) bad("truncated");
    const std::byte* p = take(static_cast<std::size_t>(n));
    return {p, p + n};
  }
  std::string text() {
    const std::uint64_t n = u64();
    if (n > left_ || n > 4096) bad("truncated");
    const auto* p = reinterpret_cast<const char*>(take(static_cast<std::size_t>(n)));
    return {p, p + n};
  }
  /// Everything read: trailing bytes are refused.
  void done() const {
    if (left_ != 0) bad(std::to_string(left_) + " bytes left over");
  }
  [[noreturn]] void bad(const std::string& what) const {
    throw Error(Status::kInvalidArgument, "load_state: " + who_ + ": " + what);
  }

 private:
  const std::byte* take(std::size_t n) {
    if (n > left_) bad("truncated");
    const std::byte* p = p_;
    p_ += n;
    left_ -= n;
    return p;
  }
  const std::byte* p_;
  std::size_t left_;
  std::string who_;
};

/// save_state's form of error feedback's state: this rank's residuals of its own encodes and
/// of its re-encodes of partial sums (host vectors of T), then the inner codec's state.
template <class T>
void save_feedback(std::vector<std::byte>& out, const std::vector<T>& own,
                   const std::vector<T>& hop, const std::vector<std::byte>& inner) {
  StateWriter w(out);
  w.u64(kStateErrorFeedback);
  w.array(own);
  w.array(hop);
  w.bytes(inner);
}

/// Reads save_feedback's form into `own`, `hop` and `inner` (left as they were when refused).
template <class T>
void load_feedback(const std::byte* in, std::size_t bytes, const std::string& who,
                   std::vector<T>& own, std::vector<T>& hop, std::vector<std::byte>& inner) {
  StateReader r(in, bytes, who);
  r.tag(kStateErrorFeedback);
  std::vector<T> o = r.array<T>();
  std::vector<T> h = r.array<T>();
  std::vector<std::byte> i = r.bytes();
  r.done();
  own = std::move(o);
  hop = std::move(h);
  inner = std::move(i);
}

/// save_state's form of a temporal state whose four arrays `get` copies into host vectors of T
/// (host: as they are; device: copied out).
template <class T, class Get>
void save_temporal(std::vector<std::byte>& out, std::uint64_t fingerprint, Get&& get) {
  StateWriter w(out);
  w.u64(kStateTemporal);
  for (int k = 0; k < 4; ++k) w.array(get(k));
  w.u64(fingerprint);
}

/// Reads save_temporal's form: `put(k, values)` takes the arrays xh, y, xp, e in turn.
template <class T, class Put>
void load_temporal(const std::byte* in, std::size_t bytes, const std::string& who,
                   std::uint64_t& fingerprint, Put&& put) {
  StateReader r(in, bytes, who);
  r.tag(kStateTemporal);
  std::vector<T> a[4];
  for (auto& v : a) v = r.array<T>();
  const std::uint64_t f = r.u64();
  r.done();
  for (int k = 0; k < 4; ++k) put(k, std::move(a[k]));
  fingerprint = f;
}

}  // namespace ccoll::codec
