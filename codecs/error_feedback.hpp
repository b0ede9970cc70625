// The `ef=1` modifier: error feedback (EF-SGD, docs/design/5-codecs.md) around any
// codec.
//
// Two residuals per tensor, indexed by element offset:
// - own: p = x + e_own; send C(p); e_own = p - D(C(p)) for this rank's own contributions;
// - hop: the same for partial sums this rank re-encodes (recode schedules) and for the chunk it
//   owns at the end of a reduce-scatter, so the re-quantization of a hop is compensated at the
//   next call by the same rank at the same place of the ring (the "server" residual).
// Encodes that several ranks must make identically (BlockContext::Role::kShared) bypass it.
//
// Contraction: the identity below holds for any inner codec, but the time average of T calls
// converges as O(1/T) only while the residual stays bounded, which needs a contractive inner
// codec (||C(p) - p|| < ||p||). Unbiased stochastic rounding with one or a few levels per sign
// is not one (the residual random-walks: about 1/sqrt(T)), so under ef=1 the registry builds
// the inner codec with round=nearest (src/support/spec.cc): with a max-norm grid every
// element then errs by at most half a step of a scale that covers x + e, so |e| stays below
// half the largest |x + e| and the residual is bounded by the largest input.
// Invariant (tested): Σ_t D(C(p_t)) + e_T = Σ_t x_t for the own residual, up to fp rounding.
#pragma once

#include <memory>

#include "codec.hpp"

namespace ccoll::codec {

/// ef=1 around `inner`; `spec` is the canonical spec of the whole (inner and ef=1).
std::unique_ptr<Codec> make_error_feedback_codec(std::unique_ptr<Codec> inner, std::string spec);

/// ef=21 (EF21, ef21.cc) around `inner`, a codec whose sums are exact (maxnorm, randk); `spec`
/// is the canonical spec of the whole.
std::unique_ptr<Codec> make_ef21_codec(std::unique_ptr<Codec> inner, std::string spec);

}  // namespace ccoll::codec
