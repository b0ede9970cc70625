// The topk kernels on the emulated backend (topk_device.hpp): the family's per-thread
// functions in host loops, queued on the calling thread's emulated queue as a kernel launch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ccoll/error.hpp"
#include "emulated.hpp"
#include "topk_device.hpp"

namespace ccoll::gpu {
namespace {

class EmulatedTopk final : public TopkKernels {
 public:
  explicit EmulatedTopk(Backend& /*b*/) {}

  void histogram(const float* x, std::size_t count, const TopkRadix* r, int shift,
                 std::uint32_t* hist) override {
    emulated::launch([=] {
      for (std::size_t d = 0; d < kTopkBins; ++d) hist[d] = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint32_t key = topk_key(x[i]);
        if ((key & r->mask) == r->prefix) ++hist[(key >> shift) & 0xFFFFu];
      }
    });
  }
  void pick_digit(const std::uint32_t* hist, int shift, std::size_t kept, TopkRadix* r) override {
    emulated::launch([=] {
      if (!topk_pick_in(hist, 0, kTopkBins - 1, 0, kept - r->above, shift, *r)) {
        throw Error(Status::kInternal, "emulated topk pick_digit: fewer keys than kept");
      }
    });
  }
  void tile_counts(const float* x, const TopkSelect& sel, const TopkRadix* r, std::uint32_t* above,
                   std::uint32_t* equal) override {
    emulated::launch([=] {
      const TopkSelect s = topk_resolved(sel, *r);
      for (std::size_t t = 0; t * kTopkTile < s.count; ++t) {
        topk_tile_count(x, s, t, above + t, equal + t);
      }
    });
  }
  void tile_offsets(const std::uint32_t* above, const std::uint32_t* equal, std::size_t tiles,
                    std::uint64_t* above_before, std::uint64_t* equal_before) override {
    emulated::launch([=] {
      std::uint64_t a = 0;
      std::uint64_t e = 0;
      for (std::size_t t = 0; t < tiles; ++t) {
        above_before[t] = a;
        equal_before[t] = e;
        a += above[t];
        e += equal[t];
      }
    });
  }
  void tile_write(const float* x, const TopkSelect& sel, const TopkRadix* r,
                  const std::uint64_t* above_before, const std::uint64_t* equal_before,
                  std::uint8_t* idx_out, std::uint8_t* val_out) override {
    emulated::launch([=] {
      const TopkSelect s = topk_resolved(sel, *r);
      // the CUDA kernel's warp per tile, its 32 lanes in turn: the masks first (the ballot),
      // then each lane's write. On a GPU the writes run in any order, so every position must
      // be written exactly once: checked here, where an overlap would otherwise be overwritten
      // in order and go unseen.
      std::vector<bool> written(s.kept, false);
      const std::size_t tiles = (s.count + kTopkTile - 1) / kTopkTile;
      for (std::size_t t = 0; t < tiles; ++t) {
        const std::size_t begin = t * kTopkTile;
        const std::size_t end = topk_tile_end(s, t);
        std::uint64_t above = above_before[t];
        std::uint64_t equal = equal_before[t];
        for (std::size_t c = begin; c < end; c += kTopkLanes) {
          std::uint32_t mask_above = 0;
          std::uint32_t mask_equal = 0;
          for (unsigned lane = 0; lane < kTopkLanes; ++lane) {
            const unsigned k = topk_class(x, s, c + lane, end);
            mask_above |= (k == 1 ? 1u : 0u) << lane;
            mask_equal |= (k == 2 ? 1u : 0u) << lane;
          }
          for (unsigned lane = 0; lane < kTopkLanes; ++lane) {
            if (c + lane >= end) continue;
            const std::uint64_t pos = topk_chunk_write(x, s, c + lane, lane, mask_above, mask_equal,
                                                       above, equal, idx_out, val_out);
            if (pos == kTopkNotKept) continue;
            if (pos >= s.kept || written[pos]) {
              throw Error(Status::kInternal,
                          "emulated topk_tile_write: position " + std::to_string(pos) + " of " +
                              std::to_string(s.kept) + " written twice or out of range");
            }
            written[pos] = true;
          }
          above += popcount32(mask_above);
          equal += popcount32(mask_equal);
        }
      }
      for (std::size_t pos = 0; pos < s.kept; ++pos) {
        if (!written[pos]) {
          throw Error(Status::kInternal, "emulated topk_tile_write: position " +
                                             std::to_string(pos) + " of " + std::to_string(s.kept) +
                                             " never written");
        }
      }
    });
  }
  void scatter(const std::uint8_t* idx_in, const std::uint8_t* val_in, unsigned index_bytes,
               std::size_t k, float* out, bool accumulate) override {
    emulated::launch([=] {
      for (std::size_t m = 0; m < k; ++m) {
        if (accumulate) {
          topk_scatter_one<true>(idx_in, val_in, index_bytes, m, out);
        } else {
          topk_scatter_one<false>(idx_in, val_in, index_bytes, m, out);
        }
      }
    });
  }
};

const RegisterKernels<TopkKernels, EmulatedTopk> kRegistered(BackendKind::kEmulated);

}  // namespace
}  // namespace ccoll::gpu
