// Spec-string parsing: canonical forms, and errors that name the argument and the valid choices.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "ccoll/error.hpp"
#include "collectives.hpp"
#include "config.hpp"
#include "data_path.hpp"
#include "sim_model.hpp"
#include "spec.hpp"

namespace ccoll {
namespace {

std::string error_of(const std::string& spec) {
  try {
    parse_codec_spec(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Status::kInvalidArgument);
    return e.what();
  }
  return "";
}

// CCOLL_DEBUG takes its levels in any case, as NCCL_DEBUG does; a wrong one names the valid ones.
TEST(Config, LogLevelInAnyCase) {
  EXPECT_EQ(parse_log_level(""), LogLevel::kNone);
  EXPECT_EQ(parse_log_level("none"), LogLevel::kNone);
  EXPECT_EQ(parse_log_level("WARN"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("info"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("Trace"), LogLevel::kTrace);
  try {
    parse_log_level("verbose");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("CCOLL_DEBUG: unknown level 'verbose' (valid: NONE, WARN, "
                                         "INFO, TRACE, in any case)"),
              std::string::npos)
        << e.what();
  }
}

// Time-only simulation's codec model (CCOLL_SIM_MODEL) exists only in the SMPI build: elsewhere
// a set variable is refused, not ignored, and a malformed one is named with the valid form.
TEST(Spec, SimModelOnlyInTheSmpiBuild) {
  const auto make = [] {
    return make_codec(parse_codec_spec("maxnorm:bits=8"), codec::DType::kFloat32);
  };
  // the error make() throws with CCOLL_SIM_MODEL=value: its status and message
  const auto error = [&](const char* value) -> std::pair<Status, std::string> {
    setenv("CCOLL_SIM_MODEL", value, 1);
    std::pair<Status, std::string> got{Status::kSuccess, "no error"};
    try {
      make();
    } catch (const Error& e) {
      got = {e.code(), e.what()};
    }
    unsetenv("CCOLL_SIM_MODEL");
    return got;
  };
  const auto [code, text] = error("encode=585,decode=1014");
  EXPECT_EQ(code, Status::kUnsupported);
  EXPECT_NE(text.find("CCOLL_SIM_MODEL is set, but only the SimGrid SMPI build"), std::string::npos)
      << text;
  for (const char* bad :
       {"encode=585", "encode=585,decode=-1", "encode=585,decode=1,speed=2", "fast"}) {
    const auto [bad_code, bad_text] = error(bad);
    EXPECT_EQ(bad_code, Status::kInvalidArgument) << bad;
    EXPECT_NE(bad_text.find("(valid: encode=GBPS,decode=GBPS[,add=GBPS][,scan=GBPS]"),
              std::string::npos)
        << bad_text;
  }
  EXPECT_FALSE(sim::model_on());  // unset: the codecs themselves
  EXPECT_EQ(make()->spec(), "maxnorm:bits=8");
}

TEST(Spec, ParsesRegisteredNames) {
  for (const std::string name : {"none", "fp16", "bf16"}) {
    const CodecSpec s = parse_codec_spec(name);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.canonical, name);
    // (bf16's round= has a default the canonical spec leaves out)
    EXPECT_EQ(s.params.size(), name == "bf16" ? 1u : 0u);
  }
  EXPECT_EQ(parse_codec_spec("  fp16 ").canonical, "fp16");
}

// The static traits of a registry row (CodecSpec::summable, lossless, stateful, ...) are the ones
// the codec it makes reports, for every codec, with and without ef=1, and for other parameters.
TEST(Spec, RowTraitsMatchTheCodecs) {
  std::vector<std::string> specs;
  for (const std::string& name : codec_names()) {
    const std::string base =
        name == "qsgd" || name == "sketch" || name == "temporal" || name == "maxnorm"
            ? name + ":bits=4"
        : name == "randk" || name == "topk" ? name + ":ratio=0.1"
        : name == "dq"                      ? name + ":min=2,max=8"
                                            : name;
    specs.push_back(base);
    if (name != "auto") specs.push_back(base + (base == name ? ":" : ",") + "ef=1");
  }
  for (const char* more :
       {"maxnorm:bits=3/7", "maxnorm:bits=2,sum=requant", "randk:bits=4,ratio=0.5"}) {
    specs.emplace_back(more);
  }
  for (const std::string& text : specs) {
    SCOPED_TRACE(text);
    const CodecSpec spec = parse_codec_spec(text);
    for (const codec::DType t : {codec::DType::kFloat32, codec::DType::kFloat64}) {
      const auto c = make_codec(spec, t);
      EXPECT_EQ(spec.summable, c->capabilities().summable);
      EXPECT_EQ(spec.lossless, c->capabilities().lossless);
      EXPECT_EQ(spec.stateful, c->capabilities().stateful);
      EXPECT_EQ(spec.gather_reduce, c->capabilities().gather_reduce);
      EXPECT_EQ(spec.prescale_mean, c->capabilities().prescale_mean);
      EXPECT_EQ(spec.segment_local, c->capabilities().segment_local);
    }
  }
}

TEST(Spec, UnknownNameListsValidCodecs) {
  const std::string msg = error_of("fp9");
  EXPECT_NE(msg.find("codec"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fp9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("none, fp16, bf16"), std::string::npos) << msg;
}

TEST(Spec, UnknownKeyNamesCodecAndValidKeys) {
  const std::string msg = error_of("fp16:bits=4");
  EXPECT_NE(msg.find("unknown parameter 'bits'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("codec 'fp16'"), std::string::npos) << msg;
}

TEST(Spec, MalformedParameters) {
  for (const std::string bad : {"fp16:", "fp16:bits", "fp16:=3", "fp16:bits=", "none,,", ""}) {
    EXPECT_FALSE(error_of(bad).empty()) << "accepted '" << bad << "'";
  }
}

// Bit widths count the sign: bits=B has 2^(B-1) - 1 levels per sign. The all-reduce-compatible
// reference's "q bits" exclude it (2^q - 1 levels), so its q is ccoll's B - 1: its two-scale
// 2/6 (3 coarse levels, 63 fine ones) is ccoll's bits=3/7.
TEST(Spec, BitWidthsCountTheSign) {
  auto levels = [](const std::string& spec) {
    return 1.0 / make_codec(parse_codec_spec(spec), codec::DType::kFloat32)->unit_roundoff();
  };
  for (int q = 1; q <= 7; ++q) {
    EXPECT_DOUBLE_EQ(levels("maxnorm:bits=" + std::to_string(q + 1)), (1 << q) - 1) << q;
  }
  EXPECT_DOUBLE_EQ(levels("maxnorm:bits=3/7"), 3.0);  // the coarse step bounds the error
}

TEST(Spec, MaxnormFamily) {
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4").canonical, "maxnorm:bits=4");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=4,sum=exact").canonical, "maxnorm:bits=4");
  EXPECT_EQ(parse_codec_spec("maxnorm:sum=requant,bits=4").canonical, "maxnorm:bits=4,sum=requant");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=2/6").canonical, "maxnorm:bits=2/6");
  EXPECT_EQ(parse_codec_spec("maxnorm:bits=02/6,ef=1").canonical, "maxnorm:bits=2/6,ef=1");
  for (const std::string bad :
       {"maxnorm:bits=6/2", "maxnorm:bits=4/4", "maxnorm:bits=2/9", "maxnorm:bits=1/4",
        "maxnorm:bits=2/", "maxnorm:bits=/6", "maxnorm:bits=2/6/8", "maxnorm:bits=4,sum=float"}) {
    const std::string msg = error_of(bad);
    EXPECT_NE(msg.find("valid: "), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_NE(error_of("maxnorm:bits=4,sum=float").find("exact, requant"), std::string::npos);
  EXPECT_NE(error_of("maxnorm:bits=9").find("B1/B2"), std::string::npos);
}

TEST(Spec, RatioParameters) {
  EXPECT_EQ(parse_codec_spec("randk:ratio=0.01").canonical, "randk:bits=8,ratio=0.01");
  EXPECT_EQ(parse_codec_spec("randk:ratio=.010,bits=4").canonical, "randk:bits=4,ratio=0.01");
  EXPECT_EQ(parse_codec_spec("topk:ratio=1e-3,ef=1").canonical, "topk:ratio=0.001,ef=1");
  EXPECT_EQ(parse_codec_spec("topk:ratio=1").canonical, "topk:ratio=1");
  for (const std::string bad :
       {"topk:ratio=0", "topk:ratio=-0.1", "topk:ratio=1.5", "topk:ratio=nan", "topk:ratio=inf",
        "topk:ratio=0.1x", "topk:ratio=1e-7", "randk:ratio=0.1,bits=1"}) {
    const std::string msg = error_of(bad);
    EXPECT_NE(msg.find("valid: "), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_NE(error_of("topk").find("needs ratio="), std::string::npos) << error_of("topk");
}

TEST(Spec, ByteSizes) {
  EXPECT_EQ(parse_byte_size("4096", "X"), 4096u);
  EXPECT_EQ(parse_byte_size("64K", "X"), 65536u);
  EXPECT_EQ(parse_byte_size("2M", "X"), 2u << 20);
  EXPECT_EQ(parse_byte_size("1G", "X"), 1u << 30);
  for (const std::string bad : {"", "K", "12Q", "-5", "1.5M"}) {
    try {
      parse_byte_size(bad, "CCOLL_MIN_BYTES");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CCOLL_MIN_BYTES"), std::string::npos);
    }
  }
}

TEST(Spec, Algorithms) {
  EXPECT_EQ(coll::parse_algorithm("auto"), coll::Algorithm::kAuto);
  EXPECT_EQ(coll::parse_algorithm(""), coll::Algorithm::kAuto);
  EXPECT_EQ(coll::parse_algorithm("ring"), coll::Algorithm::kRing);
  EXPECT_EQ(coll::parse_algorithm("tree"), coll::Algorithm::kTree);
  EXPECT_EQ(coll::parse_algorithm("allgather"), coll::Algorithm::kAllgather);
  EXPECT_EQ(coll::parse_algorithm("sra"), coll::Algorithm::kScatterReduce);
  EXPECT_EQ(coll::parse_algorithm("hierarchical"), coll::Algorithm::kHierarchical);
  EXPECT_STREQ(coll::algorithm_name(coll::Algorithm::kHierarchical), "hierarchical");
  try {
    coll::parse_algorithm("butterfly");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("algorithm: unknown algorithm 'butterfly' (valid: auto, "
                                         "ring, tree, allgather, sra, halving, hierarchical)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Spec, AutoSelection) {
  using coll::Algorithm;
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 16, 4, 4), Algorithm::kTree);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 1 << 20, 4, 4), Algorithm::kRing);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kRing, 1, 4, 4), Algorithm::kRing);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kTree, 1 << 20, 4, 4), Algorithm::kTree);
  // sparse codecs (topk) ask for the all-gather reduction at every size, unless overridden
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 16, 4, 4, true), Algorithm::kAllgather);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 1 << 20, 4, 4, true), Algorithm::kAllgather);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kRing, 1 << 20, 4, 4, true), Algorithm::kRing);
  // codecs that re-encode: the tree when small, the scatter-reduce-allgather from 3 ranks; with
  // ef=1 never the tree (its shared encodes of group sums have no residual)
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 16, 4, 4, false, true), Algorithm::kTree);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 1 << 20, 4, 4, false, true),
            Algorithm::kScatterReduce);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 16, 4, 4, false, true, true),
            Algorithm::kScatterReduce);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 3, 4, 4, false, true, true),
            Algorithm::kScatterReduce);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 16, 4, 2, false, true, true),
            Algorithm::kRing);
  EXPECT_EQ(coll::select_allreduce(Algorithm::kAuto, 16, 4, 4, false, false, true),
            Algorithm::kTree);
  EXPECT_EQ(coll::select_allgather(Algorithm::kAuto, 16, 4, 4), Algorithm::kTree);
  EXPECT_EQ(coll::select_allgather(Algorithm::kAuto, 1 << 20, 4, 4), Algorithm::kRing);
}

