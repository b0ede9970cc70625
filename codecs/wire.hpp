// The wire header that starts every encoded payload, and its validation.
//
// Layout (16 bytes, little-endian):
//   [0] magic 0xCC   [1] format version   [2] codec id   [3] flags
//   [4..7] codec parameter (u32, codec-defined)   [8..15] element count (u64)
// A decoder checks every field and the exact payload length before it touches the codes.
// Flag kPoisoned marks a payload produced by a rank that saw corrupt input upstream: schedules
// forward it so that every rank learns of the failure without an extra round trip. A poisoned
// payload carries no codes; its parameter is the rank whose own failure started it, plus one (0:
// not known), and its element count that failure's status code (ccoll::Status).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll::wire {

inline constexpr std::uint8_t kMagic = 0xCC;
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 16;
inline constexpr std::uint8_t kFlagPoisoned = 0x01;
inline constexpr std::uint8_t kKnownFlags = kFlagPoisoned;

/// Codec ids on the wire; never renumber (the format version would have to change).
enum class CodecId : std::uint8_t {
  kNone = 1,
  kFp16 = 2,
  kBf16 = 3,
  kMaxnorm = 4,
  kQsgd = 5,
  kTernGrad = 6,
  kSign = 7,
  kRandk = 8,
  kTopk = 9,
  kSketch = 10,
  kFp8 = 11,
  kMx = 12,
  kNvfp4 = 13,
};

struct Header {
  CodecId codec = CodecId::kNone;
  std::uint8_t flags = 0;
  std::uint32_t param = 0;
  std::uint64_t count = 0;
};

/// A u64 in the wire's byte order (little-endian), e.g. the lengths that frame several payloads
/// in one message (the Bruck all-gather's blocks, a halving step's).
void put_u64(std::byte* p, std::uint64_t v);
std::uint64_t get_u64(const std::byte* p);

void write_header(std::byte* out, const Header& h);

/// Parses and checks magic, version and flags; throws ccoll::Error(kCorruptData) if malformed.
Header read_header(const std::byte* in, std::size_t bytes);

/// Checks a payload of `bytes` bytes against what the receiver expects: codec id, parameter,
/// element count and exact total length. Throws ccoll::Error(kCorruptData) on any mismatch.
void expect_payload(const std::byte* in, std::size_t bytes, CodecId codec, std::uint32_t param,
                    std::uint64_t count, std::size_t payload_bytes);

/// Who poisoned a payload: the rank whose own failure started it (-1: not known) and that
/// failure's status code (ccoll::Status; 0: not known). Read from a peer, it is only a claim:
/// check the rank against the communicator's size before naming it.
struct Poison {
  int rank = -1;
  int status = 0;
};

/// True when `in` starts with a well-formed header whose poisoned flag is set; then `who` (when
/// not null) gets what the header says of the failure's origin.
bool is_poisoned(const std::byte* in, std::size_t bytes, Poison* who = nullptr);
/// Sets the poisoned flag of an encoded payload (which must hold at least a header) and writes
/// `who` into its header (its codes are never read again).
void set_poisoned(std::byte* payload, const Poison& who = {});
/// Writes a header-only poisoned payload; returns its length (kHeaderBytes).
std::size_t write_poisoned(std::byte* out, const Poison& who = {});

}  // namespace ccoll::wire
