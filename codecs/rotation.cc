// The randomized Hadamard rotation (rotation.hpp).
#include "rotation.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "codec.hpp"
#include "philox.hpp"

namespace ccoll::codec {
namespace {

// x[i] <- -x[i] where element `at + i`'s sign bit is set, for i in [0, m).
void flip(float* x, std::size_t m, std::size_t at, const RotationSigns& s) {
  for (std::size_t i = 0; i < m; ++i) {
    const std::size_t e = at + i;
    const auto bit =
        static_cast<std::uint32_t>((s.words[(e >> 6) - s.first_word] >> (e & 63)) & 1u);
    std::uint32_t u;
    std::memcpy(&u, &x[i], 4);
    u ^= bit << 31;
    std::memcpy(&x[i], &u, 4);
  }
}

void scale(float* x, std::size_t m, float f) {
  for (std::size_t i = 0; i < m; ++i) x[i] *= f;
}

}  // namespace

std::uint64_t rotation_seed(std::uint64_t seed, std::uint64_t key) {
  return splitmix64(seed ^ splitmix64(key + 0x6A09E667F3BCC909ull));
}

void fwht(float* x, std::size_t m) {
  // the first three stages in groups of 8 (in registers), then one pass per stage whose inner
  // loop runs over contiguous halves (vectorized by the compiler)
  std::size_t h = 1;
  if (m >= 8) {
    for (std::size_t i = 0; i < m; i += 8) {
      float* v = x + i;
      const float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
      const float a4 = v[4] + v[5], a5 = v[4] - v[5], a6 = v[6] + v[7], a7 = v[6] - v[7];
      const float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
      const float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
      v[0] = b0 + b4;
      v[4] = b0 - b4;
      v[1] = b1 + b5;
      v[5] = b1 - b5;
      v[2] = b2 + b6;
      v[6] = b2 - b6;
      v[3] = b3 + b7;
      v[7] = b3 - b7;
    }
    h = 8;
  }
  for (; h < m; h *= 2) {
    for (std::size_t i = 0; i < m; i += 2 * h) {
      float* __restrict lo = x + i;
      float* __restrict hi = x + i + h;
      for (std::size_t j = 0; j < h; ++j) {
        const float a = lo[j];
        const float b = hi[j];
        lo[j] = a + b;
        hi[j] = a - b;
      }
    }
  }
}

namespace {

// One piece x[at, at + 2^k) rotated forward (from src[at, ...) when src != x) or back; `words`
// has room for the piece's sign words.
void rotate_piece(float* x, const float* src, std::size_t at, unsigned k, std::uint64_t seed,
                  bool forward, bool vector, std::uint64_t* words) {
  const std::size_t m = std::size_t{1} << k;
  const float f = rotation_scale(k, forward);
  const std::size_t first = at >> 6;
  const std::size_t last = (at + m - 1) >> 6;
  for (std::size_t w = first; w <= last; ++w) words[w - first] = rotation_sign_word(seed, w);
  const RotationSigns s{words, first};
  float* b = x + at;
  if (vector && rotate_block_hwy(b, src + at, m, at, s, forward, f)) return;
  if (src != x) std::memcpy(b, src + at, m * sizeof(float));  // a block at a time: in cache
  if (forward) flip(b, m, at, s);
  fwht(b, m);
  scale(b, m, f);
  if (!forward) flip(b, m, at, s);
}

// Every piece rotated in order; `rotated` (if any) told where each piece ends once it is done.
void rotate(float* x, const float* src, std::size_t n, std::size_t block, std::uint64_t seed,
            bool forward, bool vector, const std::function<void(std::size_t)>& rotated = {}) {
  std::vector<std::uint64_t> words(block / 64 + 2);
  for_rotation_pieces(n, ceil_log2(block), [&](std::size_t at, unsigned k) {
    rotate_piece(x, src, at, k, seed, forward, vector, words.data());
    if (rotated) rotated(at + (std::size_t{1} << k));
  });
}

}  // namespace

void rotate_forward(float* x, std::size_t n, std::size_t block, std::uint64_t seed) {
  rotate(x, x, n, block, seed, true, true);
}

void rotate_forward_copy(float* out, const float* in, std::size_t n, std::size_t block,
                         std::uint64_t seed) {
  rotate_forward_copy_tiles(out, in, n, block, seed, n, 1, {});
}

void rotate_forward_copy_tiles(float* out, const float* in, std::size_t n, std::size_t block,
                               std::uint64_t seed, std::size_t tile, std::size_t align,
                               const std::function<void(std::size_t, std::size_t)>& done) {
  if (n % 2 != 0) out[n - 1] = in[n - 1];  // the last element of an odd count stays as it is
  if (!done) {
    rotate(out, in, n, block, seed, true, true);
    return;
  }
  std::size_t from = 0;  // the tile being rotated starts here
  rotate(out, in, n, block, seed, true, true, [&](std::size_t end) {
    if (end - from >= tile && end % align == 0 && end < n) {
      done(from, end - from);
      from = end;
    }
  });
  if (from < n) done(from, n - from);  // the rest, with an odd count's last element
}

namespace {
// A tile of the rotated input scanned as it is rotated: 256 KiB, in a core's L2 cache.
constexpr std::size_t kScanTileElems = std::size_t{1} << 16;
}  // namespace

bool rotate_and_scan(float* out, const float* in, std::size_t n, std::size_t block,
                     std::uint64_t seed, const Codec& codec, int ranks, double* scales,
                     bool& fallback) {
  const std::size_t sb = codec.scale_block();
  if (scales == nullptr || sb == 0 || !codec.scan_splits(n)) {
    rotate_forward_copy(out, in, n, block, seed);
    return codec.scan(out, n, ranks, scales, fallback);
  }
  fallback = false;
  bool scanned = true;
  rotate_forward_copy_tiles(
      out, in, n, block, seed, kScanTileElems, sb, [&](std::size_t at, std::size_t count) {
        bool f = false;
        scanned = codec.scan_part(out, n, at, count, ranks, scales, f) && scanned;
        fallback = fallback || f;
      });
  return scanned;
}

void rotate_inverse(float* x, std::size_t n, std::size_t block, std::uint64_t seed) {
  rotate(x, x, n, block, seed, false, true);
}

RotationUndo::RotationUndo(float* x, std::size_t n, std::size_t block, std::uint64_t seed)
    : x_(x), seed_(seed), log_b_(ceil_log2(block)), words_(block / 64 + 2) {
  for_rotation_pieces(n, log_b_, [&](std::size_t at, unsigned k) {
    pieces_.push_back({at, k, std::size_t{1} << k});
  });
}

void RotationUndo::arrived(std::size_t offset, std::size_t count) {
  if (count == 0 || pieces_.empty()) return;
  // the first piece that ends after `offset`: whole blocks by division, the tail's few by search
  const std::size_t block = std::size_t{1} << log_b_;
  std::size_t i = std::min(offset / block, pieces_.size() - 1);
  while (i > 0 && pieces_[i].at > offset) --i;
  const std::size_t end = offset + count;
  for (; i < pieces_.size() && pieces_[i].at < end; ++i) {
    Piece& p = pieces_[i];
    const std::size_t len = std::size_t{1} << p.k;
    const std::size_t lo = std::max(p.at, offset);
    const std::size_t hi = std::min(p.at + len, end);
    if (lo >= hi || p.missing == 0) continue;
    p.missing -= std::min(p.missing, hi - lo);
    if (p.missing == 0) rotate_piece(x_, x_, p.at, p.k, seed_, false, true, words_.data());
  }
}

void RotationUndo::finish() {
  for (Piece& p : pieces_) {
    if (p.missing == 0) continue;
    p.missing = 0;
    rotate_piece(x_, x_, p.at, p.k, seed_, false, true, words_.data());
  }
}

void rotate_reference(float* x, std::size_t n, std::size_t block, std::uint64_t seed,
                      bool forward) {
  rotate(x, x, n, block, seed, forward, false);
}

#if !defined(CCOLL_HAVE_HWY)
bool rotate_block_hwy(float*, const float*, std::size_t, std::size_t, const RotationSigns&, bool,
                      float) {
  return false;
}
#endif

}  // namespace ccoll::codec
