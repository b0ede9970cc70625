// The `ef=1` modifier: error feedback (EF-SGD, docs/design.md, "Codecs in this build") around any
// codec.
//
// Two residuals per tensor, indexed by element offset:
// - own: p = x + e_own; send C(p); e_own = p - D(C(p)) for this rank's own contributions;
// - hop: the same for partial sums this rank re-encodes (recode schedules) and for the chunk it
//   owns at the end of a reduce-scatter, so the re-quantization of a hop is compensated at the
//   next call by the same rank at the same place of the ring (the "server" residual).
// Encodes that several ranks must make identically (BlockContext::Role::kShared) bypass it.
// Invariant (tested): Σ_t D(C(p_t)) + e_T = Σ_t x_t for the own residual, up to fp rounding.
#pragma once

#include <memory>

#include "codec.hpp"

namespace ccoll::codec {

std::unique_ptr<Codec> make_error_feedback_codec(std::unique_ptr<Codec> inner);

}  // namespace ccoll::codec
