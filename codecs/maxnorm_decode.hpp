// The maxnorm family's loops over packed lanes (maxnorm.cc): the decode of one scale block's
// lanes at one step (vector groups where Highway is built in, then batches) and of randk's kept
// coordinates, each returning the largest lane it read for the caller's one range check; the
// packing of lanes; the scales of a payload on its own values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "bitpack.hpp"
#include "lanes_hwy.hpp"
#include "quantizers.hpp"
#include "uniforms.hpp"

namespace ccoll::codec {

/// A parsed payload (maxnorm.cc's parse()): where its scales and codes are, and their form.
struct MaxnormView {
  std::uint32_t contributions = 0;
  std::uint64_t offset = 0;
  std::size_t nblocks = 0;
  const std::byte* scales = nullptr;  // f32 each
  const std::byte* codes = nullptr;
  std::size_t ncodes = 0;
  unsigned width = 0;
};

/// Lanes unpacked per batch by the decode and the compressed-domain add (a multiple of 8).
inline constexpr std::size_t kLaneBatch = 2048;

/// lane[0, n) packed as `width`-bit lanes from byte-aligned `at` (`room` writable bytes there):
/// whole groups of 8 in vectors, the rest by pack_aligned; returns the end.
inline std::byte* pack_lanes(const std::uint32_t* lane, std::size_t n, unsigned width,
                             std::byte* at, std::size_t room) {
  std::size_t packed = 0;
#if CCOLL_HAVE_HWY
  packed = 8 * pack_lane_groups_hwy(lane, n / 8, width, reinterpret_cast<std::uint8_t*>(at), room);
#else
  (void)room;
#endif
  return pack_aligned(lane + packed, n - packed, width, at + packed / 8 * width);
}

/// The scales of a payload of `count` elements at `x` (tensor elements from `offset`, blocks of
/// `block`) on its own values: each block's largest magnitude there over j, rounded up to a
/// float, so that the values fill the lanes of j contributions. False where one is not finite.
template <class T>
bool maxnorm_own_scales(const T* x, std::size_t count, std::uint64_t offset, std::size_t block,
                        std::uint32_t j, float* out) {
  const std::size_t first = offset / block;
  for (std::size_t b = 0, i = 0; i < count; ++b) {
    const std::size_t end = std::min<std::size_t>(count, (first + b + 1) * block - offset);
    const auto m = static_cast<double>(abs_max(x + i, end - i));
    if (!(m <= std::numeric_limits<float>::max())) return false;  // NaN compares false
    out[b] = maxnorm_scale_float(m / j);
    i = end;
  }
  return true;
}

/// sum=requant's compressed-domain add of n lanes: lane c of a sum of j contributions stands for
/// c·j·M/s, so the sum of a (ja contributions) and b (jb) is rounded to an integer stochastically
/// and unbiased, floor(t/j) + Bernoulli((t mod j)/j) for t = |c_a·ja + c_b·jb| and j = ja + jb,
/// with uniform(i) the draw of lane i; each code put to `w` with bias s. False (stopping at
/// once) when a code of a or b is out of [-s, s].
template <class CodeA, class CodeB, class Uniform>
bool requant_sum(std::size_t n, std::uint32_t levels, std::uint32_t ja_, std::uint32_t jb_,
                 CodeA code_a, CodeB code_b, Uniform uniform, BitWriter& w) {
  const auto s = static_cast<std::int64_t>(levels);
  const auto ja = static_cast<std::int64_t>(ja_);
  const auto jb = static_cast<std::int64_t>(jb_);
  const std::int64_t jj = ja + jb;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t qa = static_cast<std::int64_t>(code_a(i)) - s;
    const std::int64_t qb = static_cast<std::int64_t>(code_b(i)) - s;
    if (qa < -s || qa > s || qb < -s || qb > s) return false;
    const std::int64_t t = qa * ja + qb * jb;
    const std::int64_t mag = t < 0 ? -t : t;
    const double u = uniform(i);
    const std::int64_t q =
        mag / jj + (u * static_cast<double>(jj) < static_cast<double>(mag % jj) ? 1 : 0);
    w.put(static_cast<std::uint32_t>((t < 0 ? -q : q) + s));
  }
  return true;
}

