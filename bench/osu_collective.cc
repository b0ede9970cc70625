// OSU-style latency driver for ccoll's all-reduce (built with CCOLL_BENCH_ALLGATHER, its
// all-gather; with CCOLL_BENCH_REDUCE_SCATTER, its reduce-scatter), with plain MPI measured in the
// same run as the baseline. Built with
// CCOLL_BENCH_GLOO it is the peer driver ccoll_gloo_allreduce: the same options, timing,
// validation and output, with Gloo's all-reduce algorithms over its TCP transport in place of
// ccoll's codecs (--codec ring,ring_chunked,halving_doubling); MPI only launches the ranks,
// shares the rendezvous directory, and computes the reference.
//
// Options follow OSU Micro-Benchmarks: -m [MIN:]MAX sizes in bytes (doubling), -i iterations,
// -x warm-up iterations, -f full statistics, -c validation, -h help. ccoll adds --codec SPEC
// (repeatable, or a comma list of plain names), --baseline mpi and --algorithm.
// Timing: each iteration is preceded by a barrier and covers only the collective call; each rank
// averages its iterations; rank 0 prints min/avg/max of those averages across ranks.
// Columns: speedup = MPI time / this row's time; ratio = bytes ccoll's "none" codec puts on the
// wire with the same schedule / bytes this codec puts there, plus the bytes it passes to its
// own small all-reduces (agreement, scales, two-scale's mask) (summed over ranks, measured);
// max relative error = max|result - exact| / max|exact|; busbw from uncompressed bytes
// (nccl-tests: all-reduce algbw·2(p-1)/p, all-gather and reduce-scatter algbw·(p-1)/p).
// Sizes: all-reduce, the vector; all-gather, each rank's block; reduce-scatter, each rank's input
// (as OSU's osu_reduce_scatter: every rank receives size / ranks of it).
#include <getopt.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ccoll/ccoll.hpp"
#include "tool_args.hpp"

#ifdef CCOLL_BENCH_GLOO
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#endif

