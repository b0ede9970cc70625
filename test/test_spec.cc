// Spec-string parsing: canonical forms, and errors that name the argument and the valid choices.
#include <gtest/gtest.h>

#include "ccoll/error.hpp"
#include "collectives.hpp"
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

TEST(Spec, ParsesRegisteredNames) {
  for (const std::string name : {"none", "fp16", "bf16"}) {
    const CodecSpec s = parse_codec_spec(name);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.canonical, name);
    EXPECT_TRUE(s.params.empty());
  }
  EXPECT_EQ(parse_codec_spec("  fp16 ").canonical, "fp16");
}

TEST(Spec, UnknownNameListsValidCodecs) {
  const std::string msg = error_of("fp8");
  EXPECT_NE(msg.find("codec"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fp8'"), std::string::npos) << msg;
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
  try {
    coll::parse_algorithm("butterfly");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("algorithm: unknown algorithm 'butterfly' (valid: auto, "
                                         "ring, tree)"),
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
  EXPECT_EQ(coll::select_allgather(Algorithm::kAuto, 16, 4, 4), Algorithm::kTree);
  EXPECT_EQ(coll::select_allgather(Algorithm::kAuto, 1 << 20, 4, 4), Algorithm::kRing);
}

}  // namespace
}  // namespace ccoll
