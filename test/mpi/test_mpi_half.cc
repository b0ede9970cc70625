// Multi-process tests of 16-bit float buffers (part of ccoll_mpi_tests): ccoll::float16() and
// ccoll::bfloat16() through every call, exact sums rounded once to nearest even, means that do
// not overflow, lossy codecs within their bound, non-blocking calls, and errors on every rank.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_support.hpp"

namespace {

// Reference conversions, written independently of the library's: round to nearest even.
std::uint16_t to_half(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (a < std::ldexp(1.0, -14)) {                              // subnormal: multiples of 2^-24
    const double q = std::nearbyint(a * std::ldexp(1.0, 24));  // ties to even (default mode)
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(q));
  }
  int e = 0;
  const double m = std::frexp(a, &e);                  // a = m·2^e, m in [0.5, 1)
  const double q = std::nearbyint(std::ldexp(m, 11));  // 11 significant bits
  const double r = std::ldexp(q, e - 11);
  int e2 = 0;
  const double m2 = std::frexp(r, &e2);
  const auto exp = static_cast<std::uint32_t>(e2 - 1 + 15);
  const auto frac = static_cast<std::uint32_t>(std::ldexp(m2, 11)) & 0x3ffu;
  return static_cast<std::uint16_t>(sign | (exp << 10) | frac);
}
float from_half(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int frac = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(frac, -24) : std::ldexp(1024 + frac, exp - 25);
  if (exp == 31) v = frac != 0 ? NAN : INFINITY;
  return static_cast<float>((h & 0x8000) != 0 ? -v : v);
}
std::uint16_t to_bf16(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}
float from_bf16(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &x, 4);
  return f;
}

struct Type {
  const char* name;
  MPI_Datatype (*handle)();
  std::uint16_t (*to)(float);
  float (*from)(std::uint16_t);
};
const Type kTypes[] = {{"float16", ccoll::float16, to_half, from_half},
                       {"bfloat16", ccoll::bfloat16, to_bf16, from_bf16}};

// Integer-valued inputs (exact in both types, and so are their sums in fp32); some sums
// need rounding in the 16-bit type (fp16 from 2048 on, bf16 from 256 on).
float value(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 37 + static_cast<std::size_t>(rank) * 11) % 241) -
                            120) *
         (i % 3 == 0 ? 8.0f : 1.0f);
}

// Exact sums (codec none) of all three calls, in place and not, rounded once to nearest even:
// equal to the reference conversion of the exact fp32 sum (or mean).
TEST(MpiHalf, ExactSumsRoundedOnceForEveryCall) {
  const int p = world_size();
  const int r = world_rank();
  for (const Type& type : kTypes) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001},
                                std::size_t{(1u << 17) + 3}}) {
      for (int kind = 0; kind < 3; ++kind) {
        for (const bool in_place : {false, true}) {
          for (const bool average : {false, true}) {
            if (kind == 1 && average) continue;
            SCOPED_TRACE(std::string(type.name) + " kind " + std::to_string(kind) + " n " +
                         std::to_string(n) + (in_place ? " in place" : "") +
                         (average ? " average" : ""));
            const std::size_t total = n * static_cast<std::size_t>(p);
            const std::size_t in_n = kind == 2 ? total : n;
            const std::size_t out_n = kind == 1 ? total : n;
            std::vector<std::uint16_t> in(in_n), out(kind == 0 ? n : total, 0xffff);
            for (std::size_t i = 0; i < in_n; ++i) in[i] = type.to(value(r, i));
            if (in_place) {
              if (kind == 1) {
                std::copy(in.begin(), in.end(), out.begin() + static_cast<long>(n) * r);
              } else {
                out = in;
              }
            }
            ccoll::Options opt;
            opt.codec = "none";
            opt.average = average;
            ccoll::Stats st;
            opt.stats = &st;
            const void* send = in_place ? MPI_IN_PLACE : in.data();
            if (kind == 0) {
              ccoll::compressed_allreduce(send, out.data(), n, type.handle(), MPI_SUM,
                                          MPI_COMM_WORLD, opt);
            } else if (kind == 1) {
              ccoll::compressed_allgather(send, n, out.data(), type.handle(), MPI_COMM_WORLD, opt);
            } else {
              ccoll::compressed_reduce_scatter(send, out.data(), n, type.handle(), MPI_SUM,
                                               MPI_COMM_WORLD, opt);
            }
            EXPECT_EQ(st.input_bytes, 2 * in_n);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < out_n; ++i) {
              float want = 0;
              if (kind == 1) {
                want = value(static_cast<int>(i / n), i % n);
              } else {
                const std::size_t g = kind == 2 ? static_cast<std::size_t>(r) * n + i : i;
                for (int k = 0; k < p; ++k) want += value(k, g);
                if (average) want /= static_cast<float>(p);
              }
              wrong += out[i] != type.to(want);
            }
            EXPECT_EQ(wrong, 0u);
          }
        }
      }
    }
  }
}