namespace {

#if defined(CCOLL_BENCH_GLOO)
constexpr bool kAllgather = false;
constexpr bool kReduceScatter = false;
constexpr bool kGloo = true;
constexpr const char* kTitle = "OSU Gloo Allreduce Latency Test";
constexpr const char* kProgram = "ccoll_gloo_allreduce";
#elif defined(CCOLL_BENCH_ALLGATHER)
constexpr bool kAllgather = true;
constexpr bool kReduceScatter = false;
constexpr bool kGloo = false;
constexpr const char* kTitle = "OSU MPI Allgather Latency Test";
constexpr const char* kProgram = "ccoll_osu_allgather";
#elif defined(CCOLL_BENCH_REDUCE_SCATTER)
constexpr bool kAllgather = false;
constexpr bool kReduceScatter = true;
constexpr bool kGloo = false;
constexpr const char* kTitle = "OSU MPI Reduce_scatter Latency Test";
constexpr const char* kProgram = "ccoll_osu_reduce_scatter";
#else
constexpr bool kAllgather = false;
constexpr bool kReduceScatter = false;
constexpr bool kGloo = false;
constexpr const char* kTitle = "OSU MPI Allreduce Latency Test";
constexpr const char* kProgram = "ccoll_osu_allreduce";
#endif

struct Args {
  std::size_t min_bytes = 4;
  std::size_t max_bytes = 1 << 20;
  int iterations = -1;  // -1: OSU defaults by size
  int warmup = -1;
  bool full = false;
  bool validate = false;
  bool baseline_mpi = false;
  bool baseline_only = false;
  bool profile = false;
  bool reference = true;   // --no-error clears it
  bool time_only = false;  // --time-only (SMPI build)
  std::string iface;       // Gloo: the interface its TCP device binds to
  std::string algorithm = "auto";
  std::vector<std::string> codecs;
};

int rank_ = 0;
int size_ = 1;

void usage() {
  if (rank_ != 0) return;
  std::printf(
      "Usage: %s [options]\n"
      "  -m, --message-size [MIN:]MAX  sizes in bytes per rank, doubling (suffix K, M allowed;\n"
      "                                default 4:1M)\n"
      "  -i, --iterations N            timed iterations (default 1000 up to 8K, 100 above)\n"
      "  -x, --warmup N                warm-up iterations (default 100 up to 8K, 10 above)\n"
      "  -f, --full                    print min/max latency and iterations too\n"
      "  -c, --validation              check results against an exact reference; exit 1 when\n"
      "                                an error exceeds the codec's documented bound (stateful\n"
      "                                codecs, ef=1/temporal/dq: error reported, not judged)\n"
      "%s"
      "  --baseline mpi                also time plain MPI_%s as the baseline\n"
      "  --baseline-only               time only the baseline (e.g. once per Open MPI\n"
      "                                algorithm chosen with --mca coll_tuned_*)\n"
      "  --no-error                    no exact reference (its three vectors of doubles a rank)\n"
      "                                and '-' for the error: for runs too large to hold it\n"
      "  --time-only                   (SMPI build, with CCOLL_SIM_MODEL) buffers in shared\n"
      "                                memory, messages above 64 KiB carry their first 64 bytes:\n"
      "                                times only, for sizes no machine could hold; implies\n"
      "                                --no-error, and no Ratio ('-')\n"
      "  --profile                     after each ccoll row, a '# profile' line: per timed\n"
      "                                call, the mean over ranks of ms in encode, in transport\n"
      "                                waits, in decode, and the rest (agreement, copies, scales)\n"
      "  --thread-multiple             initialize MPI with MPI_THREAD_MULTIPLE (what lets\n"
      "                                ccoll's hierarchical all-reduce pipeline its levels)\n"
      "  -h, --help                    this help\n",
      kProgram,
      kGloo
          ? "  --codec ALG                   Gloo all-reduce: ring, ring_chunked, "
            "halving_doubling\n"
            "                                (repeatable or a comma list). Default: ring\n"
            "  --iface NAME                  interface of Gloo's TCP device (default:\n"
            "                                $CCOLL_CLUSTER_IFACE, else lo)\n"
          : "  --codec SPEC                  ccoll codec spec (repeatable; a comma list of plain\n"
            "                                names works too). Default: none\n"
            "  --algorithm auto|ring|tree|allgather|sra|halving|hierarchical\n"
            "                                ccoll schedule (default auto)\n",
      kAllgather       ? "Allgather"
      : kReduceScatter ? "Reduce_scatter_block"
                       : "Allreduce");
}

[[noreturn]] void fail(const std::string& msg) {
  if (rank_ == 0) std::fprintf(stderr, "%s: %s\n", kProgram, msg.c_str());
  MPI_Finalize();
  std::exit(2);
}

std::size_t parse_size(const std::string& s) {
  const std::optional<std::size_t> bytes = ccoll::tools::byte_size(s);
  if (!bytes) fail("bad size '" + s + "'");
  return *bytes;
}

int parse_count(const char* text, const char* opt, int min) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > 100000000) {
    fail(std::string(opt) + ": '" + text + "' (valid: an integer, " + std::to_string(min) +
         " or more)");
  }
  return static_cast<int>(v);
}

// A rank's floats: a vector, or with --time-only SMPI's shared memory, where every rank's
// buffers are the same few pages (only times are measured).
class Floats {
 public:
  Floats(std::size_t n, bool shared) : n_(n) {
#if defined(CCOLL_SMPI)
    if (shared) {
      p_ = static_cast<float*>(SMPI_SHARED_MALLOC(n * sizeof(float)));
      shared_ = true;
      return;
    }
#else
    (void)shared;
#endif
    v_.resize(n);
    p_ = v_.data();
  }
  ~Floats() {
#if defined(CCOLL_SMPI)
    if (shared_) SMPI_SHARED_FREE(p_);
#endif
  }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  float* data() { return p_; }
  const float* data() const { return p_; }
  float operator[](std::size_t i) const { return p_[i]; }
  std::size_t size() const { return n_; }
  float* begin() { return p_; }
  float* end() { return p_ + n_; }
  const float* begin() const { return p_; }
  const float* end() const { return p_ + n_; }

