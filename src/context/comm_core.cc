// The state every communicator keeps (comm_core.hpp).
#include "comm_core.hpp"

#include <algorithm>

namespace ccoll {

StreamStore& CommCore::stream_store(gpu::Backend& b, StreamStoreMaker make) {
  if (stream_ == nullptr || &stream_->backend() != &b) {
    stream_ = make(b);
    for (const auto& r : loaded_residuals_) stream_->load_residual(r);
    loaded_residuals_.clear();
  }
  return *stream_;
}

CommCore::Saved CommCore::save_core(std::uint64_t key) {
  Saved s;
  s.calls = calls_;
  if (stream_ != nullptr) s.residuals = stream_->save_residuals(key);
  for (const auto& [k, n] : tensor_calls_) {
    if (key == 0 || k == key) s.tensor_calls.emplace_back(k, n);
  }
  std::sort(s.tensor_calls.begin(), s.tensor_calls.end());
  return s;
}

void CommCore::load_core(Saved saved) {
  if (saved.calls != 0) calls_ = saved.calls;  // resumed calls draw what the others would
  for (const auto& [k, c] : saved.tensor_calls) tensor_calls_[k] = c;
  for (auto& r : saved.residuals) {
    if (stream_ != nullptr) {
      stream_->load_residual(r);
    } else {
      loaded_residuals_.push_back(std::move(r));
    }
  }
}

}  // namespace ccoll
