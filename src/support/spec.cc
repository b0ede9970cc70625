// Spec-string parser and the table of codecs it knows.
#include "spec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "backend.hpp"
#include "cast_codecs.hpp"
#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "device_codec.hpp"
#include "error_feedback.hpp"
#include "lowp.hpp"
#include "maxnorm_wire.hpp"
#include "quantizers.hpp"
#include "sim_model.hpp"
#include "temporal_rules.hpp"

namespace ccoll {
namespace {

// One parameter of a codec: name, the valid values as the error message lists them, a check
// that turns a given value into its canonical text, and its default (required when it has
// none). Defaults are spelled out in the canonical spec unless `hide_default`.
struct Param {
  const char* key;
  std::string valid;
  std::function<bool(const std::string&, std::string&)> canon;
  const char* def = nullptr;
  bool hide_default = false;
  const char* ef_def = nullptr;  ///< the default under ef=1, when it differs
};

bool all_digits(const std::string& v) {
  return !v.empty() && v.size() <= 9 && std::all_of(v.begin(), v.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

Param uint_param(const char* key, unsigned lo, unsigned hi, const char* def = nullptr) {
  return {key, std::to_string(lo) + ".." + std::to_string(hi),
          [lo, hi](const std::string& v, std::string& out) {
            if (!all_digits(v)) return false;
            const unsigned long x = std::stoul(v);
            if (x < lo || x > hi) return false;
            out = std::to_string(x);
            return true;
          },
          def};
}

// `p` with its default left out of the canonical spec.
Param hidden_default(Param p) {
  p.hide_default = true;
  return p;
}

// A fraction in [1e-6, 1], written back in its shortest round-trip form.
Param ratio_param(const char* key) {
  return {key, "a number in [1e-6, 1], e.g. 0.01", [](const std::string& v, std::string& out) {
            if (v.empty() || v.size() > 32) return false;
            const char* b = v.c_str();
            char* e = nullptr;
            const double x = std::strtod(b, &e);
            if (e != b + v.size() || !(x >= 1e-6) || x > 1.0) return false;
            out = codec::format_real(x);
            return true;
          }};
}

// A real in [lo, hi) (hi_open) or [lo, hi], written back in its shortest round-trip form; a
// default equal to `def` is left out of the canonical spec.
Param real_range_param(const char* key, double lo, double hi, bool hi_open, const char* valid,
                       const char* def) {
  return {key, valid,
          [lo, hi, hi_open](const std::string& v, std::string& out) {
            if (v.empty() || v.size() > 32) return false;
            const char* b = v.c_str();
            char* e = nullptr;
            const double x = std::strtod(b, &e);
            if (e != b + v.size() || !(x >= lo) || (hi_open ? !(x < hi) : !(x <= hi))) return false;
            out = codec::format_real(x);
            return true;
          },
          def, true};
}
Param choice_param(const char* key, std::vector<std::string> choices, const char* def) {
  std::string valid;
  for (const auto& c : choices) valid += (valid.empty() ? "" : ", ") + c;
  return {key, valid,
          [choices](const std::string& v, std::string& out) {
            if (std::find(choices.begin(), choices.end(), v) == choices.end()) return false;
            out = v;
            return true;
          },
          def, true};
}

// round: how a stochastic codec rounds to its levels. Unbiased stochastic rounding by default;
// under ef=1 nearest rounding, which keeps the residual bounded (codecs/error_feedback.hpp).
Param round_param() {
  Param p = choice_param("round", {"stochastic", "nearest"}, "stochastic");
  p.ef_def = "nearest";
  return p;
}

// sign's scale: the bucket's mean |x| by default; under ef=1 its root mean square, with which the
// residual settles within about a hundred calls (codecs/bucketed.cc).
Param sign_scale_param() {
  Param p = choice_param("scale", {"mean", "rms"}, "mean");
  p.ef_def = "rms";
  return p;
}

// The maxnorm family's elements per scale: a power of two from 256 to 65536 (`def`: a literal),
// after the choices in `blocks`.
Param block_param(const char* def, std::vector<std::string> blocks = {}) {
  for (std::size_t b = codec::kMaxnormMinBlock; b <= codec::kMaxnormBlock; b *= 2) {
    blocks.push_back(std::to_string(b));
  }
  return choice_param("block", blocks, def);
}

// sketch's elements per level table: a power of two from 256 to 65536 (default 1024,
// codec::kSketchDefaultBlock, left out of the canonical spec) or 0 (one table a payload).
Param sketch_block_param() {
  return block_param("1024", {"0"});  // codec::kSketchDefaultBlock
}

// rotate=hadamard (codecs/rotation.hpp), a parameter of the codecs with scale blocks; its
// default stays out of the canonical spec.
Param rotate_param() {
  return hidden_default(choice_param("rotate", {"none", "hadamard"}, "none"));
}

// The default of `p` for a spec with or without ef=1.
const char* default_of(const Param& p, bool ef) {
  return ef && p.ef_def != nullptr ? p.ef_def : p.def;
}

bool nearest(const CodecSpec& s);

// maxnorm's bits: B (2..8), or B1/B2 (2 <= B1 < B2 <= 8) for the two-scale variant.
Param maxnorm_bits_param() {
  return {"bits", "2..8, or B1/B2 with 2 <= B1 < B2 <= 8 (two-scale)",
          [](const std::string& v, std::string& out) {
            const std::size_t slash = v.find('/');
            const std::string a = v.substr(0, slash);
            if (!all_digits(a) || std::stoul(a) < 2 || std::stoul(a) > 8) return false;
            out = std::to_string(std::stoul(a));
            if (slash == std::string::npos) return true;
            const std::string b = v.substr(slash + 1);
            if (!all_digits(b) || std::stoul(b) <= std::stoul(a) || std::stoul(b) > 8) return false;
            out += "/" + std::to_string(std::stoul(b));
            return true;
          }};
}

// What a registry entry says of its codec beyond its parameters (bit flags).
enum Traits : unsigned {
  kOwnEf = 1,           // make() builds ef=1 into the codec (temporal): no generic wrapper
  kStateful = 2,        // state between calls even without ef=1 (temporal, dq)
  kAllreduceOnly = 4,   // no all-gather form (temporal)
  kSummable = 8,        // payloads add without decoding (Capabilities::summable)
  kLossless = 16,       // decode(encode(x)) == x (Capabilities::lossless)
  kGatherReduce = 32,   // auto reduces by an all-gather of payloads (Capabilities::gather_reduce)
  kPrescaleMean = 64,   // a mean divides before the schedule (Capabilities::prescale_mean)
  kSegmentLocal = 128,  // results depend on the ring's segments (Capabilities::segment_local)
};

using Maker = std::function<std::unique_ptr<codec::Codec>(const CodecSpec&, codec::DType)>;
using DeviceMaker = std::function<std::unique_ptr<codec::Codec>(const CodecSpec&, codec::Codec& cpu,
                                                                gpu::Backend&, bool resident)>;

using StreamMaker = std::function<std::unique_ptr<codec::StreamForm>(
    const CodecSpec&, gpu::Backend&, const device_codecs::StreamInput&, codec::StreamSpace&)>;

// A codec: its parameters, how to make its CPU codec and (null: it has no kernels) its device
// codec (device_codecs/device_codec.hpp) for float32 elements, and (null: none) its stream
// form where `streams` says the spec's variant has one.
struct Entry {
  const char* name;
  std::vector<Param> params;
  std::function<std::unique_ptr<codec::Codec>(const CodecSpec&, codec::DType)> make;
  DeviceMaker make_device = nullptr;
  unsigned traits = 0;
  // cross-parameter check on the canonical parameters; a message names what is wrong
  std::function<void(const CodecSpec&, const std::string& text)> check = nullptr;
  // per-element arrays of state the codec itself keeps per tensor (temporal: its prediction, the
  // previous output and the previous input), besides what ef=1 adds
  unsigned state_arrays = 0;
  std::function<bool(const CodecSpec&)> streams = nullptr;
  StreamMaker make_stream = nullptr;
  // where make_device is set: whether the spec's variant has kernels (null: every variant)
  std::function<bool(const CodecSpec&)> kernels = nullptr;
};

// mx:format= -> the element format
codec::Minifloat mx_format(const std::string& f) {
  return f == "fp8e5m2"   ? codec::Minifloat::kE5M2
         : f == "fp6e3m2" ? codec::Minifloat::kE3M2
         : f == "fp6e2m3" ? codec::Minifloat::kE2M3
         : f == "fp4e2m1" ? codec::Minifloat::kE2M1
                          : codec::Minifloat::kE4M3;
}

const std::string& value_of(const CodecSpec& s, const char* key) {
  for (const auto& kv : s.params) {
    if (kv.first == key) return kv.second;
  }
  throw Error(Status::kInternal, "codec parameter missing after validation");
}

bool has_param(const CodecSpec& s, const char* key) {
  for (const auto& kv : s.params) {
    if (kv.first == key) return true;
  }
  return false;
}

bool nearest(const CodecSpec& s) { return value_of(s, "round") == "nearest"; }

unsigned param(const CodecSpec& s, const char* key) {
  return static_cast<unsigned>(std::stoul(value_of(s, key)));
}

double real_param(const CodecSpec& s, const char* key) { return std::stod(value_of(s, key)); }

codec::MaxNormParams maxnorm_params(const CodecSpec& s) {
  codec::MaxNormParams m;
  const std::string& bits = value_of(s, "bits");
  const std::size_t slash = bits.find('/');
  m.bits = static_cast<unsigned>(std::stoul(bits.substr(0, slash)));
  if (slash != std::string::npos)
    m.fine_bits = static_cast<unsigned>(std::stoul(bits.substr(slash + 1)));
  m.requant = value_of(s, "sum") == "requant";
  m.nearest = nearest(s);
  m.block = param(s, "block");
  m.clip = real_param(s, "clip");
  return m;
}

DeviceMaker device_cast(bool half) {
  return [half](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
    const bool stochastic = !half && value_of(s, "round") == "stochastic";
    return device_codecs::make_device_cast(cpu, b, resident, half, stochastic);
  };
}

DeviceMaker device_bucketed(gpu::BucketKind kind) {
  return [kind](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
    device_codecs::BucketedParams p;
    p.kind = kind;
    p.bucket = param(s, "bucket");
    if (kind == gpu::BucketKind::kQsgd) p.bits = param(s, "bits");
    p.nearest = kind != gpu::BucketKind::kSign && nearest(s);
    p.rms = kind == gpu::BucketKind::kSign && value_of(s, "scale") == "rms";
    if (kind == gpu::BucketKind::kTernGrad) p.clip = real_param(s, "clip");
    return device_codecs::make_device_bucketed(cpu, b, resident, p);
  };
}

// fp8, mx and nvfp4: the payload layout of the spec (its format=, fp8's block=)
codec::LowpLayout lowp_layout_of(codec::LowpScheme scheme, const CodecSpec& s) {
  const codec::Minifloat f =
      scheme == codec::LowpScheme::kFp8
          ? (value_of(s, "format") == "e5m2" ? codec::Minifloat::kE5M2 : codec::Minifloat::kE4M3)
      : scheme == codec::LowpScheme::kMx ? mx_format(value_of(s, "format"))
                                         : codec::Minifloat::kE2M1;
  return codec::lowp_layout(scheme, f, scheme == codec::LowpScheme::kFp8 ? param(s, "block") : 0);
}
// fp8:round=stochastic
bool lowp_stochastic(const CodecSpec& s) {
  return has_param(s, "round") && value_of(s, "round") == "stochastic";
}
Maker lowp_maker(codec::LowpScheme scheme) {
  return [scheme](const CodecSpec& s, codec::DType t) {
    return codec::make_lowp_codec(t, lowp_layout_of(scheme, s), lowp_stochastic(s));
  };
}
DeviceMaker device_lowp(codec::LowpScheme scheme) {
  return [scheme](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
    return device_codecs::make_device_lowp(cpu, b, resident, lowp_layout_of(scheme, s),
                                           lowp_stochastic(s));
  };
}

codec::MaxNormParams randk_params(const CodecSpec& s) {
  codec::MaxNormParams m;
  m.bits = param(s, "bits");
  m.ratio = real_param(s, "ratio");
  m.nearest = nearest(s);
  m.block = param(s, "block");
  static_assert(codec::kRandkDefaultBlock == 65536 && codec::kMaxnormDefaultBlock == 1024,
                "the registry's block= defaults");
  return m;
}

codec::DqParams dq_params(const CodecSpec& s) {
  codec::DqParams p;
  p.min_bits = param(s, "min");
  p.max_bits = param(s, "max");
  p.budget = real_param(s, "budget");
  p.steps = param(s, "steps");
  p.decay = real_param(s, "decay");
  p.nearest = nearest(s);
  p.block = param(s, "block");
  return p;
}

codec::MaxNormParams auto_params(const CodecSpec& s) {
  codec::MaxNormParams m;
  m.bits = param(s, "bits");
  return m;
}

[[noreturn]] void bad(const std::string& msg);

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"none",
       {},
       [](const CodecSpec&, codec::DType t) { return codec::make_none_codec(t); },
       nullptr,
       kLossless},
      {"fp16",
       {},
       [](const CodecSpec&, codec::DType t) { return codec::make_fp16_codec(t); },
       device_cast(true),
       kPrescaleMean},
      {"bf16",
       {hidden_default(choice_param("round", {"nearest", "stochastic"}, "nearest"))},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_bf16_codec(t, value_of(s, "round") == "stochastic");
       },
       device_cast(false)},
      {"fp8",
       {choice_param("format", {"e4m3", "e5m2"}, "e4m3"), block_param("1024"),
        choice_param("round", {"nearest", "stochastic"}, "nearest")},
       lowp_maker(codec::LowpScheme::kFp8),
       device_lowp(codec::LowpScheme::kFp8),
       kSegmentLocal},
      {"mx",
       {choice_param("format", {"fp8e4m3", "fp8e5m2", "fp6e3m2", "fp6e2m3", "fp4e2m1"}, "fp8e4m3")},
       lowp_maker(codec::LowpScheme::kMx),
       device_lowp(codec::LowpScheme::kMx),
       kSegmentLocal},
      {"nvfp4",
       {},
       lowp_maker(codec::LowpScheme::kNvfp4),
       device_lowp(codec::LowpScheme::kNvfp4),
       kSegmentLocal},
      {"maxnorm",
       {maxnorm_bits_param(), choice_param("sum", {"exact", "requant"}, "exact"), round_param(),
        block_param("1024"),  // codec::kMaxnormDefaultBlock
        rotate_param(),
        real_range_param("clip", 0.0, 100.0, false,
                         "a number in [0, 100] (root mean squares of the block; 0: its largest "
                         "magnitude), e.g. 2",
                         "0")},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_maxnorm_codec(t, maxnorm_params(s));
       },
       [](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_maxnorm(cpu, b, resident, maxnorm_params(s));
       },
       kSummable,
       [](const CodecSpec& s, const std::string& text) {
         // the re-quantizing add rounds between ranks, where no residual can make up for it: the
         // average of many calls would converge only as 1/sqrt(T)
         if ((s.ef || s.ef21) && value_of(s, "sum") == "requant") {
           bad("maxnorm:sum=requant cannot take ef=" + std::string(s.ef ? "1" : "21") + " in '" +
               text +
               "': error feedback cannot compensate the re-quantizing add (valid with error "
               "feedback: sum=exact)");
         }
       },
       0,
       // one scale and exact sums (ef=1 included: the form keeps the residual in its pass)
       [](const CodecSpec& s) {
         return !s.ef21 && device_codecs::maxnorm_streams(maxnorm_params(s));
       },
       [](const CodecSpec& s, gpu::Backend& b, const device_codecs::StreamInput& in,
          codec::StreamSpace& space) {
         return device_codecs::make_stream_maxnorm(b, maxnorm_params(s), in, space);
       }},
      {"randk",
       {ratio_param("ratio"), uint_param("bits", 2, 8, "8"), round_param(),
        block_param("65536"),  // codec::kRandkDefaultBlock
        rotate_param()},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_maxnorm_codec(t, randk_params(s));
       },
       [](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_maxnorm(cpu, b, resident, randk_params(s));
       },
       kSummable},
      {"qsgd",
       {uint_param("bits", 2, 8), uint_param("bucket", 1, 1u << 23, "512"), round_param()},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_qsgd_codec(t, param(s, "bits"), param(s, "bucket"), nearest(s));
       },
       device_bucketed(gpu::BucketKind::kQsgd),
       kSegmentLocal},
      {"terngrad",
       {uint_param("bucket", 1, 1u << 23, "512"), round_param(),
        real_range_param("clip", 0.0, 100.0, false,
                         "a number in [0, 100] (root mean squares; 0: no clipping), e.g. 2.5",
                         "2.5")},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_terngrad_codec(t, param(s, "bucket"), nearest(s),
                                           real_param(s, "clip"));
       },
       device_bucketed(gpu::BucketKind::kTernGrad),
       kSegmentLocal},
      {"sign",
       {uint_param("bucket", 1, 1u << 23, "512"), sign_scale_param()},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_sign_codec(t, param(s, "bucket"), value_of(s, "scale") == "rms");
       },
       device_bucketed(gpu::BucketKind::kSign),
       kSegmentLocal},
      {"topk",
       {ratio_param("ratio")},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_topk_codec(t, real_param(s, "ratio"));
       },
       [](const CodecSpec&, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_topk(cpu, b, resident);
       },
       kGatherReduce | kSegmentLocal},
      {"sketch",
       {uint_param("bits", 1, 8), uint_param("clusters", 1, 64, "4"), sketch_block_param(),
        round_param(), choice_param("zero", {"1", "0"}, "1"),
        choice_param("refine", {"1", "0"}, "1")},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_sketch_codec(t, param(s, "bits"), param(s, "clusters"),
                                         param(s, "block"), nearest(s), value_of(s, "zero") == "1",
                                         value_of(s, "refine") == "1");
       },
       [](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_sketch(cpu, b, resident, param(s, "bits"),
                                                  param(s, "clusters"), nearest(s));
       },
       kSegmentLocal,
       nullptr,
       0,
       nullptr,
       nullptr,
       // a table a block is fitted on the host from the whole block: no kernels
       [](const CodecSpec& s) { return param(s, "block") == 0; }},
      {"temporal",
       {uint_param("bits", 2, 8),
        real_range_param("beta", 0.0, 1.0, true, "a number in [0, 1), e.g. 0.9", "0.9"),
        round_param(), choice_param("shrink", {"1", "0"}, "1"),
        block_param("65536"),  // codec::kMaxnormBlock
        rotate_param()},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_temporal_codec(t, param(s, "bits"), real_param(s, "beta"), s.ef,
                                           nearest(s), value_of(s, "shrink") == "1",
                                           param(s, "block"));
       },
       [](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_temporal(
             cpu, b, resident, param(s, "bits"),
             codec::temporal_predictor(real_param(s, "beta"), param(s, "bits"),
                                       value_of(s, "shrink") == "1"),
             s.ef, nearest(s), param(s, "block"));
       },
       kOwnEf | kStateful | kAllreduceOnly | kSummable,
       nullptr,
       3},
      {"dq",
       {uint_param("min", 2, 8), uint_param("max", 2, 8),
        real_range_param("budget", 1e-9, 1e9, false, "a number in [1e-9, 1e9], e.g. 1", "1"),
        hidden_default(uint_param("steps", 0, 999999999, "0")),
        real_range_param("decay", 1e-3, 1.0, false, "a number in [0.001, 1], e.g. 0.999", "1"),
        round_param(), block_param("65536"),  // codec::kMaxnormBlock
        rotate_param()},
       [](const CodecSpec& s, codec::DType t) { return codec::make_dq_codec(t, dq_params(s)); },
       [](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_dq(cpu, b, resident, dq_params(s));
       },
       kStateful | kSummable,
       [](const CodecSpec& s, const std::string& text) {
         if (std::stoul(value_of(s, "min")) > std::stoul(value_of(s, "max"))) {
           bad("dq:min=" + value_of(s, "min") + " is larger than max=" + value_of(s, "max") +
               " in '" + text + "' (valid: 2 <= min <= max <= 8)");
         }
       }},
      // auto: per size class, the fastest of plain MPI, ccoll's own schedules uncompressed,
      // and maxnorm at these bits (api.cc); the codec it may use is maxnorm:bits=B.
      {"auto",
       {uint_param("bits", 2, 8, "8")},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_maxnorm_codec(t, auto_params(s));
       },
       [](const CodecSpec& s, codec::Codec& cpu, gpu::Backend& b, bool resident) {
         return device_codecs::make_device_maxnorm(cpu, b, resident, auto_params(s));
       },
       kSummable},
  };
  return entries;
}

