// log2 of the powers of two that block sizes are (scale blocks, rotation blocks, tables), host
// and device.
#pragma once

#include <cstddef>

#include "half.hpp"  // CCOLL_HOST_DEVICE

namespace ccoll::codec {

/// The least k with 2^k >= m: log2 m for a power of two.
CCOLL_HOST_DEVICE inline unsigned ceil_log2(std::size_t m) {
  unsigned k = 0;
  while ((std::size_t{1} << k) < m) ++k;
  return k;
}

}  // namespace ccoll::codec
