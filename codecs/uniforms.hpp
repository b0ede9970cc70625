// Batched Philox uniforms for the CPU encoders: the same numbers UniformStream gives element by
// element, generated in a loop the compiler vectorizes (run-time dispatch to AVX2 where the
// CPU has it, through GCC/Clang target_clones).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ccoll::codec {

/// Largest `count` uniforms_for() accepts in one call.
inline constexpr std::size_t kUniformBatch = 1024;

/// Uniforms of elements [first, first + count) (count <= kUniformBatch) of the stream
/// (seed, call, stream). `scratch` must hold kUniformBatch + 8 floats; returns the pointer to
/// the uniform of element `first` inside it.
const float* uniforms_for(std::uint64_t seed, std::uint64_t call, std::uint64_t stream,
                          std::uint64_t first, std::size_t count, float* scratch);

/// The draws of a rounding for elements [first, first + count) (count <= kUniformBatch):
/// uniforms_for()'s for stochastic rounding; for nearest rounding 0.5 for every element, with
/// which stochastic_code() rounds to the nearer level (a tie toward zero) and sketch's interval
/// test picks the nearer end (a constant array, not `scratch`). `scratch` as for uniforms_for().
const float* rounding_draws(bool nearest, std::uint64_t seed, std::uint64_t call,
                            std::uint64_t stream, std::uint64_t first, std::size_t count,
                            float* scratch);

#if CCOLL_HAVE_HWY
/// philox_hwy.cc: uniform01() of the 4 words of quads [first_quad, first_quad + quads) into
/// out[4·q + k], vectorized with Highway (run-time dispatch).
void philox_quads_hwy(std::uint64_t seed, std::uint32_t call, std::uint32_t stream,
                      std::uint64_t first_quad, std::size_t quads, float* out);
/// philox_hwy.cc: maxnorm's codes for the whole quads [first_quad, first_quad + quads), code k =
/// stochastic_code(x[k], inv, uniform of element 4·first_quad + k, s), packed as `width`-bit
/// lanes (width 2, 3, 4 or 8, codes below 2^width; at width 3 an even number of quads): the
/// 4·width·quads / 8 bytes BitWriter::put() of the codes writes from a byte boundary. Philox,
/// the rounding and the packing fused in one pass (bit-identical to the scalar path).
void maxnorm_packed_hwy(std::uint64_t seed, std::uint32_t call, std::uint32_t stream,
                        std::uint64_t first_quad, const float* x, std::size_t quads, float inv,
                        std::uint32_t s, unsigned width, std::uint8_t* out);
/// philox_hwy.cc: maxnorm_packed_hwy's codes for any s < 2^23 (the sum of several inputs at
/// one input's step), as u32 lanes: out[k] = stochastic_code(x[k], inv, uniform of element
/// 4·first_quad + k, s).
void maxnorm_lanes_hwy(std::uint64_t seed, std::uint32_t call, std::uint32_t stream,
                       std::uint64_t first_quad, const float* x, std::size_t quads, float inv,
                       std::uint32_t s, std::uint32_t* out);
/// philox_hwy.cc: ef=1's fused nearest rounding for the first whole vectors of [0, n): p = x[k] +
/// e[k], lanes[k] = stochastic_code(p, inv, kNearestDraw, s), e[k] = p - (lanes[k] - s)·step
/// (bit-identical to the scalar loop); returns how many elements it did (0 without vectors).
std::size_t feedback_lanes_hwy(const float* x, float* e, std::size_t n, float inv, float step,
                               std::uint32_t s, std::uint32_t* lanes);
/// philox_hwy.cc: out[k] = (or +=) (codes[k] - bias)·step for k < n; returns the largest code.
std::uint32_t apply_bytes_hwy(const std::uint8_t* codes, std::size_t n, float step,
                              std::int32_t bias, bool accumulate, float* out);
#endif

/// Stochastic codes of `n` floats as bytes (levels s <= 127): out[k] = stochastic_code(x[k],
/// inv, u[k], s). The byte-lane fast path of maxnorm:bits=8.
void stochastic_bytes(const float* x, const float* u, std::size_t n, float inv, std::uint32_t s,
                      std::byte* out);
/// The same with the rounding in double (qsgd, terngrad: inv = levels / bucket scale) for
/// levels s <= 127: out[k] = stochastic_code(double(x[k]), inv, u[k], s).
void stochastic_bytes(const float* x, const float* u, std::size_t n, double inv, std::uint32_t s,
                      std::uint8_t* out);
void stochastic_bytes(const double* x, const float* u, std::size_t n, double inv, std::uint32_t s,
                      std::uint8_t* out);

/// max |x[k]| over k < n (0 for n = 0), as an integer max of the sign-cleared bit patterns: for
/// non-negative IEEE values the integer order is the numeric order and every NaN lies above
/// +inf, so the result is NaN exactly when some x[k] is NaN. One vectorized pass.
float abs_max(const float* x, std::size_t n);
double abs_max(const double* x, std::size_t n);
/// abs_max() of the sums x[k] + e[k] (float additions), without storing them.
float abs_max_sum(const float* x, const float* e, std::size_t n);

/// The root mean square of x[0, n) (0 for n = 0), squares summed in double (maxnorm's clip=),
/// and of the sums x[k] + e[k].
double rms(const float* x, std::size_t n);
double rms(const double* x, std::size_t n);
double rms_sum(const float* x, const float* e, std::size_t n);

}  // namespace ccoll::codec
