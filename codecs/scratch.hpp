// Scratch of a host codec's passes, kept per thread rather than per codec instance.
//
// A communicator holds a codec for each of up to thousands of stateful tensors (ef=1, temporal,
// dq), and each must hold only its state, which CCOLL_STATE_MAX_BYTES counts: batches of draws,
// histograms and per-call arrays live here instead, one set per thread (a codec's calls run on
// one thread at a time; the progress thread and the hierarchical helper have their own).
// `Tag` (a type declared at namespace scope in the codec's file) names the use, so that two
// buffers a pass holds at once never share storage; a pointer into one is valid until the same
// thread's next use of that tag. Take the buffer once per pass, not per element: each call is
// a thread-local access.
#pragma once

#include <cstddef>
#include <vector>

#include "rank_local.hpp"

namespace ccoll::codec {

template <class Tag, class T>
std::vector<T>& thread_scratch(std::size_t at_least = 0) {
  static CCOLL_RANK_LOCAL std::vector<T> v;
  if (v.size() < at_least) v.resize(at_least);
  return v;
}

}  // namespace ccoll::codec