// The mean of fp16 32768s is 32768, although their sum overflows fp16; the sum itself is +inf,
// as the type's rounding makes it.
TEST(MpiHalf, MeansDoNotOverflow) {
  const int p = world_size();
  for (const char* codec : {"none", "maxnorm:bits=8", "fp16"}) {
    SCOPED_TRACE(codec);
    std::vector<std::uint16_t> x(5000, to_half(32768.0f));
    ccoll::Options opt;
    opt.codec = codec;
    opt.average = true;
    ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), x.size(), ccoll::float16(), MPI_SUM,
                                MPI_COMM_WORLD, opt);
    EXPECT_EQ(first_failing(x.size(),
                            [&](std::size_t i) {
                              return std::fabs(from_half(x[i]) - 32768.0f) <= 32768.0f / 100;
                            }),
              x.size());
  }
  if (p >= 2) {
    std::vector<std::uint16_t> x(7, to_half(32768.0f));
    ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), x.size(), ccoll::float16(), MPI_SUM,
                                MPI_COMM_WORLD);
    EXPECT_EQ(first_failing(x.size(), [&](std::size_t i) { return std::isinf(from_half(x[i])); }),
              x.size());
  }
}

// The fp16 codec on fp32 input: a mean whose sum leaves fp16's range is prescaled (each
// contribution divided first) rather than sent to MPI; the sum itself still falls back.
TEST(MpiHalf, Fp16CodecPrescalesMeans) {
  const int p = world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks (one rank is never encoded)";
  const int r = world_rank();
  const std::size_t n = 10007;
  for (const bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "in place" : "separate buffers");
    std::vector<float> x(n), out(n);
    std::vector<double> mean(n, 0.0);
    double sum_max = 0;
    for (int k = 0; k < p; ++k) {
      double m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float v = 40000.0f + static_cast<float>((i * 13 + static_cast<std::size_t>(k)) % 999);
        mean[i] += v / p;
        m = std::max(m, static_cast<double>(v));
        if (k == r) x[i] = v;
      }
      sum_max += m;
    }
    ccoll::Options opt;
    opt.codec = "fp16";
    opt.average = true;
    ccoll::Stats st;
    opt.stats = &st;
    if (in_place) out = x;
    ccoll::compressed_allreduce(in_place ? MPI_IN_PLACE : x.data(), out.data(), n, MPI_FLOAT,
                                MPI_SUM, MPI_COMM_WORLD, opt);
    EXPECT_FALSE(st.fell_back);
    EXPECT_NE(st.algorithm, "mpi");
    const double bound = ccoll::describe_codec("fp16", p).error_bound * sum_max / p;
    EXPECT_EQ(first_failing(n, [&](std::size_t i) { return std::fabs(out[i] - mean[i]) <= bound; }),
              n);
    EXPECT_TRUE(identical_on_all_ranks(out.data(), 4 * n, MPI_COMM_WORLD));
    opt.average = false;  // the sum leaves fp16's range: MPI on every rank
    ccoll::compressed_allreduce(x.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, opt);
    EXPECT_TRUE(st.fell_back);
  }
}

