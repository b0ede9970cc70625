// Codec spec strings and the codec registry.
//
// Grammar: name[:key=value[,key=value]...] (a ',' may also separate the name from the first
// parameter). Unknown names, unknown keys and bad values are errors that list the valid ones.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codec.hpp"

namespace ccoll {

namespace gpu {
class Backend;
}  // namespace gpu
namespace codec {
class StreamForm;
class StreamSpace;
}  // namespace codec
namespace device_codecs {
struct StreamInput;
}  // namespace device_codecs

struct CodecSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  ///< Sorted by key.
  bool ef = false;  ///< The ef=1 modifier (error feedback), accepted by every codec.
  /// The ef=21 modifier (EF21 error feedback, codecs/ef21.cc): maxnorm (exact sums) and randk.
  bool ef21 = false;
  /// The codec keeps state between calls (ef=1, temporal, dq): its plans are keyed per tensor.
  bool stateful = false;
  /// The codec transforms all-reduce outputs (temporal, ef=21) and has no all-gather or
  /// reduce-scatter form.
  bool allreduce_only = false;
  /// Its payloads add without decoding (codec::Capabilities::summable), from the registry row.
  bool summable = false;
  /// Its codec also encodes an owner's sum on scales of its own (codec::Codec::encodes_rescaled:
  /// maxnorm with one scale, alone or with ef=1, and sum=requant in a contribution's lanes), so
  /// the sra all-reduce takes it.
  bool rescales = false;
  /// rotate=hadamard: the all-reduce and the reduce-scatter rotate their fp32 input blockwise
  /// before encoding and their output back (codecs/rotation.hpp on the host, the element
  /// kernels' rotate() on the device), in blocks of this many elements (the scale block); 0: no
  /// rotation.
  std::size_t rotate = 0;
  /// maxnorm:clip=C: a rank's scale of a block at most C root mean squares; 0: none.
  double clip = 0;
  /// Decoding returns the input bit for bit (codec::Capabilities::lossless), from the row.
  bool lossless = false;
  /// The registry row's other static traits, as codec::Capabilities names them.
  bool gather_reduce = false;
  bool prescale_mean = false;
  bool segment_local = false;
  std::string canonical;  ///< name[:k=v,...] with sorted keys (defaults filled in), then ef=1.

  /// The collectives besides the all-reduce it has a form for: the reduce-scatter unless it
  /// transforms all-reduce outputs; the all-gather unless that or it rotates (an all-gather's
  /// blocks are never summed, so a shared rotation has nothing to spread).
  bool reduce_scatter_form() const { return !allreduce_only; }
  bool allgather_form() const { return !allreduce_only && rotate == 0; }
};

/// Parses and validates `text` against the registry; throws ccoll::Error(kInvalidArgument)
/// naming the argument ("codec") and the valid choices.
CodecSpec parse_codec_spec(const std::string& text);

/// Creates the codec a valid spec names, for elements of `dtype`.
std::unique_ptr<codec::Codec> make_codec(const CodecSpec& spec, codec::DType dtype);

/// The most bytes a stateful tensor's plan of `spec` for `count` elements of `elem_bytes` keeps
/// between calls: its state (ef=1: two residuals; temporal: its prediction, previous output and
/// input, and a residual with ef=1), host or device memory, and 4 KiB of bookkeeping (the plan
/// and its codec objects, dq's among them), what CCOLL_STATE_MAX_BYTES counts.
std::size_t state_bytes(const CodecSpec& spec, std::size_t count, std::size_t elem_bytes);

/// True when device kernels exist for `spec` on elements of `dtype` (the registry's entry has a
/// device maker; float32 only): every codec but none, each also with ef=1 (the residuals then
/// live in device memory).
bool has_device_kernels(const CodecSpec& spec, codec::DType dtype);

/// The device codec of `spec` over `cpu` (the plan's CPU codec of the same spec, which it
/// forwards to and keeps in step), with payloads in device memory when `resident`; null when
/// has_device_kernels() is false.
std::unique_ptr<codec::Codec> make_device_codec(const CodecSpec& spec, codec::Codec& cpu,
                                                gpu::Backend& backend, bool resident = false);

/// True when `spec`'s codec has a stream form (codecs/stream_form.hpp) on float32 elements, so
/// that the stream-ordered calls (and the NCCL interposer) run it: the registry's entry has a
/// stream maker that takes this variant (maxnorm of one scale with exact sums, also ef=1).
bool has_stream_form(const CodecSpec& spec);

/// The stream form of `spec` for one call's input on `backend` (null where has_stream_form()
/// is false); `space` outlives it.
std::unique_ptr<codec::StreamForm> make_stream_form(const CodecSpec& spec, gpu::Backend& backend,
                                                    const device_codecs::StreamInput& in,
                                                    codec::StreamSpace& space);

/// Names of all registered codecs, in the order the documentation lists them.
std::vector<std::string> codec_names();

/// Worst-case all-reduce error of `codec` over `ranks` ranks, relative to Σ_i max|x_i| (see
/// ccoll::CodecInfo::error_bound). Summable codecs add p independent one-encode errors:
/// p·u. Codecs that re-encode partial sums compound: each hop's error is part of the next
/// hop's input, E_k <= (1+u)·E_(k-1) + u·Σ max|x_i|, so E_p <= ((1+u)^p - 1)·Σ max|x_i|.
/// A summable codec whose add re-quantizes (lossy_add) adds u·Σ_(j=2..p) j for the re-roundings
/// of j-contribution sums; one that encodes owner sums (sra, which auto may take) gets the larger
/// of that and scatter_reduce_error_bound(). All get p·2^-23 for the fp32 additions and the final
/// division. 0 for one rank or a lossless codec.
double allreduce_error_bound(const codec::Codec& codec, int ranks);

/// Worst-case error of the scatter-reduce-allgather all-reduce (coll::allreduce_scatter_reduce)
/// over `ranks` ranks, relative to Σ_i max|x_i| as allreduce_error_bound: every element is
/// quantized at most twice, so for codecs that cannot add codes it is (1+u)^2 - 1 whatever the
/// rank count (plus p·2^-23 for the fp32 additions and the division). For summable codecs that
/// encode owner sums (Codec::encodes_rescaled): (p-1)·u for the contributions and u/j of the
/// decoded sum for the owner's encode into lanes of j = coll::owner_sum_lanes(p). 0 for one rank
/// or a lossless codec.
double scatter_reduce_error_bound(const codec::Codec& codec, int ranks);

/// Parses a byte size with an optional K/M/G (binary) suffix, e.g. "64K"; throws
/// ccoll::Error(kInvalidArgument) naming `what` when malformed.
std::size_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace ccoll
