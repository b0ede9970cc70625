// Command-line parsing shared by the benchmark tools (the accuracy tools ccoll_error_vs_ranks,
// ccoll_ef_average, ccoll_temporal_rate: a bad argument prints "TOOL: ..." and exits with
// status 2; the OSU-style drivers: byte sizes).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ccoll::tools {

/// The value of option argv[i], which is argv[i + 1] (i advances past it).
inline std::string option_value(const char* tool, int argc, char** argv, int& i) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s: %s needs a value\n", tool, argv[i]);
    std::exit(2);
  }
  return argv[++i];
}

/// Comma-separated integers in [lo, hi] (and strictly increasing when `increasing`).
inline std::vector<int> int_list(const char* tool, const char* what, const std::string& text,
                                 int lo, int hi, bool increasing) {
  std::vector<int> v;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const int k = std::atoi(item.c_str());
    if (k < lo || k > hi || (increasing && !v.empty() && k <= v.back())) {
      std::fprintf(stderr, "%s: %s: '%s' is not %s%d..%d\n", tool, what, item.c_str(),
                   increasing ? "increasing in " : "", lo, hi);
      std::exit(2);
    }
    v.push_back(k);
  }
  return v;
}

/// A byte count such as "4096", "64K", "16M" or "1G" (suffixes in either case: KiB, MiB, GiB);
/// nothing when `text` is not one.
inline std::optional<std::size_t> byte_size(const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  const std::string suffix(end);
  if (suffix.empty()) return v;
  if (suffix == "K" || suffix == "k") return v << 10;
  if (suffix == "M" || suffix == "m") return v << 20;
  if (suffix == "G" || suffix == "g") return v << 30;
  return std::nullopt;
}

}  // namespace ccoll::tools
