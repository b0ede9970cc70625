// Configuration from the environment (NCCL-style), read once per process.
//   CCOLL_CODEC          codec spec used when Options::codec is empty (default "none")
//   CCOLL_ALGO           algorithm used when Options::algorithm is "auto" (auto, ring, tree,
//                        allgather, sra, halving, hierarchical)
//   CCOLL_MIN_BYTES      per-rank inputs below this many bytes go to plain MPI (default 0)
//   CCOLL_SEGMENT_BYTES  largest ring pipelining segment, uncompressed bytes (default 192K)
//   CCOLL_DEBUG          WARN, INFO or TRACE: log to stderr
//   CCOLL_CUDA           0: never call CUDA (env_cuda_enabled)
//   CCOLL_TRANSPORT      how device buffers move: auto (default), staged (payloads through
//                        host memory) or mpi (payloads in device memory, moved by a CUDA-aware
//                        MPI) or nccl (moved by NCCL, every rank)
//   CCOLL_STATE_MAX_BYTES  bytes of per-tensor state (ef=1 residuals, temporal's predictions)
//                        kept per communicator before the least recently used tensor's is
//                        dropped with a warning (default a quarter of the physical memory, at
//                        least 1G)
//   CCOLL_NODE_WINDOW    bytes of shared-memory window per rank for the node's steps of
//                        algorithm=hierarchical (default 16M; 0: MPI collectives instead)
//   CCOLL_AUTO_FLAT_MAX_RANKS  algorithm=auto times the flat schedule against the hierarchical
//                        one on communicators of at most this many ranks (default 256); on
//                        larger ones of several nodes it takes the hierarchical one untimed
//   CCOLL_NCCL_TIMEOUT   seconds NCCL may take to create its communicator or to finish one
//                        step's transfers before every rank gives up on it (default 600; 0: no
//                        limit)
// and for the preload library (libccoll_mpi) only:
//   CCOLL_CODEC          (also) set: compress; unset: pass every call to MPI
//   CCOLL_MIN_BYTES      (also) default 1024 there, so that scalars stay exact
//   CCOLL_EXCLUDE_COMM_SIZE  comma-separated communicator sizes never compressed
//   CCOLL_INTERCEPT      which collectives: allreduce, allgather, reduce_scatter (comma-separated;
//                        default all three)
//   CCOLL_STATS          1: print per-communicator statistics at MPI_Finalize
//   CCOLL_STATE_BY_BUFFER  1: the program's receive buffers identify its tensors, so stateful
//                        codecs (ef=1, temporal, dq) may key their state by (buffer, count);
//                        without it they are refused
//
// This file and config.cc are the only place the library reads the environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ccoll {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

struct EnvConfig {
  std::string codec;
  std::string algorithm;
  std::size_t min_bytes = 0;
  std::size_t segment_bytes = 192 * 1024;
  LogLevel log_level = LogLevel::kNone;
  std::string transport = "auto";
  double nccl_timeout_s = 600;
  std::size_t node_window_bytes = std::size_t{16} << 20;  ///< CCOLL_NODE_WINDOW
  int auto_flat_max_ranks = 256;                          ///< CCOLL_AUTO_FLAT_MAX_RANKS
  std::size_t state_max_bytes = 0;  ///< CCOLL_STATE_MAX_BYTES (its default filled in)
  /// CCOLL_PROGRESS_NICE: the nice value of ccoll's progress threads; unset: inherited.
  std::optional<int> progress_nice;
  /// CCOLL_PROGRESS_SLICE_US: the progress threads' scheduler slice in microseconds; 0 (unset,
  /// off): the kernel's.
  std::uint32_t progress_slice_us = 0;
};

/// CCOLL_DEBUG's value (NONE, WARN, INFO or TRACE, in any case; empty: NONE); throws
/// ccoll::Error(kInvalidArgument) naming the valid levels otherwise.
LogLevel parse_log_level(const std::string& text);

/// The parsed environment; throws ccoll::Error(kInvalidArgument) naming the variable when a
/// value is malformed (and again on every later call, so no call runs with a half-read config).
const EnvConfig& env_config();