 private:
  std::size_t n_;
  float* p_ = nullptr;
  bool shared_ = false;
  std::vector<float> v_;
};

#if defined(CCOLL_SMPI)
// --time-only's copy of a message's data: above 64 KiB only its first 16 KiB (ccoll's wire
// headers: a payload's, or those of the up to 680 payloads that a halving step packs, which
// lead its message; the modelled codecs read nothing else), so that receive buffers stay
// untouched pages
void copy_heads(smx_activity_t comm, void* buff, std::size_t bytes) {
  smpi_comm_copy_buffer_callback(reinterpret_cast<simgrid::kernel::activity::CommImpl*>(comm), buff,
                                 bytes > 65536 ? 16384 : bytes);
}
#endif

void check_time_only() {
#if defined(CCOLL_SMPI)
  const char* model = std::getenv("CCOLL_SIM_MODEL");
  if (model == nullptr || *model == '\0') {
    fail(
        "--time-only needs CCOLL_SIM_MODEL (the codecs' modelled rates, e.g. "
        "encode=585,decode=1014,add=720,scan=1291): real codecs would read garbage");
  }
  if (kGloo) fail("--time-only: only the ccoll and MPI rows can be modelled");
  smpi_comm_set_copy_data_callback(&copy_heads);
#else
  fail("--time-only: only the SimGrid SMPI build (bench/sim/build.sh) has shared memory");
#endif
}

