// The schedule table (schedules.hpp): every row parses back from its name, runs every collective
// it claims through the table's dispatch (in place and not, over several rank counts, to the
// exact sum or within the codec's bound), and the argument checks and their messages follow the
// rows.

#include "schedules_test_support.hpp"

namespace ccoll {
namespace {

using coll::Op;
using coll::ScheduleRow;

constexpr Op kOps[] = {Op::kAllreduce, Op::kAllgather, Op::kReduceScatter};

bool runs(const ScheduleRow& row, Op op) { return (row.ops & coll::bit(op)) != 0; }

// A codec that fits the row's need for `op`: "none" (exact), or maxnorm (adds codes).
std::string codec_for(const ScheduleRow& row, Op op) {
  const coll::CodecNeed need =
      op == Op::kReduceScatter ? row.reduce_scatter_codec : row.allreduce_codec;
  return need == coll::CodecNeed::kSummable ? "maxnorm:bits=8" : "none";
}

TEST(ScheduleTable, RowsAreConsistent) {
  const auto& table = coll::schedule_table();
  ASSERT_FALSE(table.empty());
  std::vector<std::string> names{"auto"};
  for (const ScheduleRow& row : table) {
    SCOPED_TRACE(row.name);
    names.emplace_back(row.name);
    EXPECT_EQ(coll::parse_algorithm(row.name), row.id);
    EXPECT_STREQ(coll::algorithm_name(row.id), row.name);
    EXPECT_EQ(&coll::schedule_row(row.id), &row);
    EXPECT_EQ(row.device & ~row.ops, 0u) << "device codecs run only the collectives it runs";
    EXPECT_EQ(row.lock_step & ~row.ops, 0u) << "lock step only for the collectives it runs";
    if (row.two_level) continue;  // run by the API layer
    EXPECT_EQ(row.allreduce != nullptr, runs(row, Op::kAllreduce));
    EXPECT_EQ(row.allgather != nullptr, runs(row, Op::kAllgather));
    EXPECT_EQ(row.reduce_scatter != nullptr, runs(row, Op::kReduceScatter));
  }
  EXPECT_EQ(coll::algorithm_names(), names);
  EXPECT_EQ(coll::parse_algorithm(""), Algorithm::kAuto);
  EXPECT_EQ(coll::parse_algorithm("auto"), Algorithm::kAuto);
}

// Every row's functions through the table's dispatch: the all-reduce and the reduce-scatter give
// the exact sum with "none" (within the bound with maxnorm), in place and not; the all-gather
// gives every rank's block.
TEST(ScheduleTable, EveryRowRunsWhatItClaims) {
  for (const ScheduleRow& row : coll::schedule_table()) {
    if (row.two_level) continue;
    for (const Op op : kOps) {
      if (!runs(row, op)) continue;
      const std::string spec = codec_for(row, op);
      const bool exact = spec == "none";
      for (const int p : {1, 2, 3, 5}) {
        for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
          for (const bool in_place : {false, true}) {
            SCOPED_TRACE(std::string(row.name) + " " + coll::op_function(op) +
                         " p=" + std::to_string(p) + " count=" + std::to_string(count) +
                         (in_place ? " in place" : ""));
            RunConfig rc;
            rc.codec = spec;
            rc.algorithm = row.id;
            const std::size_t pz = static_cast<std::size_t>(p);
            const std::size_t total_in = op == Op::kReduceScatter ? count * pz : count;
            std::vector<std::vector<float>> xs(pz, std::vector<float>(total_in));
            for (int r = 0; r < p; ++r) {
              for (std::size_t i = 0; i < total_in; ++i) xs[r][i] = input<float>(r, i);
            }
            // lossy codecs' shared scales, agreed over every rank's input
            if (!exact) rc.prepare = [&](codec::Codec& c, int) { testing_support::agree(c, xs); };
            const auto res = run_ranks(p, rc, DType::kFloat32, [&](coll::Context& cx, int r) {
              const std::size_t total = op == Op::kReduceScatter ? count * pz : count;
              std::vector<float> in(total);
              for (std::size_t i = 0; i < total; ++i) in[i] = input<float>(r, i);
              if (op == Op::kAllgather) {
                std::vector<float> out(count * pz, -1.0f);
                const float* send = in.data();
                if (in_place) {
                  std::copy(in.begin(), in.end(), out.begin() + static_cast<long>(count * r));
                  send = out.data() + count * static_cast<std::size_t>(r);
                }
                coll::run_allgather(row, cx, send, count, out.data());
                return as_bytes(out);
              }
              std::vector<float> out(total, -1.0f);
              float* dst = in_place ? in.data() : out.data();
              if (op == Op::kAllreduce) {
                coll::run_allreduce(row, cx, in.data(), dst, count, false);
                return as_bytes(std::vector<float>(dst, dst + count));
              }
              coll::run_reduce_scatter(row, cx, in.data(), dst, total);
              const std::size_t n = coll::chunk_count(total, p, r);
              return as_bytes(std::vector<float>(dst, dst + n));
            });
            if (op != Op::kReduceScatter) expect_identical(res);
            for (int r = 0; r < p; ++r) {
              const auto& rr = res[static_cast<std::size_t>(r)];
              ASSERT_FALSE(rr.failed) << rr.message;
              const auto got = from_bytes<float>(rr.out);
              const std::size_t total = op == Op::kReduceScatter ? count * pz : count;
              const std::size_t off =
                  op == Op::kReduceScatter ? coll::chunk_offset(total, p, r) : 0;
              for (std::size_t i = 0; i < got.size(); ++i) {
                const double want = op == Op::kAllgather
                                        ? input<float>(static_cast<int>(i / count), i % count)
                                        : exact_sum<float>(p, off + i);
                if (exact) {
                  ASSERT_EQ(got[i], want) << "rank " << r << " at " << i;
                } else {
                  // 8-bit codes: within a few levels of 20 per contribution
                  ASSERT_NEAR(got[i], want, 0.05 * 20 * p) << "rank " << r << " at " << i;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The argument checks follow the rows: which collectives a row runs, what it needs of the codec,
// and the valid choices the message lists.
TEST(ScheduleTable, ChecksFollowTheRows) {
  Status code = Status::kSuccess;
  EXPECT_EQ(coll::check_algorithm(Algorithm::kAuto, Op::kAllgather, {false, false}, "none", code),
            "");
  EXPECT_EQ(coll::check_algorithm(Algorithm::kRing, Op::kReduceScatter, {true, false}, "x", code),
            "");
  std::string m =
      coll::check_algorithm(Algorithm::kScatterReduce, Op::kAllgather, {false, false}, "x", code);
  EXPECT_EQ(code, Status::kInvalidArgument);
  EXPECT_EQ(m,
            "algorithm: 'sra' is an all-reduce schedule with no all-gather form (valid for "
            "compressed_allgather: auto, ring, tree, hierarchical)");
  m = coll::check_algorithm(Algorithm::kTree, Op::kReduceScatter, {true, false}, "maxnorm:bits=8",
                            code);
  EXPECT_EQ(code, Status::kInvalidArgument);
  EXPECT_NE(m.find("valid for compressed_reduce_scatter with maxnorm:bits=8: auto, ring, "
                   "hierarchical)"),
            std::string::npos)
      << m;
  m = coll::check_algorithm(Algorithm::kRing, Op::kReduceScatter, {false, false}, "qsgd:bits=4",
                            code);
  EXPECT_EQ(code, Status::kUnsupported);
  EXPECT_EQ(m,
            "algorithm: 'ring' is for codecs that add codes; qsgd:bits=4 cannot (valid for "
            "compressed_reduce_scatter with it: auto, sra, hierarchical)");
  m = coll::check_algorithm(Algorithm::kScatterReduce, Op::kAllreduce, {true, false}, "fp8", code);
  EXPECT_EQ(code, Status::kUnsupported);
  EXPECT_EQ(m,
            "algorithm: 'sra' encodes each owner's sum once on scales of its own, which fp8 "
            "cannot: it adds codes on agreed scales only (valid for compressed_allreduce with "
            "it: auto, ring, tree, allgather, halving, hierarchical)");
  // a summable codec that encodes owner sums on their own scales (maxnorm) takes sra's
  // all-reduce, not its pairwise reduce-scatter
  EXPECT_EQ(coll::check_algorithm(Algorithm::kScatterReduce, Op::kAllreduce, {true, true},
                                  "maxnorm:bits=8", code),
            "");
  m = coll::check_algorithm(Algorithm::kScatterReduce, Op::kReduceScatter, {true, true},
                            "maxnorm:bits=8", code);
  EXPECT_EQ(code, Status::kUnsupported);
  EXPECT_NE(m.find("valid for compressed_reduce_scatter with it: auto, ring, hierarchical)"),
            std::string::npos)
      << m;
  // which collectives device codecs and a lock-step transport run (the data path's choice)
  EXPECT_TRUE(coll::device_codecs_run(Algorithm::kAuto, Op::kReduceScatter));
  EXPECT_TRUE(coll::device_codecs_run(Algorithm::kAllgather, Op::kAllreduce));
  EXPECT_FALSE(coll::device_codecs_run(Algorithm::kTree, Op::kAllreduce));
  EXPECT_FALSE(coll::device_codecs_run(Algorithm::kHierarchical, Op::kAllreduce));
  EXPECT_TRUE(coll::runs_in_lock_step(Algorithm::kAuto, Op::kAllgather));
  EXPECT_FALSE(coll::runs_in_lock_step(Algorithm::kAuto, Op::kReduceScatter));
  EXPECT_FALSE(coll::runs_in_lock_step(Algorithm::kScatterReduce, Op::kAllreduce));
  // auto's reduce-scatter: the first row whose reduce-scatter takes the codec
  EXPECT_EQ(coll::select_reduce_scatter(Algorithm::kAuto, true), Algorithm::kRing);
  EXPECT_EQ(coll::select_reduce_scatter(Algorithm::kAuto, false), Algorithm::kScatterReduce);
}

// The table's stream-ordered and two-level columns answer what the call layer asks of them.
TEST(ScheduleTable, StreamOrderedAndTwoLevelFollowTheRows) {
  const coll::Op ops[] = {coll::Op::kAllreduce, coll::Op::kReduceScatter, coll::Op::kAllgather};
  for (const coll::Op op : ops) {
    const coll::ScheduleRow* first = nullptr;
    for (const coll::ScheduleRow& r : coll::schedule_table()) {
      const bool streams = r.stream != nullptr && (r.stream_ops & coll::bit(op)) != 0;
      EXPECT_EQ(coll::stream_schedule(r.id, op), streams ? &r : nullptr) << r.name;
      if (streams && first == nullptr) first = &r;
    }
    EXPECT_EQ(coll::stream_schedule(Algorithm::kAuto, op), first);
    ASSERT_NE(first, nullptr) << "no row runs " << coll::op_function(op) << " stream-ordered";
  }
  for (const coll::ScheduleRow& r : coll::schedule_table()) {
    EXPECT_EQ(coll::runs_two_level(r.id), r.two_level) << r.name;
  }
  EXPECT_FALSE(coll::runs_two_level(Algorithm::kAuto));
  EXPECT_TRUE(coll::runs_two_level(Algorithm::kHierarchical));
}

}  // namespace
}  // namespace ccoll
