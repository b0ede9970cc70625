// The codec's set-up rounds (setup_rounds.hpp).
#include "setup_rounds.hpp"

#include <algorithm>
#include <string>

#include "ccoll/error.hpp"
#include "collectives.hpp"

namespace ccoll {
namespace {

// Every rank's `n` values over the transport, combined in rank order into v.
template <class T, class Op>
void exchange_all(coll::Transport& t, T* v, std::size_t n, Op op) {
  const int p = t.size();
  std::vector<std::vector<T>> all(static_cast<std::size_t>(p), std::vector<T>(v, v + n));
  std::vector<coll::Request> reqs;
  for (int q = 0; q < p; ++q) {
    if (q == t.rank()) continue;
    reqs.push_back(t.irecv(all[static_cast<std::size_t>(q)].data(), n * sizeof(T), q,
                           TransportExchange::kTag));
    reqs.push_back(t.isend(v, n * sizeof(T), q, TransportExchange::kTag));
  }
  for (auto& r : reqs) t.wait(r);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = all[0][i];
    for (std::size_t q = 1; q < all.size(); ++q) v[i] = op(v[i], all[q][i]);
  }
}

// The first input's local values into `acc`, then every other input's combined in with `op`
// (the contributions of several ranks held in one process; the library has one).
template <class T, class Local, class Op>
void combine_inputs(const SetupInputs& in, T* acc, std::size_t n, Local local, Op op) {
  std::vector<T> mine;
  for (std::size_t k = 0; k < in.ninputs; ++k) {
    if (k == 0) {
      local(in.inputs[0], acc);
      continue;
    }
    mine.resize(n);
    local(in.inputs[k], mine.data());
    for (std::size_t i = 0; i < n; ++i) acc[i] = op(acc[i], mine[i]);
  }
}

}  // namespace

void TransportExchange::sum(double* values, std::size_t n) {
  exchange_all(t_, values, n, [](double a, double b) { return a + b; });
}
void TransportExchange::max(double* values, std::size_t n) {
  exchange_all(t_, values, n, [](double a, double b) { return std::max(a, b); });
}
void TransportExchange::bitwise_and(std::uint8_t* bytes, std::size_t n) {
  exchange_all(t_, bytes, n, [](std::uint8_t a, std::uint8_t b) -> std::uint8_t { return a & b; });
}

std::size_t agree_sums(codec::Codec& c, const SetupInputs& in, double lr, SetupExchange& ex) {
  const std::size_t n = c.sum_slots();
  if (n == 0) return 0;
  constexpr std::size_t kMaxSums = 4;
  if (n > kMaxSums) throw Error(Status::kInternal, "codec asks for more than 4 summed values");
  double sums[kMaxSums] = {0, 0, 0, 0};
  combine_inputs(
      in, sums, n, [&](const void* x, double* out) { c.local_sums(x, in.count, out); },
      [](double a, double b) { return a + b; });
  ex.sum(sums, n);
  c.set_sums(sums, n, lr);
  return n * sizeof(double);
}

std::size_t agree_scales(codec::Codec& c, const SetupInputs& in, std::vector<double>& scales,
                         bool scanned, SetupExchange& ex) {
  const std::size_t n = c.scale_slots(in.count);
  if (n == 0) return 0;
  if (scales.size() < n) scales.resize(n);
  if (!scanned || in.ninputs != 1) {
    combine_inputs(
        in, scales.data(), n, [&](const void* x, double* out) { c.local_scales(x, in.count, out); },
        [](double a, double b) { return std::max(a, b); });
  }
  ex.max(scales.data(), n);
  c.set_scales(scales.data(), n);
  return n * sizeof(double);
}

std::size_t agree_mask(codec::Codec& c, const SetupInputs& in, std::vector<std::uint8_t>& mask,
                       SetupExchange& ex) {
  const std::size_t n = c.mask_bytes(in.count);
  if (n == 0) return 0;
  if (mask.size() < n) mask.resize(n);
  combine_inputs(
      in, mask.data(), n, [&](const void* x, std::uint8_t* out) { c.local_mask(x, in.count, out); },
      [](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>(a & b); });
  ex.bitwise_and(mask.data(), n);
  c.set_mask(mask.data(), n);
  return n;
}

std::size_t run_setup_rounds(codec::Codec& c, const SetupInputs& in, const SetupCall& call,
                             std::vector<double>& scales, std::vector<std::uint8_t>& mask,
                             SetupExchange& ex) {
  std::size_t bytes = agree_sums(c, in, call.lr, ex);
  c.set_call(call.seed, call.call);
  if (call.scales_agreed) {
    c.set_scales(scales.data(), c.scale_slots(in.count));
  } else {
    bytes += agree_scales(c, in, scales, call.scanned, ex);
  }
  bytes += agree_mask(c, in, mask, ex);
  return bytes;
}

}  // namespace ccoll
