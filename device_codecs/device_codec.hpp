// Device codecs: a codec whose element buffers are device memory. Its payloads are either host
// memory (staged: encode runs the kernel and copies only the payload's body to the host; decode
// validates the payload on the host as the CPU codec does, copies the body to the device and
// decodes there; the compressed-domain add is the CPU codec's) or device memory (resident, for a
// CUDA-aware MPI: the headers and scales cross to the host to be validated, the bodies stay,
// and summable codecs add with the add kernel). The payload bytes equal the CPU codec's either
// way, so the schedules and the peers' decoders are unchanged: a rank with device buffers and
// one with host buffers interoperate.
//
// One file per codec here; the codec registry (src/support/spec.cc) says for each codec how to make
// its CPU codec and its device codec, and has_device_kernels()/make_device_codec() (spec.hpp) ask
// it.
#pragma once

#include <memory>

#include "backend.hpp"
#include "bucketed_device.hpp"  // BucketKind
#include "codec.hpp"
#include "lowp_rules.hpp"
#include "maxnorm_device.hpp"  // gpu::Input
#include "quantizers.hpp"
#include "stream_form.hpp"

namespace ccoll {

/// The device codecs, one per file of device_codecs/; the registry calls them. `cpu` is the
/// CPU codec of the same spec, which the device codec answers what touches no memory from.
namespace device_codecs {

/// fp16 (`half`) or bf16, with bf16:round=stochastic's draws when `stochastic`
std::unique_ptr<codec::Codec> make_device_cast(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                               bool half, bool stochastic = false);
/// maxnorm (also randk and codec=auto's maxnorm)
std::unique_ptr<codec::Codec> make_device_maxnorm(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                                  const codec::MaxNormParams& p);
struct BucketedParams {
  gpu::BucketKind kind = gpu::BucketKind::kQsgd;
  unsigned bits = 4;  ///< qsgd only
  unsigned bucket = 512;
  bool nearest = false;  ///< round=nearest (qsgd, terngrad)
  bool rms = false;      ///< sign:scale=rms
  double clip = 0;       ///< terngrad:clip=c
};
/// qsgd, terngrad, sign
std::unique_ptr<codec::Codec> make_device_bucketed(codec::Codec& cpu, gpu::Backend& b,
                                                   bool resident, const BucketedParams& p);
std::unique_ptr<codec::Codec> make_device_sketch(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                                 unsigned bits, unsigned clusters, bool nearest);
std::unique_ptr<codec::Codec> make_device_topk(codec::Codec& cpu, gpu::Backend& b, bool resident);
/// fp8, mx, nvfp4 (codecs/lowp_rules.hpp's layout; `stochastic`: fp8:round=stochastic)
std::unique_ptr<codec::Codec> make_device_lowp(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                               const codec::LowpLayout& layout, bool stochastic);
/// temporal around the device maxnorm of `bits`; takes ef=1 itself. `beta`: the predictor
/// coefficient (codec::temporal_predictor of the spec's beta)
std::unique_ptr<codec::Codec> make_device_temporal(codec::Codec& cpu, gpu::Backend& b,
                                                   bool resident, unsigned bits, double beta,
                                                   bool ef, bool nearest, std::size_t block);
/// dq: the device maxnorm of every width from `min_bits` to `max_bits`
std::unique_ptr<codec::Codec> make_device_dq(codec::Codec& cpu, gpu::Backend& b, bool resident,
                                             const codec::DqParams& p);
/// ef=1 around `dev_inner` (the device codec of the spec without ef, over `cpu_inner`)
std::unique_ptr<codec::Codec> make_device_error_feedback(codec::Codec& cpu, gpu::Backend& b,
                                                         bool resident,
                                                         std::unique_ptr<codec::Codec> cpu_inner,
                                                         std::unique_ptr<codec::Codec> dev_inner);

/// What a stream form (codecs/stream_form.hpp) is made for: this rank's input of one
/// stream-ordered call, in device memory.
struct StreamInput {
  const void* data = nullptr;               ///< `count` elements of `input`
  gpu::Input input = gpu::Input::kFloat32;  ///< fp32, or 16-bit values the kernels widen
  std::size_t count = 0;
  float* residual = nullptr;  ///< ef=1: this rank's residual of the tensor (count floats)
  std::uint64_t seed = 0;
  std::uint64_t call = 0;  ///< the call's number (the codes' random stream)
  int rank = 0;
  int ranks = 1;
};

/// Whether maxnorm of `p` has a stream form: one scale, exact sums, no randk.
bool maxnorm_streams(const codec::MaxNormParams& p);
/// maxnorm's stream form (device_stream_maxnorm.cc), its steps on `b`'s current stream;
/// `space` outlives it.
std::unique_ptr<codec::StreamForm> make_stream_maxnorm(gpu::Backend& b,
                                                       const codec::MaxNormParams& p,
                                                       const StreamInput& in,
                                                       codec::StreamSpace& space);

}  // namespace device_codecs

}  // namespace ccoll
