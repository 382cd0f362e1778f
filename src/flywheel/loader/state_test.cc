#include "flywheel/loader/state.h"

#include <gtest/gtest.h>

#include <string>

namespace flywheel::loader {
namespace {

LoaderState Sample() {
  LoaderState s;
  s.seed = 0xfedcba9876543210ULL;  // above INT64_MAX: must survive JSON
  s.epoch = 3;
  s.consumed = 640;
  s.shuffle = true;
  s.shuffle_mode = ShuffleMode::kBlock;
  s.window_blocks = 16;
  s.tables = {{"/data/a", 7, 1000, 128}, {"/data/b", 2, 500, 64}};
  s.mixture = MixtureState{{0.25, 0.75}, {160, 480}};
  return s;
}

void ExpectError(const std::string& json, const std::string& field) {
  auto s = LoaderState::FromJson(json);
  ASSERT_FALSE(s.ok()) << json;
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_NE(std::string(s.status().message()).find(field), std::string::npos)
      << "error should name '" << field << "': " << s.status();
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t i = s.find(from);
  EXPECT_NE(i, std::string::npos) << from;
  if (i != std::string::npos) s.replace(i, from.size(), to);
  return s;
}

TEST(LoaderStateTest, RoundTripsThroughJson) {
  const LoaderState s = Sample();
  const std::string json = s.ToJson();
  auto back = LoaderState::FromJson(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_EQ(*back, s);
  LoaderState one;
  one.seed = 1;
  one.tables = {{"t", 0, 10, 0}};
  one.consumed = 10;
  auto back1 = LoaderState::FromJson(one.ToJson());
  ASSERT_TRUE(back1.ok()) << back1.status();
  EXPECT_EQ(*back1, one);
  EXPECT_NE(one.ToJson().find("\"mixture\":null"), std::string::npos) << one.ToJson();
}

TEST(LoaderStateTest, StrictParsingNamesTheField) {
  const std::string good = Sample().ToJson();
  ExpectError("", "JSON");
  ExpectError("[1]", "top level");
  ExpectError(Replace(good, "\"epoch\":3", "\"epoch\":3,\"extra\":1"), "extra");
  ExpectError(Replace(good, "\"epoch\":3,", ""), "epoch");
  ExpectError(Replace(good, "\"epoch\":3", "\"epoch\":\"3\""), "epoch");
  ExpectError(Replace(good, "\"epoch\":3", "\"epoch\":-1"), "epoch");
  ExpectError(Replace(good, "\"consumed\":640", "\"consumed\":6.5"), "consumed");
  ExpectError(Replace(good, "\"version\":1", "\"version\":2"), "version");
  ExpectError(Replace(good, "flywheel.loader_state", "something"), "format");
  ExpectError(Replace(good, "\"mode\":\"block\"", "\"mode\":\"pages\""), "order.mode");
  ExpectError(Replace(good, "\"shuffle\":true", "\"shuffle\":1"), "order.shuffle");
  ExpectError(Replace(good, "\"uri\":\"/data/b\"", "\"uri\":5"), "tables[1].uri");
  ExpectError(Replace(good, "\"version\":7", "\"version\":\"7\""), "tables[0].version");
  ExpectError(Replace(good, "\"rows\":500,", "\"rows\":500,\"x\":0,"), "tables[1].x");
  ExpectError(Replace(good, "\"drawn\":[160,480]", "\"drawn\":[160]"), "mixture.drawn");
  ExpectError(Replace(good, "\"drawn\":[160,480]", "\"drawn\":[160,-4]"), "mixture.drawn[1]");
  ExpectError(Replace(good, "[0.25,0.75]", "[0.25,0]"), "mixture.weights[1]");
  ExpectError(Replace(good, "[0.25,0.75]", "[0.25,\"a\"]"), "mixture.weights[1]");
  ExpectError(Replace(good, "\"seed\":18364758544493064720", "\"seed\":-1"), "seed");
  ExpectError(Replace(good, "\"tables\":[", "\"tables\":[],\"t\":["), "t");
  LoaderState one;
  one.tables = {{"t", 0, 10, 0}};
  ExpectError(Replace(one.ToJson(), "\"consumed\":0", "\"consumed\":11"), "consumed");
  ExpectError(
      Replace(one.ToJson(), "\"mixture\":null", "\"mixture\":{\"weights\":[1],\"drawn\":[0]}"),
      "mixture");
  ExpectError(Replace(Sample().ToJson(), "\"mixture\":{", "\"mixture\":null,\"m\":{"), "m");
}

TEST(LoaderStateTest, CheckResumableNamesWhatDiffers) {
  const LoaderState s = Sample();
  LoaderState later = s;
  later.epoch = 9;
  later.consumed = 0;
  later.mixture->drawn = {1, 2};
  EXPECT_TRUE(CheckResumable(s, later).ok());
  auto expect = [&](LoaderState other, const std::string& field) {
    Status st = CheckResumable(s, other);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << field;
    EXPECT_NE(std::string(st.message()).find(field), std::string::npos) << st;
  };
  LoaderState o = s;
  o.seed = 1;
  expect(o, "'seed'");
  o = s;
  o.tables[1].version = 3;
  expect(o, "tables[1].version");
  o = s;
  o.tables[0].uri = "/data/c";
  expect(o, "tables[0].uri");
  o = s;
  o.tables[0].rows = 999;
  expect(o, "tables[0].rows");
  o = s;
  o.shuffle_mode = ShuffleMode::kRow;
  expect(o, "order.mode");
  o = s;
  o.mixture->weights = {0.5, 0.5};
  expect(o, "mixture.weights");
  o = s;
  o.tables.pop_back();
  o.mixture.reset();
  expect(o, "tables");
}

}  // namespace
}  // namespace flywheel::loader
