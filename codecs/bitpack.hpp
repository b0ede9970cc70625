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

// 128-bit word of the group pack/unpack (GCC and Clang; __extension__: no -Wpedantic note)
__extension__ typedef unsigned __int128 GroupWord;

/// f(std::integral_constant<unsigned, width>{}) for widths 1..16 (where a group of 8 values is
/// `width` whole bytes that fit one 128-bit word); `otherwise` for wider values.
template <class F>
std::size_t with_group_width(unsigned width, std::size_t otherwise, F&& f) {
  switch (width) {
#define CCOLL_GROUP_WIDTH_CASE(W) \
  case W:                         \
    return f(std::integral_constant<unsigned, W>{});
    CCOLL_GROUP_WIDTH_CASE(1)
    CCOLL_GROUP_WIDTH_CASE(2)
    CCOLL_GROUP_WIDTH_CASE(3)
    CCOLL_GROUP_WIDTH_CASE(4)
    CCOLL_GROUP_WIDTH_CASE(5)
    CCOLL_GROUP_WIDTH_CASE(6)
    CCOLL_GROUP_WIDTH_CASE(7)
    CCOLL_GROUP_WIDTH_CASE(8)
    CCOLL_GROUP_WIDTH_CASE(9)
    CCOLL_GROUP_WIDTH_CASE(10)
    CCOLL_GROUP_WIDTH_CASE(11)
    CCOLL_GROUP_WIDTH_CASE(12)
    CCOLL_GROUP_WIDTH_CASE(13)
    CCOLL_GROUP_WIDTH_CASE(14)
    CCOLL_GROUP_WIDTH_CASE(15)
    CCOLL_GROUP_WIDTH_CASE(16)
#undef CCOLL_GROUP_WIDTH_CASE
    default:
      return otherwise;
  }
}

