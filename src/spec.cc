// Spec-string parser and the table of codecs it knows.
#include "spec.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>

#include "cast_codecs.hpp"
#include "error_feedback.hpp"
#include "quantizers.hpp"
#include "ccoll/error.hpp"

namespace ccoll {
namespace {

// One parameter of a codec: name, accepted range, default (required when it has none).
struct Param {
  const char* key;
  unsigned lo;
  unsigned hi;
  bool has_default;
  unsigned def;
};

struct Entry {
  const char* name;
  std::vector<Param> params;
  std::function<std::unique_ptr<codec::Codec>(const CodecSpec&, codec::DType)> make;
};

unsigned param(const CodecSpec& s, const char* key) {
  for (const auto& kv : s.params) {
    if (kv.first == key) return static_cast<unsigned>(std::stoul(kv.second));
  }
  throw Error(Status::kInternal, "codec parameter missing after validation");
}

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"none", {}, [](const CodecSpec&, codec::DType t) { return codec::make_none_codec(t); }},
      {"fp16", {}, [](const CodecSpec&, codec::DType t) { return codec::make_fp16_codec(t); }},
      {"bf16", {}, [](const CodecSpec&, codec::DType t) { return codec::make_bf16_codec(t); }},
      {"maxnorm",
       {{"bits", 2, 8, false, 0}},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_maxnorm_codec(t, param(s, "bits"));
       }},
      {"qsgd",
       {{"bits", 2, 8, false, 0}, {"bucket", 1, 1u << 23, true, 512}},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_qsgd_codec(t, param(s, "bits"), param(s, "bucket"));
       }},
      {"terngrad",
       {{"bucket", 1, 1u << 23, true, 512}},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_terngrad_codec(t, param(s, "bucket"));
       }},
      {"sign",
       {{"bucket", 1, 1u << 23, true, 512}},
       [](const CodecSpec& s, codec::DType t) {
         return codec::make_sign_codec(t, param(s, "bucket"));
       }},
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
      if (item.empty() || eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        bad("malformed parameter '" + item + "' in '" + s + "' (expected key=value)");
      }
      const std::string key = trim(item.substr(0, eq));
      const std::string value = trim(item.substr(eq + 1));
      if (key == "ef") {
        if (value != "0" && value != "1") bad("ef=" + value + " (valid: 0, 1)");
        if (saw_ef) bad("parameter 'ef' given twice in '" + s + "'");
        saw_ef = true;
        spec.ef = value == "1";
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
      const std::string range = std::to_string(pit->lo) + ".." + std::to_string(pit->hi);
      if (spec.name == "maxnorm" && key == "bits" && value.find('/') != std::string::npos) {
        throw Error(Status::kUnsupported,
                    "codec: two-scale maxnorm (bits=B1/B2) is not supported yet (valid: bits=" +
                        range + ")");
      }
      const bool digits = value.size() <= 9 &&
                          std::all_of(value.begin(), value.end(),
                                      [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (!digits || std::stoul(value) < pit->lo || std::stoul(value) > pit->hi) {
        bad(spec.name + ":" + key + "=" + value + " is out of range (valid: " + range + ")");
      }
      for (const auto& kv : spec.params) {
        if (kv.first == key) bad("parameter '" + key + "' given twice in '" + s + "'");
      }
      spec.params.emplace_back(key, value);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  for (const Param& p : it->params) {
    const bool given = std::any_of(spec.params.begin(), spec.params.end(),
                                   [&](const auto& kv) { return kv.first == p.key; });
    if (given) continue;
    if (!p.has_default) {
      bad("codec '" + spec.name + "' needs " + p.key + "=" + std::to_string(p.lo) + ".." +
          std::to_string(p.hi));
    }
    spec.params.emplace_back(p.key, std::to_string(p.def));
  }
  std::sort(spec.params.begin(), spec.params.end());
  spec.canonical = spec.name;
  for (std::size_t i = 0; i < spec.params.size(); ++i) {
    spec.canonical += (i == 0 ? ":" : ",") + spec.params[i].first + "=" + spec.params[i].second;
  }
  if (spec.ef) spec.canonical += spec.params.empty() ? ":ef=1" : ",ef=1";
  return spec;
}

std::unique_ptr<codec::Codec> make_codec(const CodecSpec& spec, codec::DType dtype) {
  for (const auto& e : registry()) {
    if (spec.name == e.name) {
      auto c = e.make(spec, dtype);
      return spec.ef ? codec::make_error_feedback_codec(std::move(c)) : std::move(c);
    }
  }
  bad("unknown codec '" + spec.name + "' (valid: " + join(codec_names()) + ")");
}

double allreduce_error_bound(const codec::Codec& codec, int ranks) {
  if (ranks <= 1 || codec.capabilities().lossless) return 0.0;
  const double u = codec.unit_roundoff();
  const double p = ranks;
  const double hops = codec.capabilities().summable ? p * u : std::pow(1.0 + u, p) - 1.0;
  return hops + p * 0x1p-23;
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
