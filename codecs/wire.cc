// Wire header encoding and validation (see wire.hpp for the layout).
#include "wire.hpp"

#include <cstring>
#include <string>

#include "ccoll/error.hpp"

namespace ccoll::wire {
namespace {

void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint64_t get_le(const std::byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
[[noreturn]] void corrupt(const std::string& what) {
  throw Error(Status::kCorruptData, "received payload rejected: " + what);
}

}  // namespace

void put_u64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint64_t get_u64(const std::byte* p) { return get_le(p, 8); }

void write_header(std::byte* out, const Header& h) {
  out[0] = std::byte{kMagic};
  out[1] = std::byte{kVersion};
  out[2] = static_cast<std::byte>(h.codec);
  out[3] = std::byte{h.flags};
  put_u32(out + 4, h.param);
  put_u64(out + 8, h.count);
}

Header read_header(const std::byte* in, std::size_t bytes) {
  if (bytes < kHeaderBytes) {
    corrupt(std::to_string(bytes) + " bytes is shorter than the " + std::to_string(kHeaderBytes) +
            "-byte header");
  }
  if (std::to_integer<std::uint8_t>(in[0]) != kMagic) corrupt("bad magic byte");
  const auto version = std::to_integer<std::uint8_t>(in[1]);
  if (version != kVersion) {
    corrupt("wire format version " + std::to_string(version) + " (this build reads version " +
            std::to_string(kVersion) + ")");
  }
  Header h;
  h.codec = static_cast<CodecId>(std::to_integer<std::uint8_t>(in[2]));
  h.flags = std::to_integer<std::uint8_t>(in[3]);
  if ((h.flags & ~kKnownFlags) != 0) corrupt("unknown header flags");
  h.param = static_cast<std::uint32_t>(get_le(in + 4, 4));
  h.count = get_le(in + 8, 8);
  return h;
}

void expect_payload(const std::byte* in, std::size_t bytes, CodecId codec, std::uint32_t param,
                    std::uint64_t count, std::size_t payload_bytes) {
  const Header h = read_header(in, bytes);
  if ((h.flags & kFlagPoisoned) != 0) corrupt("payload is marked poisoned by its sender");
  if (h.codec != codec) {
    corrupt("codec id " + std::to_string(static_cast<int>(h.codec)) + ", expected " +
            std::to_string(static_cast<int>(codec)));
  }
  if (h.param != param) {
    corrupt("codec parameter " + std::to_string(h.param) + ", expected " + std::to_string(param));
  }
  if (h.count != count) {
    corrupt("element count " + std::to_string(h.count) + ", expected " + std::to_string(count));
  }
  if (bytes != kHeaderBytes + payload_bytes) {
    corrupt("length " + std::to_string(bytes) + " bytes, expected " +
            std::to_string(kHeaderBytes + payload_bytes));
  }
}

namespace {
// the header fields of a poisoned payload (wire.hpp): the origin's rank + 1 and its status
std::uint32_t origin_field(const Poison& who) {
  return who.rank >= 0 ? static_cast<std::uint32_t>(who.rank) + 1 : 0;
}
std::uint64_t status_field(const Poison& who) {
  return who.status > 0 ? static_cast<std::uint64_t>(who.status) : 0;
}
}  // namespace

bool is_poisoned(const std::byte* in, std::size_t bytes, Poison* who) {
  const bool poisoned = bytes >= kHeaderBytes && std::to_integer<std::uint8_t>(in[0]) == kMagic &&
                        (std::to_integer<std::uint8_t>(in[3]) & kFlagPoisoned) != 0;
  if (poisoned && who != nullptr) {
    const std::uint64_t origin = get_le(in + 4, 4);
    const std::uint64_t status = get_le(in + 8, 8);
    constexpr std::uint64_t kLargestRank = 0x7fffffff;
    who->rank = origin >= 1 && origin - 1 <= kLargestRank ? static_cast<int>(origin - 1) : -1;
    who->status = status <= 0xff ? static_cast<int>(status) : 0;
  }
  return poisoned;
}

void set_poisoned(std::byte* payload, const Poison& who) {
  payload[3] |= std::byte{kFlagPoisoned};
  put_u32(payload + 4, origin_field(who));
  put_u64(payload + 8, status_field(who));
}

std::size_t write_poisoned(std::byte* out, const Poison& who) {
  write_header(out, Header{CodecId::kNone, kFlagPoisoned, origin_field(who), status_field(who)});
  return kHeaderBytes;
}

}  // namespace ccoll::wire