// The one choice of a call's schedule: the transport's needs, then the device codecs', then the
// request or auto's size rule.
TEST(Spec, ScheduleSelection) {
  using coll::Algorithm;
  using coll::Schedule;
  coll::ScheduleQuery q;
  q.ranks = 4;
  q.count = 1 << 20;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kRing);
  q.count = 16;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kTree);
  q.gather_reduce = true;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kAllgatherReduce);
  q.requested = Algorithm::kRing;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kRing);
  // device codecs take the ring, or auto's all-gather reduction for a codec that asks for it
  q.device_codecs = true;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kRing);
  q.requested = Algorithm::kAuto;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kAllgatherReduce);
  q.gather_reduce = false;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kRing);  // even below the tree's size
  // a transport that needs exact lengths (NCCL) takes the ring (in lock step), whatever else
  q.gather_reduce = true;
  q.exact_lengths = true;
  EXPECT_EQ(coll::select_schedule(q), Schedule::kRing);
  // all-gather: the tree (Bruck) when small, the ring otherwise or with device codecs
  coll::ScheduleQuery g;
  g.allreduce = false;
  g.ranks = 4;
  g.count = 16;
  EXPECT_EQ(coll::select_schedule(g), Schedule::kTree);
  EXPECT_STREQ(coll::schedule_name(Schedule::kTree), "tree");
  g.device_codecs = true;
  EXPECT_EQ(coll::select_schedule(g), Schedule::kRing);
  g.device_codecs = false;
  g.count = 1 << 20;
  EXPECT_EQ(coll::select_schedule(g), Schedule::kRing);
}

