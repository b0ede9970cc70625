// Environment configuration (see config.hpp).
#include "config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "ccoll/error.hpp"
#include "spec.hpp"

namespace ccoll {
namespace {

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

EnvConfig read_env() {
  EnvConfig c;
  c.codec = getenv_str("CCOLL_CODEC");
  c.algorithm = getenv_str("CCOLL_ALGO");
  if (const std::string v = getenv_str("CCOLL_MIN_BYTES"); !v.empty()) {
    c.min_bytes = parse_byte_size(v, "CCOLL_MIN_BYTES");
  }
  if (const std::string v = getenv_str("CCOLL_SEGMENT_BYTES"); !v.empty()) {
    c.segment_bytes = parse_byte_size(v, "CCOLL_SEGMENT_BYTES");
    if (c.segment_bytes < 64 || c.segment_bytes > (1u << 30)) {
      throw Error(Status::kInvalidArgument,
                  "CCOLL_SEGMENT_BYTES: " + v + " is out of range (valid: 64 bytes to 1G)");
    }
  }
  if (const std::string v = getenv_str("CCOLL_STATE_MAX_BYTES"); !v.empty()) {
    c.state_max_bytes = parse_byte_size(v, "CCOLL_STATE_MAX_BYTES");
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    const std::size_t physical =
        pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                              : 0;
    c.state_max_bytes = std::max<std::size_t>(std::size_t{1} << 30, physical / 4);
  }
  // CCOLL_TRANSPORT: parsed against the transport table by the call's checks
  if (const std::string v = getenv_str("CCOLL_TRANSPORT"); !v.empty()) c.transport = v;
  if (const std::string v = getenv_str("CCOLL_NCCL_TIMEOUT"); !v.empty()) {
    char* end = nullptr;
    const double t = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(t >= 0) || !(t < 1e9)) {
      throw Error(Status::kInvalidArgument,
                  "CCOLL_NCCL_TIMEOUT: '" + v +
                      "' is not a number of seconds (valid: a number >= 0, e.g. 600; 0: no limit)");
    }
    c.nccl_timeout_s = t;
  }
#if defined(CCOLL_SMPI)
  // SimGrid's SMPI has no MPI_Win_sync: the node's steps go through MPI's collectives there
  c.node_window_bytes = 0;
#endif
  if (const std::string v = getenv_str("CCOLL_NODE_WINDOW"); !v.empty()) {
    c.node_window_bytes = parse_byte_size(v, "CCOLL_NODE_WINDOW");
    if (c.node_window_bytes != 0 &&
        (c.node_window_bytes < 4096 || c.node_window_bytes > (std::size_t{1} << 30))) {
      throw Error(Status::kInvalidArgument,
                  "CCOLL_NODE_WINDOW: " + v + " is out of range (valid: 0, or 4K to 1G)");
    }
#if defined(CCOLL_SMPI)
    if (c.node_window_bytes != 0) {
      throw Error(Status::kUnsupported, "CCOLL_NODE_WINDOW: " + v +
                                            ": SimGrid's SMPI has no MPI_Win_sync, which the "
                                            "node's shared window needs (valid there: 0)");
    }
#endif
  }
  if (const std::string v = getenv_str("CCOLL_AUTO_FLAT_MAX_RANKS"); !v.empty()) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 0 || n > INT_MAX) {
      throw Error(Status::kInvalidArgument,
                  "CCOLL_AUTO_FLAT_MAX_RANKS: '" + v +
                      "' is not a rank count (valid: an integer >= 0, e.g. 256; 0: never time "
                      "the flat schedule)");
    }
    c.auto_flat_max_ranks = static_cast<int>(n);
  }
  if (const std::string v = getenv_str("CCOLL_PROGRESS_NICE"); !v.empty()) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < -20 || n > 19) {
      throw Error(Status::kInvalidArgument,
                  "CCOLL_PROGRESS_NICE: '" + v +
                      "' is not a nice value (valid: an integer from -20 to 19; below the "
                      "process's own value it needs CAP_SYS_NICE or RLIMIT_NICE)");
    }
    c.progress_nice = static_cast<int>(n);
  }
  if (const std::string v = getenv_str("CCOLL_PROGRESS_SLICE_US"); !v.empty()) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    const bool off = v == "off" || (end != v.c_str() && *end == '\0' && n == 0);
    if (!off && (end == v.c_str() || *end != '\0' || n < 100 || n > 100000)) {
      throw Error(Status::kInvalidArgument,
                  "CCOLL_PROGRESS_SLICE_US: '" + v +
                      "' is not a slice (valid: microseconds from 100 to 100000, or 0 or off for "
                      "the kernel's default)");
    }
    c.progress_slice_us = off ? 0 : static_cast<std::uint32_t>(n);
  }
  c.log_level = parse_log_level(getenv_str("CCOLL_DEBUG"));
  return c;
}