/// False when CCOLL_CUDA=0: the device backend never calls CUDA. Never throws.
bool env_cuda_enabled();

/// CCOLL_RANKS_PER_NODE: 0 when unset, K >= 1, or -1 when malformed (`text`, if given, then
/// holds the value). Never throws: the topology reports a bad value on every rank.
int env_ranks_per_node(std::string* text = nullptr);

/// CCOLL_EMULATED_EAGER (tests of the emulated device's ordering): the queue that runs work as
/// it is queued, 0 compute or 1 copy; -1 when unset or neither.
int env_emulated_eager();

/// What the preload library was asked to do, read once.
struct PreloadConfig {
  bool compress = false;  ///< CCOLL_CODEC set and non-empty
  std::string codec;
  std::size_t min_bytes = 1024;  ///< CCOLL_MIN_BYTES; the preload default keeps scalars exact
  std::set<int> excluded_sizes;  ///< CCOLL_EXCLUDE_COMM_SIZE
  bool allreduce = true;         ///< CCOLL_INTERCEPT
  bool allgather = true;
  bool reduce_scatter = true;    ///< MPI_Reduce_scatter_block, MPI_Reduce_scatter (equal counts)
  bool stats = false;            ///< CCOLL_STATS=1
  bool state_by_buffer = false;  ///< CCOLL_STATE_BY_BUFFER=1: stateful codecs allowed
  /// What the codec has a form for (from its spec); the other calls pass through: all-gathers
  /// and reduce-scatters (not for temporal and ef=21; rotate=hadamard: reduce-scatters only),
  /// double precision (not for rotate=hadamard, which rotates float32)
  bool codec_allgather = true;
  bool codec_reduce_scatter = true;
  bool codec_double = true;
  std::string error;  ///< a malformed variable: reported by every compressing call
};
const PreloadConfig& preload_config();

/// The settings every rank of a communicator must share for the preload library (and the NCCL
/// interposer) to take the same path on every rank: which calls are compressed, how, and what
/// runs at MPI_Finalize. Both libraries agree on them once per communicator, at its first
/// intercepted collective, whether or not a codec is set there: a rank whose settings differ
/// from another's, or are invalid, makes that call (and every later one on the communicator)
/// fail on every rank with a message that names the setting and two ranks' values, where it
/// would otherwise hang.
struct SharedSettings {
  /// (variable, value) in a fixed order; "unset" for a variable that is not set.
  std::vector<std::pair<std::string, std::string>> items;
  std::string error;  ///< non-empty when this rank's settings are invalid (the reason)
  /// 64 bits of the items and of whether they are valid, equal on ranks whose settings are.
  std::uint64_t fingerprint() const;
  /// One line per item, then the error: what the agreement gathers where ranks differ.
  std::string text() const;
  static SharedSettings parse(const std::string& text);
  /// "CCOLL_CODEC=maxnorm:bits=8, CCOLL_MIN_BYTES=1024, ..." (and the error, if any).
  std::string describe() const;
};

/// The preload configuration's shared settings (the codec canonical where it parses).
SharedSettings preload_settings(const PreloadConfig& c);

/// From every rank's SharedSettings::text() in rank order, where the fingerprints differed: the
/// failure, naming each setting rank 0 and the first rank that differs from it disagree on with
/// both values, or the first rank whose settings are invalid and why.
std::string settings_disagreement(const std::vector<std::string>& texts);

/// CCOLL_NCCL_INTERCEPT (the NCCL interposer's switch): false when "0"; true when unset or "1";
/// otherwise true with `error` naming the variable and its valid values.
bool env_nccl_intercept(std::string& error);

/// True when CCOLL_DEBUG enables `level` (a malformed CCOLL_DEBUG enables WARN).
bool log_enabled(LogLevel level);

/// Writes "ccoll <LEVEL> [rank r] message" to stderr when `level` is enabled.
void log(LogLevel level, int rank, const std::string& message);

}  // namespace ccoll
