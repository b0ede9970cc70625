// Little-endian bit streams of fixed-width unsigned values (1..32 bits each), as the quantizing
// codecs put them on the wire: value i occupies bits [i·w, (i+1)·w) of the byte stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ccoll::codec {

/// Bytes needed for `count` values of `width` bits.
constexpr std::size_t packed_bytes(std::size_t count, unsigned width) {
  return (count * width + 7) / 8;
}

/// Smallest width that holds every value in [0, max_value].
inline unsigned bits_for(std::uint64_t max_value) {
  unsigned w = 1;
  while (w < 64 && (max_value >> w) != 0) ++w;
  return w;
}

/// f(std::integral_constant<unsigned, width>{}) for widths 1..8, where the byte-group loops
/// are instantiated; `otherwise` for wider values.
template <class F>
std::size_t with_byte_width(unsigned width, std::size_t otherwise, F&& f) {
  switch (width) {
    case 1:
      return f(std::integral_constant<unsigned, 1>{});
    case 2:
      return f(std::integral_constant<unsigned, 2>{});
    case 3:
      return f(std::integral_constant<unsigned, 3>{});
    case 4:
      return f(std::integral_constant<unsigned, 4>{});
    case 5:
      return f(std::integral_constant<unsigned, 5>{});
    case 6:
      return f(std::integral_constant<unsigned, 6>{});
    case 7:
      return f(std::integral_constant<unsigned, 7>{});
    case 8:
      return f(std::integral_constant<unsigned, 8>{});
    default:
      return otherwise;
  }
}

class BitWriter {
 public:
  BitWriter(std::byte* out, unsigned width) : out_(out), width_(width) {}
  void put(std::uint32_t v) {
    // fill_ < 32 before, so the value fits the 64-bit accumulator; flush 32 bits at a time
    acc_ |= static_cast<std::uint64_t>(v) << fill_;
    fill_ += width_;
    if (fill_ >= 32) {
      const auto lo = static_cast<std::uint32_t>(acc_);
      std::memcpy(out_, &lo, 4);  // little-endian, as the wire format
      out_ += 4;
      acc_ >>= 32;
      fill_ -= 32;
    }
  }
  /// put() of n values of at most 8 bits each. Once the stream is 32-bit aligned, 8 values at a
  /// time go out as one group of `width` bytes (same bytes as put(), far fewer instructions).
  void put_bytes(const std::uint8_t* v, std::size_t n) {
    std::size_t k = 0;
    for (; k < n && fill_ != 0; ++k) put(v[k]);
    k = with_byte_width(width_, k, [&](auto w) { return put_groups<decltype(w)::value>(v, k, n); });
    for (; k < n; ++k) put(v[k]);
  }
  /// Writes the last partial bytes; returns the position after them.
  std::byte* finish() {
    while (fill_ > 0) {
      *out_++ = static_cast<std::byte>(acc_);
      acc_ >>= 8;
      fill_ = fill_ > 8 ? fill_ - 8 : 0;
    }
    acc_ = 0;
    return out_;
  }

 private:
  // Groups of 8 values of W bits from v[k..n) while the accumulator is empty; returns the new k.
  template <unsigned W>
  std::size_t put_groups(const std::uint8_t* v, std::size_t k, std::size_t n) {
    if (fill_ != 0) return k;
    for (; k + 8 <= n; k += 8) {
      std::uint64_t g = 0;
      for (unsigned j = 0; j < 8; ++j) g |= static_cast<std::uint64_t>(v[k + j]) << (W * j);
      std::memcpy(out_, &g, W);  // little-endian: the low W bytes are the group's bits
      out_ += W;
    }
    return k;
  }

  std::byte* out_;
  unsigned width_;
  std::uint64_t acc_ = 0;
  unsigned fill_ = 0;
};

