// The modelled codec of time-only simulation (sim_model.hpp).
#include "sim_model.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ccoll/error.hpp"
#include "forwarding.hpp"
#include "wire.hpp"

#if defined(CCOLL_SMPI)
#include <mpi.h>  // SMPI's: smpi_execute_benched, smpi_shared_malloc
#endif

namespace ccoll::sim {
namespace {

constexpr const char* kVar = "CCOLL_SIM_MODEL";

// GB/s of the codec's elements for each kind of work.
struct Rates {
  double encode = 0;
  double decode = 0;
  double add = 0;
  double scan = 0;
};

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw Error(Status::kInvalidArgument,
              std::string(kVar) + ": '" + text + "': " + why +
                  " (valid: encode=GBPS,decode=GBPS[,add=GBPS][,scan=GBPS], GB/s of the "
                  "codec's elements, e.g. encode=585,decode=1014,add=720,scan=1291)");
}

Rates parse(const std::string& text) {
  Rates r;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) bad(text, "'" + item + "' is not KEY=GBPS");
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    char* stop = nullptr;
    const double v = std::strtod(value.c_str(), &stop);
    if (value.empty() || *stop != '\0' || !(v > 0) || !(v < 1e9)) {
      bad(text, "'" + value + "' is not a rate above 0");
    }
    if (key == "encode") {
      r.encode = v;
    } else if (key == "decode") {
      r.decode = v;
    } else if (key == "add") {
      r.add = v;
    } else if (key == "scan") {
      r.scan = v;
    } else {
      bad(text, "unknown key '" + key + "'");
    }
    at = end + 1;
  }
  if (r.encode == 0 || r.decode == 0) bad(text, "encode and decode are required");
  if (r.add == 0) r.add = r.decode;
  if (r.scan == 0) r.scan = r.encode;
  return r;
}

