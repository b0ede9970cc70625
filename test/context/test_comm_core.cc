// CommCore (src/context/comm_core.hpp), the state the library's MPI communicators and the NCCL
// interposer's communicators both keep: counters, the stream-ordered state made on first use,
// and the save and load of both, residuals loaded before the state exists included; and the
// registry both keep them in (comm_registry.hpp).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "comm_core.hpp"
#include "comm_registry.hpp"

namespace ccoll {
namespace {

// A stream-ordered state that keeps its residuals in host memory.
class HostStore final : public StreamStore {
 public:
  explicit HostStore(gpu::Backend& b) : b_(b) {}
  gpu::Backend& backend() override { return b_; }
  void reset(std::uint64_t key) override {
    for (auto& [k, r] : residuals) {
      if (key == 0 || k == key) r.values.assign(r.count, 0.0f);
    }
  }
  std::vector<SavedResidual> save_residuals(std::uint64_t key) override {
    std::vector<SavedResidual> out;
    for (const auto& [k, r] : residuals) {
      if (key == 0 || k == key) out.push_back(r);
    }
    return out;
  }
  void load_residual(const SavedResidual& r) override { residuals[r.key] = r; }
  std::map<std::uint64_t, SavedResidual> residuals;

 private:
  gpu::Backend& b_;
};

int g_made = 0;
std::unique_ptr<StreamStore> make_host_store(gpu::Backend& b) {
  ++g_made;
  return std::make_unique<HostStore>(b);
}

gpu::Backend& some_backend() {
  static const std::unique_ptr<gpu::Backend> b = gpu::make_emulated_backend();
  return *b;
}

StreamStore::SavedResidual residual(std::uint64_t key, float v) {
  return {key, 3, "maxnorm:bits=8,ef=1", {v, v, v}};
}

TEST(CommCore, CountsCallsAndNamedTensorsApart) {
  CommCore c;
  EXPECT_EQ(c.next_call(), 0u);
  EXPECT_EQ(c.next_call(), 1u);
  EXPECT_EQ(c.next_tensor_call(7), 0u);
  EXPECT_EQ(c.next_tensor_call(7), 1u);
  EXPECT_EQ(c.next_tensor_call(9), 0u);
  EXPECT_EQ(c.next_call(), 2u);
}

TEST(CommCore, SavesAndLoadsCountersAndResiduals) {
  CommCore a;
  a.next_call();
  a.next_call();
  a.next_tensor_call(9);
  a.next_tensor_call(5);
  a.next_tensor_call(5);
  g_made = 0;
  auto& store = static_cast<HostStore&>(a.stream_store(some_backend(), make_host_store));
  EXPECT_EQ(&a.stream_store(some_backend(), make_host_store), &store) << "made once";
  EXPECT_EQ(g_made, 1);
  store.load_residual(residual(5, 1.5f));
  store.load_residual(residual(9, 2.5f));

  const CommCore::Saved all = a.save_core(0);
  EXPECT_EQ(all.calls, 2u);
  ASSERT_EQ(all.tensor_calls.size(), 2u);
  EXPECT_EQ(all.tensor_calls[0], (std::pair<std::uint64_t, std::uint64_t>{5, 2}));  // sorted
  EXPECT_EQ(all.tensor_calls[1], (std::pair<std::uint64_t, std::uint64_t>{9, 1}));
  EXPECT_EQ(all.residuals.size(), 2u);
  const CommCore::Saved five = a.save_core(5);
  ASSERT_EQ(five.tensor_calls.size(), 1u);
  ASSERT_EQ(five.residuals.size(), 1u);
  EXPECT_EQ(five.residuals[0].values[0], 1.5f);

  // loaded before its stream-ordered state exists: held, then given to it when it is made
  CommCore b;
  b.load_core(all);
  EXPECT_EQ(b.stream_store_if_made(), nullptr);
  EXPECT_EQ(b.next_call(), 2u) << "the resumed calls continue the saved counter";
  EXPECT_EQ(b.next_tensor_call(5), 2u);
  auto& got = static_cast<HostStore&>(b.stream_store(some_backend(), make_host_store));
  ASSERT_EQ(got.residuals.size(), 2u);
  EXPECT_EQ(got.residuals.at(9).values, residual(9, 2.5f).values);

  // loaded after: at once; a saved call count of 0 leaves the counter alone
  CommCore::Saved later;
  later.residuals.push_back(residual(5, -4.0f));
  b.load_core(later);
  EXPECT_EQ(got.residuals.at(5).values[2], -4.0f);
  EXPECT_EQ(b.next_call(), 3u);
}

// Kinds apart, one core a handle, creation order, taken out for the caller to free.
TEST(CommRegistry, KeepsOneCoreAHandleOfEachKind) {
  CommRegistry& r = CommRegistry::instance();
  using Kind = CommRegistry::Kind;
  int a = 0;
  int b = 0;
  const std::uintptr_t ka = CommRegistry::key_of(&a);
  const std::uintptr_t kb = CommRegistry::key_of(&b);
  EXPECT_EQ(r.find(Kind::kNccl, ka), nullptr);
  CommCore& first = r.insert(Kind::kNccl, ka, std::make_unique<CommCore>());
  CommCore& again = r.insert(Kind::kNccl, ka, std::make_unique<CommCore>());
  EXPECT_EQ(&first, &again) << "a second core for the same handle replaced the first";
  EXPECT_EQ(r.find(Kind::kNccl, ka), &first);
  EXPECT_EQ(r.find(Kind::kMpi, ka), nullptr) << "kinds must not share entries";
  CommCore& second = r.insert(Kind::kNccl, kb, std::make_unique<CommCore>());
  const std::vector<CommCore*> live = r.live(Kind::kNccl);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0], &first);  // oldest first
  EXPECT_EQ(live[1], &second);
  EXPECT_TRUE(r.with(Kind::kNccl, kb, [&](CommCore* c) { return c == &second; }));
  std::unique_ptr<CommCore> taken = r.take(Kind::kNccl, ka);
  EXPECT_EQ(taken.get(), &first);
  EXPECT_EQ(r.find(Kind::kNccl, ka), nullptr);
  EXPECT_EQ(r.take(Kind::kNccl, ka), nullptr);
  r.take(Kind::kNccl, kb);
  EXPECT_TRUE(r.live(Kind::kNccl).empty());
}

}  // namespace
}  // namespace ccoll