/// Float i of a little-endian array of floats.
inline float load_f32(const std::byte* p, std::size_t i) {
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}

/// Bit i of a bit mask (two-scale's fine coordinates).
inline bool mask_bit(const std::vector<std::uint8_t>& mask, std::uint64_t i) {
  return ((mask[i >> 3] >> (i & 7)) & 1) != 0;
}

/// out[k] (+)= (lane k - bias)·step for the lanes [i, end) of `codes` (`width` bits each).
template <class T, bool kAccumulate>
std::uint32_t decode_block_lanes(const std::byte* codes, std::size_t code_bytes, unsigned width,
                                 std::size_t i, std::size_t end, T step, std::int64_t bias, T* out,
                                 std::vector<std::uint32_t>& lanes) {
  std::uint32_t worst = 0;
  std::size_t k_first = i;
#if CCOLL_HAVE_HWY
  if constexpr (std::is_same_v<T, float>) {
    // whole groups of 8 lanes (W bytes each) unpacked and converted in vectors
    if (i % 8 == 0 && bias <= std::numeric_limits<std::int32_t>::max()) {
      LaneDecode d;
      d.in = reinterpret_cast<const std::uint8_t*>(codes) + i / 8 * width;
      d.in_bytes = code_bytes - i / 8 * width;
      d.width = width;
      d.step = step;
      d.bias = static_cast<std::int32_t>(bias);
      d.accumulate = kAccumulate;
      d.out = out + i;
      std::uint32_t top = 0;
      k_first += 8 * decode_lane_groups_hwy(d, (end - i) / 8, &top);
      worst = std::max(worst, top);
    }
  }
#endif
  // unpacked in batches, then one branch-free (vectorizable) pass per batch
  lanes.resize(kLaneBatch);
  std::uint32_t* u = lanes.data();
  for (std::size_t k0 = k_first; k0 < end; k0 += kLaneBatch) {
    const std::size_t n = std::min(kLaneBatch, end - k0);
    unpack_range(codes, code_bytes, width, k0, n, u);
    T* o = out + k0;
    for (std::size_t k = 0; k < n; ++k) {
      worst = std::max(worst, u[k]);
      const T value = static_cast<T>(static_cast<std::int64_t>(u[k]) - bias) * step;
      if constexpr (kAccumulate) {
        o[k] += value;
      } else {
        o[k] = value;
      }
    }
  }
  return worst;
}

/// randk: out[sel[k] - offset] (+)= (lane k - bias)·(scale of its block / s · mult) for the
/// `ncodes` kept coordinates `sel` (increasing); `scales` holds the payload's blocks from block
/// `first` on, of `block` elements each.
template <class T, bool kAccumulate>
std::uint32_t decode_selected(const std::byte* codes, std::size_t code_bytes, unsigned width,
                              std::size_t ncodes, const std::vector<std::uint64_t>& sel,
                              std::uint64_t offset, const std::byte* scales, std::size_t first,
                              std::size_t block_elems, T s, T mult, std::int64_t bias, T* out) {
  std::uint32_t worst = 0;
  std::size_t block = ~std::size_t{0};
  T step = 0;
  for_each_packed(codes, code_bytes, width, 0, ncodes, [&](std::size_t k, std::uint32_t u) {
    const std::uint64_t idx = sel[k];
    if (idx / block_elems != block) {
      block = idx / block_elems;
      step = static_cast<T>(load_f32(scales, block - first)) / s * mult;
    }
    worst = std::max(worst, u);
    const T value = static_cast<T>(static_cast<std::int64_t>(u) - bias) * step;
    if constexpr (kAccumulate) {
      out[idx - offset] += value;
    } else {
      out[idx - offset] = value;
    }
  });
  return worst;
}

}  // namespace ccoll::codec