// The rates (the variable is the process's, hence every simulated rank's), parsed again only
// when the variable changes; checked in every build, so that a malformed value gets its own
// error everywhere.
const Rates* rates() {
  // never destroyed: a codec may be made while the process exits (a queued call at finalize)
  struct State {
    std::mutex mu;  // codecs are made on several threads (progress, hierarchical helper)
    std::string seen;
    std::optional<Rates> parsed;
  };
  static State* const state = new State;
  const char* v = std::getenv(kVar);
  const std::string now = v != nullptr ? v : "";
  if (now.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(state->mu);
  std::string& seen = state->seen;
  std::optional<Rates>& parsed = state->parsed;
  if (now != seen || !parsed) {
    parsed.reset();
    const Rates r = parse(now);
#if !defined(CCOLL_SMPI)
    throw Error(Status::kUnsupported, std::string(kVar) +
                                          " is set, but only the SimGrid SMPI build "
                                          "(bench/sim/build.sh) models codecs (valid here: unset)");
#endif
    parsed = r;
    seen = now;
  }
  return &*parsed;
}

// count elements of elem_bytes' worth of work at `gbps` on the simulated clock
void charge_clock(std::size_t count, std::size_t elem_bytes, double gbps) {
#if defined(CCOLL_SMPI)
  const double bytes = static_cast<double>(count) * static_cast<double>(elem_bytes);
  if (bytes > 0) smpi_execute_benched(bytes / (gbps * 1e9));
#else
  (void)count;
  (void)elem_bytes;
  (void)gbps;
#endif
}

class ModelledCodec final : public codec::ForwardingCodec {
 public:
  ModelledCodec(std::unique_ptr<codec::Codec> real, const Rates& rates)
      : real_(std::move(real)), rates_(rates), elem_(codec::dtype_size(real_->dtype())) {
    set_target(real_.get());
  }

  const std::string& spec() const override { return real_->spec(); }
  bool needs_fallback(const void*, std::size_t, int) const override { return false; }
  bool scan(const void*, std::size_t count, int, double* scales, bool& fallback) const override {
    charge(count, rates_.scan);
    fallback = false;
    if (scales == nullptr) return false;
    ones(scales, real_->scale_slots(count));
    return true;
  }
  void local_scales(const void*, std::size_t count, double* out) const override {
    charge(count, rates_.scan);
    ones(out, real_->scale_slots(count));
  }
  // the agreed scales of garbage elements could be anything: the real codec gets ones, which
  // no payload length depends on
  void set_scales(const double*, std::size_t n) override {
    std::vector<double> s(n);
    ones(s.data(), n);
    real_->set_scales(s.data(), n);
  }
  bool encodes_sums() const override { return real_->encodes_sums(); }
  bool encodes_rescaled() const override { return real_->encodes_rescaled(); }

  std::size_t encode(const void*, std::size_t count, const codec::BlockContext& ctx,
                     std::byte* out) override {
    charge(count, rates_.encode);
    return write(count, ctx.offset, ctx.rescale != 0 ? ctx.rescale : 1, out);
  }
  std::size_t encode_sum(const void*, std::size_t count, const codec::BlockContext& ctx,
                         std::byte* out, std::uint32_t contributions) override {
    charge(count, rates_.encode);
    return write(count, ctx.offset, contributions, out);
  }
  void decode(const std::byte*, std::size_t, std::size_t count, void*) override {
    charge(count, rates_.decode);
  }
  void decode_accumulate(const std::byte*, std::size_t, std::size_t count, void*) override {
    charge(count, rates_.decode);
  }
  std::size_t reduce_encode(const std::byte*, std::size_t, std::size_t count, void*,
                            const codec::BlockContext& ctx, std::byte* out) override {
    charge(count, rates_.decode);
    return encode(nullptr, count, ctx, out);
  }
  std::size_t add_encoded(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                          std::size_t b_bytes, std::size_t count, const codec::BlockContext& ctx,
                          std::byte* out) override {
    const std::uint32_t j = contributions(a, a_bytes) + contributions(b, b_bytes);
    charge(count, rates_.add);
    return write(count, ctx.offset, j, out);
  }

 private:
  static void ones(double* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = 1.0;
  }
  void charge(std::size_t count, double gbps) const { charge_clock(count, elem_, gbps); }
  // the real payload's length, with a header that says how many contributions it sums
  std::size_t write(std::size_t count, std::uint64_t offset, std::uint32_t j, std::byte* out) {
    const std::size_t n = real_->payload_bytes(count, offset, j);
    if (n == 0) {
      throw Error(Status::kUnsupported, std::string(kVar) + ": codec '" + spec() +
                                            "' has payloads whose length depends on the "
                                            "values, which time-only simulation cannot model "
                                            "(valid: codecs of fixed-length payloads)");
    }
    wire::Header h;
    h.param = j;
    h.count = count;
    wire::write_header(out, h);
    return n;
  }
  static std::uint32_t contributions(const std::byte* p, std::size_t bytes) {
    const wire::Header h = wire::read_header(p, bytes);  // throws when the header was lost
    return h.param;
  }

  std::unique_ptr<codec::Codec> real_;
  Rates rates_;
  std::size_t elem_;
};

// Payload copies of the header alone; poison marks as on host memory.
class HeaderPayloads final : public coll::PayloadOps {
 public:
  bool is_poisoned(const std::byte* p, std::size_t bytes, wire::Poison* who) override {
    return wire::is_poisoned(p, bytes, who);
  }
  void set_poisoned(std::byte* p, const wire::Poison& who) override { wire::set_poisoned(p, who); }
  std::size_t write_poisoned(std::byte* out, const wire::Poison& who) override {
    return wire::write_poisoned(out, who);
  }
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override {
    std::memcpy(dst, src, std::min(bytes, wire::kHeaderBytes));
  }
};

}  // namespace

coll::PayloadOps* payload_ops() {
  if (!model_on()) return nullptr;
  static HeaderPayloads ops;  // stateless: one for every simulated rank
  return &ops;
}

bool model_on() {
#if defined(CCOLL_SMPI)
  return rates() != nullptr;
#else
  return false;  // nothing to read on every call: make_codec (modelled) refuses the variable
#endif
}

bool modelled_scan(std::size_t count, std::size_t elem_bytes) {
  if (!model_on()) return false;
  charge_clock(count, elem_bytes, rates()->scan);
  return true;
}

std::unique_ptr<codec::Codec> modelled(std::unique_ptr<codec::Codec> c) {
  const Rates* r = rates();
  if (r == nullptr) return c;
  return std::make_unique<ModelledCodec>(std::move(c), *r);
}

void* alloc_elements(std::size_t bytes) {
#if defined(CCOLL_SMPI)
  if (model_on()) return smpi_shared_malloc(bytes, __FILE__, __LINE__);
#endif
  return std::malloc(bytes);
}

void free_elements(void* p) {
#if defined(CCOLL_SMPI)
  if (model_on()) {
    smpi_shared_free(p);
    return;
  }
#endif
  std::free(p);
}

}  // namespace ccoll::sim