class BitReader {
 public:
  BitReader(const std::byte* in, unsigned width)
      : in_(in), width_(width), mask_(width >= 32 ? 0xFFFFFFFFu : (1u << width) - 1u) {}
  /// get() of n values of at most 8 bits each into v. Once the reader is byte aligned, 8 values
  /// at a time come from one group of `width` bytes.
  void get_bytes(std::uint8_t* v, std::size_t n) {
    std::size_t k = 0;
    for (; k < n && fill_ != 0; ++k) v[k] = static_cast<std::uint8_t>(get());
    k = with_byte_width(width_, k, [&](auto w) { return get_groups<decltype(w)::value>(v, k, n); });
    for (; k < n; ++k) v[k] = static_cast<std::uint8_t>(get());
  }
  std::uint32_t get() {
    while (fill_ < width_) {
      acc_ |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(*in_++)) << fill_;
      fill_ += 8;
    }
    const auto v = static_cast<std::uint32_t>(acc_ & mask_);
    acc_ >>= width_;
    fill_ -= width_;
    return v;
  }

 private:
  template <unsigned W>
  std::size_t get_groups(std::uint8_t* v, std::size_t k, std::size_t n) {
    if (fill_ != 0) return k;
    for (; k + 8 <= n; k += 8) {
      std::uint64_t g = 0;
      std::memcpy(&g, in_, W);  // exactly the group's W bytes: never past the stream
      in_ += W;
      for (unsigned j = 0; j < 8; ++j) v[k + j] = static_cast<std::uint8_t>((g >> (W * j)) & mask_);
    }
    return k;
  }

  const std::byte* in_;
  unsigned width_;
  std::uint32_t mask_;
  std::uint64_t acc_ = 0;
  unsigned fill_ = 0;
};

/// Value i of a packed stream of `width`-bit values (width <= 32) occupying `data_bytes` bytes:
/// one 8-byte load where it stays inside the stream, byte-wise reads at its end.
inline std::uint32_t packed_at(const std::byte* data, std::size_t data_bytes, unsigned width,
                               std::size_t i) {
  const std::size_t bit = i * width;
  const std::size_t byte = bit / 8;
  std::uint64_t word = 0;
  if (byte + 8 <= data_bytes) {
    std::memcpy(&word, data + byte, 8);  // a fixed-size load: one instruction
  } else {
    for (std::size_t k = 0; byte + k < data_bytes; ++k) {
      word |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(data[byte + k])) << (8 * k);
    }
  }
  return static_cast<std::uint32_t>((word >> (bit % 8)) & ((std::uint64_t{1} << width) - 1));
}

/// Calls f(i, value) for values [first, first + n) of a packed stream of `width`-bit values
/// (width <= 32) occupying `data_bytes` bytes. Branch-free 8-byte loads where they stay inside
/// the stream, byte-wise reads for the last few values: never reads past `data_bytes`.
template <class F>
inline void for_each_packed(const std::byte* data, std::size_t data_bytes, unsigned width,
                            std::size_t first, std::size_t n, F&& f) {
  const std::uint64_t mask = (std::uint64_t{1} << width) - 1;
  const std::size_t end = first + n;
  // value i can use an 8-byte load when (i·width)/8 + 8 <= data_bytes
  std::size_t fast_end = data_bytes >= 8 ? ((data_bytes - 8) * 8) / width + 1 : 0;
  if (fast_end > end) fast_end = end;
  std::size_t i = first;
  for (; i < fast_end; ++i) {
    const std::size_t bit = i * width;
    std::uint64_t word;
    std::memcpy(&word, data + bit / 8, 8);
    f(i, static_cast<std::uint32_t>((word >> (bit % 8)) & mask));
  }
  for (; i < end; ++i) {
    const std::size_t bit = i * width;
    std::uint64_t word = 0;
    const std::size_t byte = bit / 8;
    const std::size_t avail = data_bytes - byte < 8 ? data_bytes - byte : 8;
    std::memcpy(&word, data + byte, avail);
    f(i, static_cast<std::uint32_t>((word >> (bit % 8)) & mask));
  }
}

}  // namespace ccoll::codec
