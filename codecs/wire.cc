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

bool is_poisoned(const std::byte* in, std::size_t bytes) {
  return bytes >= kHeaderBytes && std::to_integer<std::uint8_t>(in[0]) == kMagic &&
         (std::to_integer<std::uint8_t>(in[3]) & kFlagPoisoned) != 0;
}

void set_poisoned(std::byte* payload) { payload[3] |= std::byte{kFlagPoisoned}; }

std::size_t write_poisoned(std::byte* out) {
  write_header(out, Header{CodecId::kNone, kFlagPoisoned, 0, 0});
  return kHeaderBytes;
}

}  // namespace ccoll::wire
