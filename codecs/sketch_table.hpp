// The wire form of a sketch level table, shared by the CPU codec (sketch.cc) and the device
// codec (device_codecs/device_sketch.cc).
//
// A table of 2^B levels is the block's lowest and highest level as the element type (T, little
// endian), then each of the 2^B - 2 interior levels as a 16-bit code on that range:
//   code q < 65535: lo + (hi - lo) · q / 65534, computed in double, clamped to [lo, hi], cast to T;
//   code 65535: exactly 0 (the zero level).
// The decoder requires lo and hi finite, lo <= hi and the levels non-decreasing; the encoder
// writes the levels it then rounds to (sketch_quantize_table), so both ends hold the same table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ccoll/error.hpp"
#include "half.hpp"  // CCOLL_HOST_DEVICE

namespace ccoll::codec {

constexpr std::uint16_t kSketchZeroCode = 0xFFFF;
constexpr double kSketchCodeSteps = 65534.0;

/// Bytes of one table of 2^bits levels of `elem` bytes each.
CCOLL_HOST_DEVICE constexpr std::size_t sketch_table_bytes(unsigned bits, std::size_t elem) {
  return 2 * elem + 2 * ((std::size_t{1} << bits) - 2);
}

/// The level an interior code stands for.
template <class T>
CCOLL_HOST_DEVICE inline T sketch_code_level(T lo, T hi, std::uint16_t q) {
  if (q == kSketchZeroCode) return T(0);
  const double d = static_cast<double>(hi) - static_cast<double>(lo);
  double v = static_cast<double>(lo) + d * (static_cast<double>(q) / kSketchCodeSteps);
  v = v < static_cast<double>(lo) ? static_cast<double>(lo) : v;
  v = v > static_cast<double>(hi) ? static_cast<double>(hi) : v;
  return static_cast<T>(v);
}

/// The 16-bit code of interior level k (1 <= k <= 2^bits - 2) of a table whose ends are
/// `elem` bytes each.
CCOLL_HOST_DEVICE inline std::uint16_t sketch_interior_code(const std::uint8_t* table,
                                                            std::size_t elem, std::size_t k) {
  const std::uint8_t* p = table + 2 * elem + 2 * (k - 1);
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

/// Level c of a float table read from its wire bytes (for kernels, which decode from the
/// table itself; the host checks the table first with sketch_read_table).
CCOLL_HOST_DEVICE inline float sketch_table_level(const std::uint8_t* table, unsigned bits,
                                                  std::uint32_t c) {
  float lo;
  float hi;
  std::memcpy(&lo, table, 4);
  std::memcpy(&hi, table + 4, 4);
  if (c == 0) return lo;
  if (c + 1 == (1u << bits)) return hi;
  return sketch_code_level(lo, hi, sketch_interior_code(table, 4, c));
}

/// Writes the table of `levels` (2^bits values, non-decreasing, levels[0] the block's lowest,
/// the last its highest; interior levels that are exactly 0 keep the zero code) to `out`, and
/// replaces `levels` with what the table stands for (the levels the encoder rounds to).
template <class T>
void sketch_quantize_table(T* levels, unsigned bits, std::byte* out) {
  const std::size_t n = std::size_t{1} << bits;
  const T lo = levels[0];
  const T hi = levels[n - 1];
  std::memcpy(out, &lo, sizeof(T));
  std::memcpy(out + sizeof(T), &hi, sizeof(T));
  if (n <= 2) return;
  const double d = static_cast<double>(hi) - static_cast<double>(lo);
  std::vector<std::pair<T, std::uint16_t>> q(n - 2);
  for (std::size_t k = 1; k + 1 < n; ++k) {
    std::uint16_t code = 0;
    if (levels[k] == T(0) && lo < T(0) && hi > T(0)) {
      code = kSketchZeroCode;
    } else if (d > 0) {
      const double f = (static_cast<double>(levels[k]) - static_cast<double>(lo)) / d;
      code = static_cast<std::uint16_t>(
          std::lround(std::min(1.0, std::max(0.0, f)) * kSketchCodeSteps));
    }
    q[k - 1] = {sketch_code_level(lo, hi, code), code};
  }
  // the levels in order of their values (quantizing may swap neighbours that were close)
  std::stable_sort(q.begin(), q.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t k = 1; k + 1 < n; ++k) {
    levels[k] = q[k - 1].first;
    const std::uint16_t code = q[k - 1].second;
    out[2 * sizeof(T) + 2 * (k - 1)] = static_cast<std::byte>(code & 0xFF);
    out[2 * sizeof(T) + 2 * (k - 1) + 1] = static_cast<std::byte>(code >> 8);
  }
}

/// Reads a table into `levels` (2^bits values); throws kCorruptData, naming what is wrong,
/// for a malformed one.
template <class T>
void sketch_read_table(const std::byte* in, unsigned bits, T* levels) {
  auto corrupt = [](const char* what) {
    throw Error(Status::kCorruptData, std::string("received sketch payload rejected: ") + what);
  };
  const std::size_t n = std::size_t{1} << bits;
  T lo;
  T hi;
  std::memcpy(&lo, in, sizeof(T));
  std::memcpy(&hi, in + sizeof(T), sizeof(T));
  if (!std::isfinite(lo) || !std::isfinite(hi)) corrupt("non-finite level");
  if (!(lo <= hi)) corrupt("levels out of order");
  levels[0] = lo;
  levels[n - 1] = hi;
  for (std::size_t k = 1; k + 1 < n; ++k) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(in);
    levels[k] = sketch_code_level(lo, hi, sketch_interior_code(bytes, sizeof(T), k));
    if (levels[k] < levels[k - 1]) corrupt("levels out of order");
  }
  if (n > 2 && levels[n - 1] < levels[n - 2]) corrupt("levels out of order");
}

}  // namespace ccoll::codec