// Lossy codecs on 16-bit buffers: within the codec's bound plus one rounding of the output.
TEST(MpiHalf, LossyCodecsWithinTheirBound) {
  const int p = world_size();
  const int r = world_rank();
  const std::size_t n = 20001;
  for (const Type& type : kTypes) {
    for (const char* codec : {"maxnorm:bits=8", "maxnorm:bits=4", "qsgd:bits=4", "topk:ratio=0.5",
                              "maxnorm:bits=4,ef=1"}) {
      SCOPED_TRACE(std::string(type.name) + " " + codec);
      std::vector<std::uint16_t> x(n);
      std::vector<double> exact(n, 0.0);
      double sum_max = 0;
      for (int k = 0; k < p; ++k) {
        double m = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float v = type.from(type.to(std::sin(0.01f * static_cast<float>(i) + k)));
          exact[i] += v;
          m = std::max(m, std::fabs(static_cast<double>(v)));
          if (k == r) x[i] = type.to(v);
        }
        sum_max += m;
      }
      ccoll::Options opt;
      opt.codec = codec;
      ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), n, type.handle(), MPI_SUM, MPI_COMM_WORLD,
                                  opt);
      const double bound = ccoll::describe_codec(codec, p).error_bound * sum_max;
      const double unit =
          std::string(type.name) == "float16" ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double out = type.from(x[i]);
        worst = std::max(worst, std::fabs(out - exact[i]) - unit * std::fabs(out));
      }
      if (!ccoll::describe_codec(codec, p).stateful) {
        EXPECT_LE(worst, bound + 1e-6);
      }
      EXPECT_TRUE(identical_on_all_ranks(x.data(), 2 * n, MPI_COMM_WORLD));
    }
  }
}

// An all-reduce on 16-bit host buffers gives the bytes of the same fp32 call on the widened
// input, rounded once: where the codec reads the 16-bit input itself on the ring (maxnorm, every
// ef=1 codec) and where the call widens it first (the other codecs and schedules), for counts
// from 1 to two scale blocks, in place and not, call after call (ef=1 state), and with a NaN
// on one rank (the whole call goes to MPI on every rank).
TEST(MpiHalf, AllreduceEqualsTheFp32CallOnWidenedInput) {
  const int p = world_size();
  const int r = world_rank();
  MPI_Comm a = MPI_COMM_NULL;
  MPI_Comm b = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  MPI_Comm_dup(MPI_COMM_WORLD, &b);
  const std::size_t fewer = p > 1 ? static_cast<std::size_t>(p - 1) : 1;
  for (const Type& type : kTypes) {
    for (const char* codec :
         {"maxnorm:bits=8", "maxnorm:bits=4", "maxnorm:bits=2,round=nearest", "maxnorm:bits=8,ef=1",
          "maxnorm:bits=3,ef=1", "maxnorm:bits=4/7", "randk:ratio=0.3", "qsgd:bits=4",
          "qsgd:bits=4,ef=1", "none", "maxnorm:bits=4,rotate=hadamard",
          "maxnorm:bits=2,ef=1,rotate=hadamard"}) {
      for (const std::size_t n : {std::size_t{1}, fewer, std::size_t{1001}, std::size_t{70001}}) {
        for (const bool in_place : {false, true}) {
          for (const bool nan : {false, true}) {
            SCOPED_TRACE(std::string(type.name) + " " + codec + " n=" + std::to_string(n) +
                         (in_place ? " in place" : "") + (nan ? " NaN" : ""));
            ccoll::Options opt;
            opt.codec = codec;
            opt.seed = 9;
            opt.key = 77;
            for (int t = 0; t < 2; ++t) {
              std::vector<std::uint16_t> x(n);
              std::vector<float> wide(n);
              for (std::size_t i = 0; i < n; ++i) {
                x[i] = type.to(std::sin(0.37f * static_cast<float>(i) + static_cast<float>(r + t)) *
                               (i % 97 == 0 ? 20.0f : 1.0f));
                wide[i] = type.from(x[i]);
              }
              if (nan && r == 0 && n > 1) {
                x[n / 2] = 0x7fc0u;  // a NaN in both types
                wide[n / 2] = type.from(x[n / 2]);
              }
              std::vector<std::uint16_t> got(n);
              ccoll::Stats st;
              opt.stats = &st;
              if (in_place) {
                got = x;
                ccoll::compressed_allreduce(MPI_IN_PLACE, got.data(), n, type.handle(), MPI_SUM, a,
                                            opt);
              } else {
                ccoll::compressed_allreduce(x.data(), got.data(), n, type.handle(), MPI_SUM, a,
                                            opt);
              }
              EXPECT_EQ(st.input_bytes, 2 * n);
              std::vector<float> want(n);
              ccoll::Stats ws;
              opt.stats = &ws;
              ccoll::compressed_allreduce(wide.data(), want.data(), n, MPI_FLOAT, MPI_SUM, b, opt);
              EXPECT_EQ(st.fell_back, ws.fell_back);
              EXPECT_EQ(st.algorithm, ws.algorithm);
              if (nan && n > 1 && p > 1) {
                EXPECT_EQ(st.fell_back, std::string(codec) != "none");
              }
              std::size_t differ = 0;
              for (std::size_t i = 0; i < n; ++i) {
                if (std::isnan(want[i])) {
                  differ += std::isnan(type.from(got[i])) ? 0 : 1;
                } else {
                  differ += got[i] == type.to(want[i]) ? 0 : 1;
                }
              }
              EXPECT_EQ(differ, 0u) << "call " << t;
              for (std::size_t i = 0; i < n && differ > 0; ++i) {
                if (!std::isnan(want[i]) && got[i] != type.to(want[i])) {
                  ADD_FAILURE() << i << ": " << got[i] << " vs " << type.to(want[i]) << " "
                                << want[i];
                  break;
                }
              }
            }
          }
        }
      }
    }
  }
  MPI_Comm_free(&a);
  MPI_Comm_free(&b);
}