// Splits "none,fp16,qsgd:bits=4,bucket=512" into specs: a piece with '=' continues the previous.
void add_codecs(std::vector<std::string>& out, const std::string& list) {
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = list.find(',', pos);
    const std::string piece = list.substr(pos, comma == std::string::npos ? comma : comma - pos);
    if (!out.empty() && piece.find('=') != std::string::npos &&
        piece.find(':') == std::string::npos) {
      out.back() += "," + piece;
    } else if (!piece.empty()) {
      out.push_back(piece);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
}

Args parse(int argc, char** argv) {
  Args a;
  enum {
    kCodec = 1000,
    kBaseline,
    kAlgorithm,
    kBaselineOnly,
    kIface,
    kProfile,
    kThreads,
    kNoError,
    kTimeOnly
  };
  const option longopts[] = {{"message-size", required_argument, nullptr, 'm'},
                             {"iterations", required_argument, nullptr, 'i'},
                             {"warmup", required_argument, nullptr, 'x'},
                             {"full", no_argument, nullptr, 'f'},
                             {"validation", no_argument, nullptr, 'c'},
                             {"help", no_argument, nullptr, 'h'},
                             {"codec", required_argument, nullptr, kCodec},
                             {"baseline", required_argument, nullptr, kBaseline},
                             {"algorithm", required_argument, nullptr, kAlgorithm},
                             {"baseline-only", no_argument, nullptr, kBaselineOnly},
                             {"iface", required_argument, nullptr, kIface},
                             {"profile", no_argument, nullptr, kProfile},
                             {"thread-multiple", no_argument, nullptr, kThreads},
                             {"no-error", no_argument, nullptr, kNoError},
                             {"time-only", no_argument, nullptr, kTimeOnly},
                             {nullptr, 0, nullptr, 0}};
  opterr = rank_ == 0 ? 1 : 0;
  int c;
  while ((c = getopt_long(argc, argv, "m:i:x:fch", longopts, nullptr)) != -1) {
    switch (c) {
      case 'm': {
        const std::string s = optarg;
        const std::size_t colon = s.find(':');
        if (colon == std::string::npos) {
          a.max_bytes = parse_size(s);
        } else {
          a.min_bytes = parse_size(s.substr(0, colon));
          a.max_bytes = parse_size(s.substr(colon + 1));
        }
        break;
      }
      case 'i':
        a.iterations = parse_count(optarg, "-i", 1);
        break;
      case 'x':
        a.warmup = parse_count(optarg, "-x", 0);
        break;
      case 'f':
        a.full = true;
        break;
      case 'c':
        a.validate = true;
        break;
      case 'h':
        usage();
        MPI_Finalize();
        std::exit(0);
      case kCodec:
        add_codecs(a.codecs, optarg);
        break;
      case kBaseline:
        if (std::string(optarg) != "mpi")
          fail("--baseline: '" + std::string(optarg) + "' (valid: mpi)");
        a.baseline_mpi = true;
        break;
      case kAlgorithm:
        a.algorithm = optarg;
        break;
      case kBaselineOnly:
        a.baseline_only = true;
        break;
      case kIface:
        a.iface = optarg;
        break;
      case kProfile:
        a.profile = true;
        break;
      case kThreads:  // main() initialized MPI with it
        break;
      case kNoError:
        a.reference = false;
        break;
      case kTimeOnly:
        a.time_only = true;
        a.reference = false;
        break;
      default:
        usage();
        fail("unknown option");
    }
  }
  if (a.min_bytes == 0) a.min_bytes = 4;
  if (a.min_bytes > a.max_bytes) fail("-m: MIN is larger than MAX");
  if (a.baseline_only && !a.baseline_mpi) fail("--baseline-only needs --baseline mpi");
  if (a.baseline_only && !a.codecs.empty()) fail("--baseline-only takes no --codec");
  if (a.validate && !a.reference) {
    fail("-c needs the exact reference that --no-error and --time-only drop");
  }
  if (a.time_only) check_time_only();
  if (a.profile && kGloo) fail("--profile: Gloo reports no phases (valid only for ccoll drivers)");
  if (a.codecs.empty() && !a.baseline_only) a.codecs.push_back(kGloo ? "ring" : "none");
  if (a.iface.empty()) {
    const char* env = std::getenv("CCOLL_CLUSTER_IFACE");
    a.iface = env != nullptr && *env != '\0' ? env : "lo";
  }
  return a;
}

struct Timing {
  double min_us = 0, avg_us = 0, max_us = 0;
};

// Times `op` OSU-style and returns min/avg/max across ranks of each rank's average.
template <class Op>
Timing time_op(int iterations, int warmup, Op&& op) {
  for (int i = 0; i < warmup; ++i) op();
  double total = 0;
  for (int i = 0; i < iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    op();
    total += MPI_Wtime() - t0;
  }
  const double mine = total / iterations * 1e6;
  Timing t;
  MPI_Reduce(&mine, &t.min_us, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine, &t.max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine, &t.avg_us, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  t.avg_us /= size_;
  return t;
}

double busbw_gbps(std::size_t bytes, double us) {
  const double p = size_;
  if (kAllgather) return p * static_cast<double>(bytes) / (us * 1e3) * (p - 1) / p;
  if (kReduceScatter) return static_cast<double>(bytes) / (us * 1e3) * (p - 1) / p;
  return static_cast<double>(bytes) / (us * 1e3) * 2 * (p - 1) / p;
}

std::size_t wire_bytes(const std::string& codec, const std::string& algorithm, const Floats& send,
                       Floats& recv) {
  ccoll::Options opt;
  opt.codec = codec;
  opt.algorithm = algorithm;
  ccoll::Stats s;
  opt.stats = &s;
  if (kAllgather) {
    ccoll::compressed_allgather(send.data(), send.size(), recv.data(), MPI_FLOAT, MPI_COMM_WORLD,
                                opt);
  } else if (kReduceScatter) {
    ccoll::compressed_reduce_scatter(send.data(), recv.data(), recv.size(), MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD, opt);
  } else {
    ccoll::compressed_allreduce(send.data(), recv.data(), send.size(), MPI_FLOAT, MPI_SUM,
                                MPI_COMM_WORLD, opt);
  }
  // what the codec's own all-reduces carry counts too (agreement, scales, two-scale's mask)
  unsigned long long mine = s.wire_bytes_sent + s.control_bytes;
  unsigned long long all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return static_cast<std::size_t>(all);
}

}  // namespace

int main(int argc, char** argv) {
  bool threads = false;
  for (int i = 1; i < argc; ++i)
    threads = threads || std::strcmp(argv[i], "--thread-multiple") == 0;
  if (threads) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      std::fprintf(stderr, "--thread-multiple: MPI provides only thread level %d\n", provided);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  const Args args = parse(argc, argv);
  for (const auto& c : args.codecs) {
    if (kGloo) {
      if (c != "ring" && c != "ring_chunked" && c != "halving_doubling") {
        fail("--codec: '" + c +
             "' is not a Gloo all-reduce (valid: ring, ring_chunked, "
             "halving_doubling)");
      }
      continue;
    }
    try {
      ccoll::describe_codec(c, size_);
    } catch (const ccoll::Error& e) {
      fail(std::string("--codec: ") + e.what());
    }
  }
#ifdef CCOLL_BENCH_GLOO
  // Rendezvous through a directory every rank sees (namespaces share the file system), full
  // mesh of TCP pairs on the given interface.
  char store_dir[256] = "/tmp/ccoll-gloo-XXXXXX";
  if (rank_ == 0 && mkdtemp(store_dir) == nullptr) store_dir[0] = '\0';
  MPI_Bcast(store_dir, sizeof store_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (store_dir[0] == '\0') fail("cannot create a rendezvous directory under /tmp");
  std::shared_ptr<gloo::rendezvous::Context> gloo_ctx;
  try {
    gloo::transport::tcp::attr attr;
    attr.iface = args.iface;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    gloo_ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    gloo_ctx->connectFullMesh(store, device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: Gloo setup on interface '%s' failed: %s\n", kProgram, rank_,
                 args.iface.c_str(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) std::filesystem::remove_all(store_dir);
#endif

  if (rank_ == 0) {
#ifdef CCOLL_BENCH_GLOO
    std::printf("# %s (gloo %d.%d.%d TCP on %s: %d ranks, float, sum)\n", kTitle,
                GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, args.iface.c_str(),
                size_);
#else
    {
      std::printf("# %s (ccoll %s: %d ranks, MPI_FLOAT, %s)\n", kTitle, ccoll::version(), size_,
                  kAllgather       ? "bytes per rank"
                  : kReduceScatter ? "MPI_SUM, bytes of each rank's input"
                                   : "MPI_SUM");
    }
#endif
    if (args.time_only) {
      std::printf("# Time only: codecs modelled (CCOLL_SIM_MODEL=%s), no element computed\n",
                  std::getenv("CCOLL_SIM_MODEL"));
    }
    std::printf("# %-10s %-26s %15s", "Size", "Codec", "Avg Latency(us)");
    if (args.full)
      std::printf(" %15s %15s %10s", "Min Latency(us)", "Max Latency(us)", "Iterations");
    std::printf(" %14s %8s %13s %12s\n", "Speedup vs MPI", "Ratio", "Max Rel Err", "Busbw(GB/s)");
  }

  bool all_valid = true;
  std::mt19937 gen(1234u + static_cast<unsigned>(rank_));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
    // reduce-scatter: each rank's input of `count` elements, recvcount of them received
    const std::size_t recvcount =
        std::max<std::size_t>(1, bytes / sizeof(float) / static_cast<std::size_t>(size_));
    const std::size_t count = kReduceScatter ? recvcount * static_cast<std::size_t>(size_)
                                             : std::max<std::size_t>(1, bytes / sizeof(float));
    const bool small = bytes <= 8192;
    const int iters = args.iterations > 0 ? args.iterations : (small ? 1000 : 100);
    const int warm = args.warmup >= 0 ? args.warmup : (small ? 100 : 10);
    Floats send(count, args.time_only);
    if (!args.time_only) {
      for (auto& v : send) v = dist(gen);
    }
    const std::size_t out_count = kAllgather       ? count * static_cast<std::size_t>(size_)
                                  : kReduceScatter ? recvcount
                                                   : count;
    Floats recv(out_count, args.time_only);

    // exact reference (double) and Σ_i max|x_i| for the error bound
    std::vector<double> exact(args.reference ? out_count : 0);
    if (args.reference) {
      std::vector<double> mine(send.begin(), send.end());
      if (kAllgather) {
        MPI_Allgather(mine.data(), static_cast<int>(count), MPI_DOUBLE, exact.data(),
                      static_cast<int>(count), MPI_DOUBLE, MPI_COMM_WORLD);
      } else if (kReduceScatter) {
        MPI_Reduce_scatter_block(mine.data(), exact.data(), static_cast<int>(recvcount), MPI_DOUBLE,
                                 MPI_SUM, MPI_COMM_WORLD);
      } else {
        MPI_Allreduce(mine.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
      }
    }
    double local_max = 0;
    if (!args.time_only) {
      for (const float v : send) local_max = std::max(local_max, std::fabs(static_cast<double>(v)));
    }
    double sum_max = 0;
    MPI_Allreduce(&local_max, &sum_max, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double exact_max = 0;
    for (const double v : exact) exact_max = std::max(exact_max, std::fabs(v));
    auto max_err = [&]() {
      if (!args.reference) return std::nan("");
      double e = 0;
      for (std::size_t i = 0; i < out_count; ++i) {
        e = std::max(e, std::fabs(static_cast<double>(recv[i]) - exact[i]));
      }
      double worst = 0;
      MPI_Allreduce(&e, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return worst;
    };

    double mpi_us = 0;
    auto mpi_call = [&] {
      if (kAllgather) {
        MPI_Allgather(send.data(), static_cast<int>(count), MPI_FLOAT, recv.data(),
                      static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
      } else if (kReduceScatter) {
        MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(recvcount), MPI_FLOAT,
                                 MPI_SUM, MPI_COMM_WORLD);
      } else {
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      }
    };
    auto print_row = [&](const char* name, const Timing& t, const std::string& speedup,
                         const std::string& ratio, double rel_err) {
      if (rank_ != 0) return;
      std::printf("%-12zu %-26s %15.2f", count * sizeof(float), name, t.avg_us);
      if (args.full) std::printf(" %15.2f %15.2f %10d", t.min_us, t.max_us, iters);
      char err[32] = "-";
      if (!std::isnan(rel_err)) std::snprintf(err, sizeof err, "%.2e", rel_err);
      std::printf(" %14s %8s %13s %12.3f\n", speedup.c_str(), ratio.c_str(), err,
                  busbw_gbps(count * sizeof(float), t.avg_us));
    };
    // Prints a row and, with -c, judges its max error against `bound` plus the fp32 rounding of
    // the output; a negative bound: reported only.
    auto report = [&](const std::string& name, const Timing& t, const char* ratio, double err,
                      double bound) {
      char speedup[32] = "-";
      if (args.baseline_mpi) std::snprintf(speedup, sizeof speedup, "%.2f", mpi_us / t.avg_us);
      print_row(name.c_str(), t, speedup, ratio, err / (exact_max > 0 ? exact_max : 1));
      if (!args.validate || bound < 0) return;
      const double limit = bound + 1e-6 * (exact_max > 0 ? exact_max : 1);
      if (err > limit) {
        all_valid = false;
        if (rank_ == 0) {
          std::fprintf(stderr, "VALIDATION FAILED: %s at %zu bytes: max error %.3e > bound %.3e\n",
                       name.c_str(), count * sizeof(float), err, limit);
        }
      }
    };
    if (args.baseline_mpi) {
      const Timing t = time_op(iters, warm, mpi_call);
      mpi_us = t.avg_us;
      MPI_Bcast(&mpi_us, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      mpi_call();
      print_row("MPI", t, "1.00", "1.00", max_err() / (exact_max > 0 ? exact_max : 1));
    }
    // --time-only: no Ratio (two more calls a codec, as costly as the timed ones to simulate)
    const bool with_ratio = !kGloo && !args.codecs.empty() && !args.time_only;
    std::size_t none_wire = 0;
    try {
      if (with_ratio) none_wire = wire_bytes("none", args.algorithm, send, recv);
    } catch (const ccoll::Error& e) {
      // a schedule for codes that add only (halving) refuses none, on every rank: Ratio '-'
      if (e.code() != ccoll::Status::kUnsupported) throw;
    }
    for (const auto& codec : args.codecs) {
#ifdef CCOLL_BENCH_GLOO
      {
        // Gloo's algorithms reduce in place in buffers they register once: the timed call
        // copies the input in (as MPI does for a separate receive buffer) and runs.
        std::unique_ptr<gloo::Algorithm> algo;
        const std::vector<float*> ptrs{recv.data()};
        const int n = static_cast<int>(count);
        if (codec == "ring") {
          algo = std::make_unique<gloo::AllreduceRing<float>>(gloo_ctx, ptrs, n);
        } else if (codec == "ring_chunked") {
          algo = std::make_unique<gloo::AllreduceRingChunked<float>>(gloo_ctx, ptrs, n);
        } else {
          algo = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(gloo_ctx, ptrs, n);
        }
        auto call = [&] {
          std::copy(send.begin(), send.end(), recv.begin());
          algo->run();
        };
        const Timing t = time_op(iters, warm, call);
        call();
        report("gloo:" + codec, t, "1.00", max_err(),
               ccoll::describe_codec("none", size_).error_bound * sum_max);
        continue;
      }
#endif
      ccoll::Options opt;
      opt.codec = codec;
      opt.algorithm = args.algorithm;
      // --profile: phase times of the timed calls (the warm-up calls' first-call set-up and
      // algorithm=auto's tuning candidates are not the timed calls' phases)
      ccoll::Stats call_stats;
      double phase[4] = {0, 0, 0, 0};  // encode, comm, decode, total
      int profiled = 0;
      int calls = 0;
      if (args.profile) opt.stats = &call_stats;
      auto call = [&] {
        if (kAllgather) {
          ccoll::compressed_allgather(send.data(), count, recv.data(), MPI_FLOAT, MPI_COMM_WORLD,
                                      opt);
        } else if (kReduceScatter) {
          ccoll::compressed_reduce_scatter(send.data(), recv.data(), recvcount, MPI_FLOAT, MPI_SUM,
                                           MPI_COMM_WORLD, opt);
        } else {
          ccoll::compressed_allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD, opt);
        }
        if (args.profile && calls++ >= warm) {
          phase[0] += call_stats.encode_seconds;
          phase[1] += call_stats.comm_seconds;
          phase[2] += call_stats.decode_seconds;
          phase[3] += call_stats.total_seconds;
          ++profiled;
        }
      };
      const Timing t = time_op(iters, warm, call);
      opt.stats = nullptr;
      const std::size_t wire = with_ratio ? wire_bytes(codec, args.algorithm, send, recv) : 0;
      const double err = max_err();
      char ratio[32] = "-";
      if (wire > 0) {
        std::snprintf(ratio, sizeof ratio, "%.2f",
                      static_cast<double>(none_wire) / static_cast<double>(wire));
      }
      // stateful codecs (ef=1, temporal, dq) code x plus state: a single call has no bound
      // against x alone (reported only)
      double bound = -1;
      if (args.validate && !ccoll::describe_codec(codec, size_).stateful) {
        // all-gather: every element went through one encode; all-reduce: the documented bound,
        // which holds for a reduce-scatter too (it quantizes no more often)
        bound = ccoll::describe_codec(codec, size_).error_bound * sum_max;
        if (kAllgather) {
          double global_max = 0;
          MPI_Allreduce(&local_max, &global_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          bound = ccoll::describe_codec(codec, size_).unit_roundoff * global_max;
        }
      }
      report(codec, t, ratio, err, bound);
      if (args.profile) {
        double mean[4];
        for (double& v : phase) v = v / std::max(1, profiled) * 1e3 / size_;
        MPI_Reduce(phase, mean, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank_ == 0) {
          std::printf(
              "# profile %zu %s encode_ms %.3f comm_ms %.3f decode_ms %.3f other_ms %.3f "
              "total_ms %.3f\n",
              count * sizeof(float), codec.c_str(), mean[0], mean[1], mean[2],
              std::max(0.0, mean[3] - mean[0] - mean[1] - mean[2]), mean[3]);
        }
      }
      std::fflush(stdout);  // each row as it is measured (a long simulation's first rows too)
    }
    std::fflush(stdout);
  }
  if (args.validate && rank_ == 0) {
    std::printf("# Validation: %s\n", all_valid ? "Pass" : "FAIL");
  }
  MPI_Finalize();
  return all_valid ? 0 : 1;
}