std::vector<std::string> keys_of(const Entry& e) {
  std::vector<std::string> keys;
  for (const auto& p : e.params) keys.emplace_back(p.key);
  return keys;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

std::string trim(const std::string& s) {
  std::size_t b = 0;
  std::size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

[[noreturn]] void bad(const std::string& msg) {
  throw Error(Status::kInvalidArgument, "codec: " + msg);
}

}  // namespace

std::vector<std::string> codec_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.name);
  return names;
}

CodecSpec parse_codec_spec(const std::string& text) {
  const std::string s = trim(text);
  if (s.empty()) bad("empty spec string (valid codecs: " + join(codec_names()) + ")");
  const std::size_t sep = s.find_first_of(":,");
  CodecSpec spec;
  spec.name = trim(s.substr(0, sep));
  const auto it = std::find_if(registry().begin(), registry().end(),
                               [&](const Entry& e) { return spec.name == e.name; });
  if (it == registry().end()) {
    bad("unknown codec '" + spec.name + "' in '" + s + "' (valid: " + join(codec_names()) + ")");
  }
  bool saw_ef = false;
  if (sep != std::string::npos) {
    const std::string rest = s.substr(sep + 1);
    std::size_t pos = 0;
    while (pos <= rest.size()) {
      const std::size_t comma = rest.find(',', pos);
      const std::string item =
          trim(rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      const std::size_t eq = item.find('=');
      // the first item of a codec with a format= may be the format alone (fp8:e5m2)
      const bool format_alone =
          pos == 0 && !item.empty() && eq == std::string::npos &&
          std::any_of(it->params.begin(), it->params.end(),
                      [](const Param& p) { return std::string(p.key) == "format"; });
      if (!format_alone &&
          (item.empty() || eq == std::string::npos || eq == 0 || eq + 1 == item.size())) {
        bad("malformed parameter '" + item + "' in '" + s + "' (expected key=value)");
      }
      const std::string key = format_alone ? "format" : trim(item.substr(0, eq));
      const std::string value = format_alone ? item : trim(item.substr(eq + 1));
      if (key == "ef") {
        if (value != "0" && value != "1" && value != "21") {
          bad("ef=" + value + " in '" + s + "' (valid: 0, 1, 21)");
        }
        if (saw_ef) bad("parameter 'ef' given twice in '" + s + "'");
        saw_ef = true;
        spec.ef = value == "1";
        spec.ef21 = value == "21";
        if (comma == std::string::npos) break;
        pos = comma + 1;
        continue;
      }
      const auto pit = std::find_if(it->params.begin(), it->params.end(),
                                    [&](const Param& p) { return key == p.key; });
      if (pit == it->params.end()) {
        bad("unknown parameter '" + key + "' for codec '" + spec.name +
            "' (valid: " + join(keys_of(*it)) + (it->params.empty() ? "" : ", ") + "ef)");
      }
      std::string canon;
      if (!pit->canon(value, canon)) {
        bad(spec.name + ":" + key + "=" + value + " is out of range (valid: " + pit->valid + ")");
      }
      for (const auto& kv : spec.params) {
        if (kv.first == key) bad("parameter '" + key + "' given twice in '" + s + "'");
      }
      spec.params.emplace_back(key, canon);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  for (const Param& p : it->params) {
    const bool given = std::any_of(spec.params.begin(), spec.params.end(),
                                   [&](const auto& kv) { return kv.first == p.key; });
    if (given) continue;
    const char* def = default_of(p, spec.ef || spec.ef21);
    if (def == nullptr) bad("codec '" + spec.name + "' needs " + p.key + "=" + p.valid);
    spec.params.emplace_back(p.key, def);
  }
  std::sort(spec.params.begin(), spec.params.end());
  if (spec.ef21 && spec.name != "maxnorm" && spec.name != "randk") {
    bad("ef=21 in '" + s + "': EF21 needs a codec whose sums are exact (valid: maxnorm, randk)");
  }
  if (it->check) it->check(spec, s);
  spec.stateful = spec.ef || spec.ef21 || (it->traits & kStateful) != 0;
  // ef=21's output transform (codecs/ef21.cc) has no all-gather or reduce-scatter form
  spec.allreduce_only = spec.ef21 || (it->traits & kAllreduceOnly) != 0;
  spec.summable = (it->traits & kSummable) != 0;
  spec.rescales =
      spec.name == "maxnorm" && !spec.ef21 && value_of(spec, "bits").find('/') == std::string::npos;
  spec.rotate = has_param(spec, "rotate") && value_of(spec, "rotate") == "hadamard"
                    ? std::stoul(value_of(spec, "block"))
                    : 0;
  spec.clip = spec.name == "maxnorm" ? real_param(spec, "clip") : 0.0;
  spec.lossless = (it->traits & kLossless) != 0;
  spec.gather_reduce = (it->traits & kGatherReduce) != 0;
  spec.prescale_mean = (it->traits & kPrescaleMean) != 0;
  spec.segment_local = (it->traits & kSegmentLocal) != 0;
  spec.canonical = spec.name;
  char sep_char = ':';
  for (const auto& kv : spec.params) {
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    const auto pit = std::find_if(it->params.begin(), it->params.end(),
                                  [&key](const Param& p) { return key == p.key; });
    if (pit->hide_default && value == default_of(*pit, spec.ef || spec.ef21)) continue;
    spec.canonical += sep_char + key + "=" + value;
    sep_char = ',';
  }
  if (spec.ef) spec.canonical += sep_char + std::string("ef=1");
  if (spec.ef21) spec.canonical += sep_char + std::string("ef=21");
  return spec;
}

const Entry& entry_of(const CodecSpec& spec) {
  for (const auto& e : registry()) {
    if (spec.name == e.name) return e;
  }
  bad("unknown codec '" + spec.name + "' (valid: " + join(codec_names()) + ")");
}

std::unique_ptr<codec::Codec> make_codec(const CodecSpec& spec, codec::DType dtype) {
  const Entry& e = entry_of(spec);
  auto c = e.make(spec, dtype);
  if (spec.ef21) return sim::modelled(codec::make_ef21_codec(std::move(c), spec.canonical));
  const bool wrap = spec.ef && (e.traits & kOwnEf) == 0;
  if (wrap) c = codec::make_error_feedback_codec(std::move(c), spec.canonical);
  return sim::modelled(std::move(c));  // itself, unless time-only simulation (CCOLL_SIM_MODEL)
}

std::size_t state_bytes(const CodecSpec& spec, std::size_t count, std::size_t elem_bytes) {
  const Entry& e = entry_of(spec);
  std::size_t arrays = e.state_arrays;
  // ef=1: the wrapper's own and hop residuals; temporal keeps one residual itself
  if (spec.ef) arrays += (e.traits & kOwnEf) != 0 ? 1 : 2;
  if (spec.ef21) arrays += 2;  // g and G
  // what a stateful tensor holds besides its arrays: its plan, its codec objects (dq's one per
  // width) and their small tables; the codecs' batches and per-call arrays are per thread
  // (codecs/scratch.hpp). Measured at 1-4 KiB (test/faults/state_memory.cc, every stateful
  // codec), so that CCOLL_STATE_MAX_BYTES bounds the memory the tensors really hold.
  constexpr std::size_t kBookkeepingBytes = 4096;
  return arrays * count * elem_bytes + kBookkeepingBytes;
}

bool has_device_kernels(const CodecSpec& spec, codec::DType dtype) {
  if (spec.ef21) return false;  // ef=21 runs on the host codec (device buffers staged)
  const Entry& e = entry_of(spec);
  return dtype == codec::DType::kFloat32 && e.make_device != nullptr &&
         (e.kernels == nullptr || e.kernels(spec));
}

std::unique_ptr<codec::Codec> make_device_codec(const CodecSpec& spec, codec::Codec& cpu,
                                                gpu::Backend& backend, bool resident) {
  if (!has_device_kernels(spec, cpu.dtype())) return nullptr;
  const Entry& e = entry_of(spec);
  if (!spec.ef || (e.traits & kOwnEf) != 0) return e.make_device(spec, cpu, backend, resident);
  // ef=1: the device wrapper around the device codec of the spec without it, as make_codec()
  // wraps the CPU codec
  auto cpu_inner = e.make(spec, cpu.dtype());
  auto dev_inner = e.make_device(spec, *cpu_inner, backend, resident);
  return device_codecs::make_device_error_feedback(cpu, backend, resident, std::move(cpu_inner),
                                                   std::move(dev_inner));
}

bool has_stream_form(const CodecSpec& spec) {
  const Entry& e = entry_of(spec);
  return e.make_stream != nullptr && e.streams(spec);
}

std::unique_ptr<codec::StreamForm> make_stream_form(const CodecSpec& spec, gpu::Backend& backend,
                                                    const device_codecs::StreamInput& in,
                                                    codec::StreamSpace& space) {
  if (!has_stream_form(spec)) return nullptr;
  return entry_of(spec).make_stream(spec, backend, in, space);
}

double allreduce_error_bound(const codec::Codec& codec, int ranks) {
  if (ranks <= 1 || codec.capabilities().lossless) return 0.0;
  const double u = codec.unit_roundoff();
  const double p = ranks;
  double hops = codec.capabilities().summable ? p * u : std::pow(1.0 + u, p) - 1.0;
  // sum=requant: re-quantizing a sum of j contributions errs by up to j·u·M more; a ring adds
  // j = 2..p (a tree's merges add up to less: p·log2 p)
  if (codec.capabilities().lossy_add) hops += u * (p * (p + 1) / 2 - 1);
  // auto may take sra for a codec that encodes owner sums: its bound as well
  if (codec.capabilities().summable && codec.encodes_rescaled()) {
    return std::max(hops + p * 0x1p-23, scatter_reduce_error_bound(codec, ranks));
  }
  return hops + p * 0x1p-23;
}

double scatter_reduce_error_bound(const codec::Codec& codec, int ranks) {
  if (ranks <= 1 || codec.capabilities().lossless) return 0.0;
  const double u = codec.unit_roundoff();
  if (codec.capabilities().summable) {
    // every contribution but the owner's quantized once on the agreed scales (by u against the
    // largest input), the sum once more by its owner on its own scales in the lanes of j
    // contributions (by u/j against the decoded sum, itself within (1 + (p-1)·u) of Σ max|x_i|)
    const double q = (ranks - 1) * u;
    return q + u / coll::owner_sum_lanes(ranks, codec.capabilities().lossy_add) * (1 + q) +
           ranks * 0x1p-23;
  }
  // every contribution but the owner's quantized once (by u against its own maximum), the sum
  // once more by its owner (by u against the decoded sum)
  return (1 + u) * (1 + u) - 1 + ranks * 0x1p-23;
}

std::size_t parse_byte_size(const std::string& text, const std::string& what) {
  const std::string s = trim(text);
  std::size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  std::size_t shift = 0;
  const std::string suffix = s.substr(digits);
  if (suffix == "K" || suffix == "k" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g" || suffix == "GiB") {
    shift = 30;
  } else if (!suffix.empty()) {
    digits = 0;  // reject below
  }
  if (digits == 0 || digits > 15) {
    throw Error(Status::kInvalidArgument,
                what + ": '" + text + "' is not a byte size (expected e.g. 4096, 64K, 1M, 2G)");
  }
  return static_cast<std::size_t>(std::stoull(s.substr(0, digits))) << shift;
}

}  // namespace ccoll