// Non-blocking calls on 16-bit buffers: the blocking call's bytes.
TEST(MpiHalf, NonblockingEqualsBlocking) {
  const int r = world_rank();
  MPI_Comm a = MPI_COMM_NULL;
  MPI_Comm b = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  MPI_Comm_dup(MPI_COMM_WORLD, &b);
  std::vector<std::uint16_t> x(30001), y;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = to_bf16(std::cos(0.003f * i + r));
  y = x;
  ccoll::Options opt;
  opt.codec = "maxnorm:bits=4";
  ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), x.size(), ccoll::bfloat16(), MPI_SUM, a, opt);
  ccoll::compressed_iallreduce(MPI_IN_PLACE, y.data(), y.size(), ccoll::bfloat16(), MPI_SUM, b, opt)
      .wait();
  EXPECT_TRUE(x == y);
  MPI_Comm_free(&a);
  MPI_Comm_free(&b);
}

TEST(MpiHalf, ErrorsRaiseOnEveryRank) {
  const int p = world_size();
  std::vector<std::uint16_t> x(100 * static_cast<std::size_t>(p), 0);
  std::string msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, x.data(), 100, ccoll::float16(), MPI_MAX,
                                    MPI_COMM_WORLD);
      },
      ccoll::Status::kUnsupported);
  EXPECT_NE(msg.find("op: MPI_MAX is not supported"), std::string::npos) << msg;
  if (p >= 2) {
    msg = expect_error_everywhere(
        [&] {
          ccoll::compressed_reduce_scatter(MPI_IN_PLACE, x.data(), 100,
                                           world_rank() == 0 ? ccoll::bfloat16() : ccoll::float16(),
                                           MPI_SUM, MPI_COMM_WORLD);
        },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(msg.find("datatype differs across ranks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ccoll::bfloat16()"), std::string::npos) << msg;
    // codec=auto's first call at a large size runs its codec candidate, which agrees the
    // caller's 16-bit type too
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    std::vector<std::uint16_t> big(1 << 20, 0x3c00);
    ccoll::Options opt;
    opt.codec = "auto";
    msg = expect_error_everywhere(
        [&] {
          ccoll::compressed_allreduce(MPI_IN_PLACE, big.data(), big.size(),
                                      world_rank() == 0 ? ccoll::bfloat16() : ccoll::float16(),
                                      MPI_SUM, c, opt);
        },
        ccoll::Status::kInvalidArgument);
    EXPECT_NE(msg.find("datatype differs across ranks"), std::string::npos) << msg;
    MPI_Comm_free(&c);
  }
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(x.data() + 10, x.data(), 50, ccoll::float16(), MPI_SUM,
                                    MPI_COMM_WORLD);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("sendbuf: overlaps recvbuf"), std::string::npos) << msg;
  msg = expect_error_everywhere(
      [&] {
        ccoll::compressed_allreduce(MPI_IN_PLACE, world_rank() == 0 ? nullptr : x.data(), 50,
                                    ccoll::float16(), MPI_SUM, MPI_COMM_WORLD);
      },
      ccoll::Status::kInvalidArgument);
  EXPECT_NE(msg.find("recvbuf"), std::string::npos) << msg;
  // the same handle every time, and MPI knows it as a 2-byte type
  EXPECT_EQ(ccoll::float16(), ccoll::float16());
  int size = 0;
  MPI_Type_size(ccoll::bfloat16(), &size);
  EXPECT_EQ(size, 2);
}

}  // namespace