PreloadConfig read_preload() {
  PreloadConfig c;
  auto bad = [](const std::string& what) { throw Error(Status::kInvalidArgument, what); };
  try {
    bool stateful = false;
    if (const std::string v = getenv_str("CCOLL_CODEC"); !v.empty()) {
      c.compress = true;
      c.codec = v;
      const CodecSpec spec = parse_codec_spec(c.codec);  // throws, naming the bad part
      stateful = spec.stateful;
      c.codec_allgather = spec.allgather_form();
      c.codec_reduce_scatter = spec.reduce_scatter_form();
      c.codec_double = spec.rotate == 0;
    }
    if (const std::string v = getenv_str("CCOLL_MIN_BYTES"); !v.empty()) {
      c.min_bytes = parse_byte_size(v, "CCOLL_MIN_BYTES");
    }
    if (const std::string v = getenv_str("CCOLL_EXCLUDE_COMM_SIZE"); !v.empty()) {
      std::stringstream in(v);
      for (std::string item; std::getline(in, item, ',');) {
        char* end = nullptr;
        const long n = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || n < 1) {
          bad("CCOLL_EXCLUDE_COMM_SIZE: '" + item +
              "' is not a communicator size (expected a comma-separated list, e.g. 1,2,8)");
        }
        c.excluded_sizes.insert(static_cast<int>(n));
      }
    }
    if (const std::string v = getenv_str("CCOLL_INTERCEPT"); !v.empty()) {
      c.allreduce = c.allgather = c.reduce_scatter = false;
      std::stringstream in(v);
      for (std::string item; std::getline(in, item, ',');) {
        if (item == "allreduce") {
          c.allreduce = true;
        } else if (item == "allgather") {
          c.allgather = true;
        } else if (item == "reduce_scatter") {
          c.reduce_scatter = true;
        } else {
          bad("CCOLL_INTERCEPT: unknown collective '" + item +
              "' (valid: allreduce, allgather, reduce_scatter, comma-separated)");
        }
      }
    }
    if (const std::string v = getenv_str("CCOLL_STATS"); !v.empty()) {
      if (v != "0" && v != "1") bad("CCOLL_STATS: '" + v + "' (valid: 0, 1)");
      c.stats = v == "1";
    }
    if (const std::string v = getenv_str("CCOLL_STATE_BY_BUFFER"); !v.empty()) {
      if (v != "0" && v != "1") bad("CCOLL_STATE_BY_BUFFER: '" + v + "' (valid: 0, 1)");
      c.state_by_buffer = v == "1";
    }
    // A stateful codec keeps state per tensor, which the preload library can only tell apart
    // by (receive buffer, count): refused unless the program says that identifies its tensors.
    if (stateful && !c.state_by_buffer) {
      bad("CCOLL_CODEC=" + c.codec +
          " keeps state per tensor (error feedback, temporal, dq), and the preload library can "
          "only tell tensors apart by their receive buffer and count: a program that fuses "
          "different tensors into one buffer (as Horovod does) would mix their state. Set "
          "CCOLL_STATE_BY_BUFFER=1 if every receive buffer of this program always holds the "
          "same tensor, or use a codec without state (valid: the codecs without ef=1, "
          "temporal and dq)");
    }
  } catch (const Error& e) {
    c.error = e.message();  // rethrown by every compressing call, as an Error again
  }
  return c;
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  std::string level = text;
  for (char& ch : level) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (level.empty() || level == "NONE") return LogLevel::kNone;
  if (level == "WARN") return LogLevel::kWarn;
  if (level == "INFO") return LogLevel::kInfo;
  if (level == "TRACE") return LogLevel::kTrace;
  throw Error(Status::kInvalidArgument, "CCOLL_DEBUG: unknown level '" + text +
                                            "' (valid: NONE, WARN, INFO, TRACE, in any case)");
}

bool env_cuda_enabled() { return getenv_str("CCOLL_CUDA") != "0"; }

int env_ranks_per_node(std::string* text) {
  const std::string v = getenv_str("CCOLL_RANKS_PER_NODE");
  if (text != nullptr) *text = v;
  if (v.empty()) return 0;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  return (*end == '\0' && n >= 1 && n <= 1 << 20) ? static_cast<int>(n) : -1;
}

int env_emulated_eager() {
  const std::string v = getenv_str("CCOLL_EMULATED_EAGER");
  return v == "compute" ? 0 : v == "copy" ? 1 : -1;
}

bool env_nccl_intercept(std::string& error) {
  const std::string v = getenv_str("CCOLL_NCCL_INTERCEPT");
  if (v == "0") return false;
  if (!v.empty() && v != "1") error = "CCOLL_NCCL_INTERCEPT: '" + v + "' (valid: 0, 1)";
  return true;
}