// Every data path has a distinct name, which the C API's lookup finds (a name it lacked came
// out as "" in ccoll_stats_t::transport); an unknown name is "".
TEST(DataPaths, NamesAreDistinctAndFound) {
  std::set<std::string> seen;
  for (const DataPath p : {DataPath::kHost, DataPath::kHostCopy, DataPath::kStaged,
                           DataPath::kCudaAwareMpi, DataPath::kNccl, DataPath::kNcclEmulated}) {
    const std::string name = data_path_name(p);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(seen.insert(name).second) << name;
    EXPECT_EQ(data_path_static_name(name), data_path_name(p));  // the static string itself
  }
  EXPECT_STREQ(data_path_static_name("gpu"), "");
  EXPECT_STREQ(data_path_static_name(""), "");
  // a hierarchical call's pair of paths: found, the same static string each time
  const char* pair = data_path_static_name(std::string("nccl/host-copy"));
  EXPECT_STREQ(pair, "nccl/host-copy");
  EXPECT_EQ(pair, data_path_static_name(std::string("nccl/host-copy")));
  EXPECT_STREQ(data_path_static_name("host-copy/staged"), "host-copy/staged");
  EXPECT_STREQ(data_path_static_name("nccl/gpu"), "");
  EXPECT_STREQ(data_path_static_name("nccl/"), "");
}

}  // namespace
}  // namespace ccoll