/// f(std::integral_constant<unsigned, width>{}) for widths 1..8, where the byte-group loops
/// are instantiated; `otherwise` for wider values.
template <class F>
std::size_t with_byte_width(unsigned width, std::size_t otherwise, F&& f) {
  // one dispatch table; f is only instantiated for the byte widths
  return with_group_width(width, otherwise, [&](auto w) -> std::size_t {
    if constexpr (decltype(w)::value <= 8) {
      return f(w);
    } else {
      return otherwise;
    }
  });
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
    if (width_ == 8 && fill_ == 0) {  // a code a byte: the bytes themselves
      std::memcpy(out_, v, n);
      out_ += n;
      return;
    }
    std::size_t k = 0;
    for (; k < n && fill_ != 0; ++k) put(v[k]);
    k = with_byte_width(width_, k, [&](auto w) { return put_groups<decltype(w)::value>(v, k, n); });
    for (; k < n; ++k) put(v[k]);
  }
  /// Where the next value's bits start when that is a byte boundary with nothing pending (a
  /// caller may write whole bytes there and skip() them), else nullptr.
  std::byte* aligned() const { return fill_ == 0 ? out_ : nullptr; }
  /// Moves past `bytes` bytes written at aligned().
  void skip(std::size_t bytes) { out_ += bytes; }
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
      std::uint64_t g;
      std::memcpy(&g, v + k, 8);  // little-endian: value j in byte j
      g = pack_byte_group<W>(g);
      std::memcpy(out_, &g, W);  // little-endian: the low W bytes are the group's bits
      out_ += W;
    }
    return k;
  }
  // 8 values of W bits, one per byte of g, as the low 8·W bits (value j at bit W·j): neighbours
  // merged in three rounds (pairs within 16 bits, then within 32, then 64), each keeping the
  // low half's bits and moving the high half's down next to them.
  template <unsigned W>
  static std::uint64_t pack_byte_group(std::uint64_t g) {
    if constexpr (W < 8) {
      constexpr std::uint64_t lo1 = 0x0001000100010001ull * ((1ull << W) - 1);
      constexpr std::uint64_t lo2 = 0x0000000100000001ull * ((1ull << (2 * W)) - 1);
      constexpr std::uint64_t lo3 = (1ull << (4 * W)) - 1;
      g = (g & lo1) | ((g >> (8 - W)) & (lo1 << W));
      g = (g & lo2) | ((g >> (16 - 2 * W)) & (lo2 << (2 * W)));
      g = (g & lo3) | ((g >> (32 - 4 * W)) & (lo3 << (4 * W)));
    }
    return g;
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
    if (width_ == 8 && fill_ == 0) {  // a code a byte: the bytes themselves
      std::memcpy(v, in_, n);
      in_ += n;
      return;
    }
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

/// Values [first, first + n) of a packed stream of `width`-bit values (width <= 32) occupying
/// `data_bytes` bytes, into out[0, n). Whole groups of 8 values (W bytes each, byte aligned)
/// come out of one 128-bit word for widths up to 16; the rest value by value. Never reads past
/// `data_bytes`.
inline void unpack_range(const std::byte* data, std::size_t data_bytes, unsigned width,
                         std::size_t first, std::size_t n, std::uint32_t* out) {
  std::size_t i = first;
  const std::size_t end = first + n;
  for (; i < end && i % 8 != 0; ++i) out[i - first] = packed_at(data, data_bytes, width, i);
  const std::size_t groups = (end - i) / 8;
  i = with_group_width(width, i, [&](auto w) {
    constexpr unsigned W = decltype(w)::value;
    constexpr std::uint32_t kMask = (1u << W) - 1u;
    const std::byte* in = data + i / 8 * W;
    std::uint32_t* o = out + (i - first);
    // value j of a group: one 4-byte load at byte W·j/8 (W·j%8 + W <= 23 bits), all offsets
    // compile-time; the 4-byte loads may reach 3 bytes past the group, so groups that end
    // within 3 bytes of the stream's end take the 128-bit path
    const std::size_t safe_end = data_bytes >= 3 ? data_bytes - 3 : 0;
    std::size_t g = 0;
    for (; g < groups && static_cast<std::size_t>(in + W - data) <= safe_end;
         ++g, in += W, o += 8) {
      for (unsigned j = 0; j < 8; ++j) {
        std::uint32_t word;
        std::memcpy(&word, in + (W * j) / 8, 4);
        o[j] = (word >> ((W * j) % 8)) & kMask;
      }
    }
    for (; g < groups; ++g, in += W, o += 8) {
      GroupWord v = 0;
      std::memcpy(&v, in, W);  // exactly the group's W bytes (little-endian)
      for (unsigned j = 0; j < 8; ++j) o[j] = static_cast<std::uint32_t>(v >> (W * j)) & kMask;
    }
    return i + groups * 8;
  });
  for (; i < end; ++i) out[i - first] = packed_at(data, data_bytes, width, i);
}

/// Packs v[0, n) as `width`-bit values (each < 2^width) starting at a byte-aligned position
/// `out`: groups of 8 as W whole bytes for widths up to 16, then the remainder bit by bit.
/// Returns the position after the last byte written (a partial last byte is zero-padded).
/// The bytes equal BitWriter's for the same values.
inline std::byte* pack_aligned(const std::uint32_t* v, std::size_t n, unsigned width,
                               std::byte* out) {
  const std::size_t groups = n / 8;
  const std::size_t done = with_group_width(width, 0, [&](auto w) {
    constexpr unsigned W = decltype(w)::value;
    for (std::size_t g = 0; g < groups; ++g, out += W) {
      // two 64-bit halves with compile-time shifts (no 128-bit shift sequences)
      std::uint64_t lo = 0;
      std::uint64_t hi = 0;
      for (unsigned j = 0; j < 8; ++j) {
        const std::uint64_t x = v[8 * g + j];
        const unsigned pos = W * j;
        if (pos < 64) {
          lo |= x << pos;
          if (pos + W > 64) hi |= x >> (64 - pos);
        } else {
          hi |= x << (pos - 64);
        }
      }
      if constexpr (W >= 8) {
        std::memcpy(out, &lo, 8);
        std::memcpy(out + 8, &hi, W - 8);
      } else {
        std::memcpy(out, &lo, W);
      }
    }
    return groups * 8;
  });
  BitWriter wr(out, width);
  for (std::size_t k = done; k < n; ++k) wr.put(v[k]);
  return wr.finish();
}

}  // namespace ccoll::codec