const PreloadConfig& preload_config() {
  static const PreloadConfig c = read_preload();
  return c;
}

std::uint64_t SharedSettings::fingerprint() const {
  // FNV-1a over the text (the error too): the same on every rank for the same settings
  // (std::hash need not be across processes built alike, but is; FNV is by definition)
  std::uint64_t h = 14695981039346656037ull;
  for (const char ch : text()) {
    h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  }
  return h;
}

std::string SharedSettings::text() const {
  std::string t;
  for (const auto& [name, value] : items) t += name + "=" + value + "\n";
  if (!error.empty()) t += "error=" + error + "\n";
  return t;
}

SharedSettings SharedSettings::parse(const std::string& text) {
  SharedSettings s;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string name = line.substr(0, eq);
    std::string value = line.substr(eq + 1);
    if (name == "error") {
      s.error = value;
    } else {
      s.items.emplace_back(std::move(name), std::move(value));
    }
  }
  return s;
}

std::string SharedSettings::describe() const {
  std::string d;
  for (const auto& [name, value] : items) d += (d.empty() ? "" : ", ") + name + "=" + value;
  if (!error.empty()) d += " (invalid: " + error + ")";
  return d;
}

SharedSettings preload_settings(const PreloadConfig& c) {
  SharedSettings s;
  std::string codec = "unset";
  if (c.compress) {
    codec = c.codec;
    try {
      codec = parse_codec_spec(c.codec).canonical;
    } catch (const Error&) {  // c.error says why
    }
  }
  std::string excluded;
  for (const int n : c.excluded_sizes)
    excluded += (excluded.empty() ? "" : ",") + std::to_string(n);
  std::string intercept;
  for (const auto& [on, name] : {std::pair<bool, const char*>{c.allreduce, "allreduce"},
                                 {c.allgather, "allgather"},
                                 {c.reduce_scatter, "reduce_scatter"}}) {
    if (on) intercept += (intercept.empty() ? "" : ",") + std::string(name);
  }
  s.items = {{"CCOLL_CODEC", codec},
             {"CCOLL_MIN_BYTES", std::to_string(c.min_bytes)},
             {"CCOLL_EXCLUDE_COMM_SIZE", excluded.empty() ? "unset" : excluded},
             {"CCOLL_INTERCEPT", intercept.empty() ? "none" : intercept},
             {"CCOLL_STATE_BY_BUFFER", c.state_by_buffer ? "1" : "0"},
             {"CCOLL_STATS", c.stats ? "1" : "0"}};
  s.error = c.error;
  return s;
}

std::string settings_disagreement(const std::vector<std::string>& texts) {
  std::vector<SharedSettings> all;
  all.reserve(texts.size());
  for (const std::string& t : texts) all.push_back(SharedSettings::parse(t));
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].error.empty()) {
      return "rank " + std::to_string(r) + "'s ccoll settings are invalid: " + all[r].error;
    }
  }
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r].text() == all[0].text()) continue;
    std::string diff;
    const std::size_t n = std::max(all[0].items.size(), all[r].items.size());
    for (std::size_t i = 0; i < n; ++i) {
      const auto item = [&](const SharedSettings& s) {
        return i < s.items.size() ? s.items[i] : std::pair<std::string, std::string>{"?", "?"};
      };
      const auto a = item(all[0]);
      const auto b = item(all[r]);
      if (a == b) continue;
      diff += (diff.empty() ? "" : "; ") + a.first + " is " + a.second + " on rank 0 and " +
              b.second + " on rank " + std::to_string(r);
    }
    return "the ranks' ccoll settings differ: " + diff +
           " (every rank of a communicator must run with the same settings)";
  }
  return "the ranks' ccoll settings differ";
}

const EnvConfig& env_config() {
  static std::once_flag once;
  static EnvConfig config;
  static std::string error;
  std::call_once(once, [] {
    try {
      config = read_env();
    } catch (const Error& e) {
      error = e.message();
    }
  });
  if (!error.empty()) throw Error(Status::kInvalidArgument, error);
  return config;
}

bool log_enabled(LogLevel level) {
  LogLevel enabled = LogLevel::kNone;
  try {
    enabled = env_config().log_level;
  } catch (const Error&) {
    enabled = LogLevel::kWarn;
  }
  return level != LogLevel::kNone && static_cast<int>(level) <= static_cast<int>(enabled);
}

void log(LogLevel level, int rank, const std::string& message) {
  if (!log_enabled(level)) return;
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  std::fprintf(stderr, "ccoll %s [rank %d] %s\n", names[static_cast<int>(level)], rank,
               message.c_str());
}

}  // namespace ccoll
