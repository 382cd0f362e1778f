#include "flywheel/envs/internal/action_slots.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace flywheel::internal_envs {
namespace {

using envs::DType;
using envs::Space;

int64_t RoundTrip(ActionSlots& slots, int32_t e, int64_t value) {
  slots.Store(e, reinterpret_cast<const std::byte*>(&value));
  int64_t out = -12345;
  const void* p = slots.Load(e, &out);
  EXPECT_EQ(p, &out);  // Discrete: the widened value, not the slot
  return out;
}

TEST(ActionSlotsTest, DiscreteSlotsAreTheNarrowestTypeTheRangeFits) {
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(2)), 1u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(128)), 1u);     // 0 .. 127
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(129)), 2u);     // 0 .. 128
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(256, -128)), 1u);  // -128 .. 127
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(3, -129)), 2u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(32768)), 2u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(32769)), 4u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(int64_t{1} << 31)), 4u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete((int64_t{1} << 31) + 1)), 8u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::Discrete(2, INT64_MIN)), 8u);
  // Box rows as given.
  EXPECT_EQ(ActionSlots::SlotBytes(Space::UniformBox(-1, 1, {3})), 12u);
  EXPECT_EQ(ActionSlots::SlotBytes(Space::UniformBox(-1, 1, {2, 2}, DType::kFloat64)), 32u);
}

TEST(ActionSlotsTest, DiscreteValuesRoundTripAtTheEdgesOfEachWidth) {
  struct Case {
    Space space;
    std::vector<int64_t> values;
  };
  const std::vector<Case> cases = {
      {Space::Discrete(256, -128), {-128, -1, 0, 1, 127}},
      {Space::Discrete(65536, -32768), {-32768, -129, 128, 32767}},
      {Space::Discrete(int64_t{1} << 32, INT32_MIN), {INT32_MIN, -32769, 32768, INT32_MAX}},
      {Space::Discrete(int64_t{1} << 40, -(int64_t{1} << 39)),
       {-(int64_t{1} << 39), int64_t{INT32_MIN} - 1, int64_t{INT32_MAX} + 1,
        (int64_t{1} << 39) - 1}},
  };
  for (const Case& c : cases) {
    const int n = static_cast<int>(c.values.size());
    std::vector<std::byte> memory(n * ActionSlots::SlotBytes(c.space));
    ActionSlots slots(c.space, memory.data());
    for (int e = 0; e < n; ++e) EXPECT_EQ(RoundTrip(slots, e, c.values[e]), c.values[e]);
    // Each env has its own slot: the stores above did not overwrite each
    // other.
    for (int e = 0; e < n; ++e) {
      int64_t out = 0;
      slots.Load(e, &out);
      EXPECT_EQ(out, c.values[e]) << c.space.ToString() << " env " << e;
    }
  }
}

TEST(ActionSlotsTest, BoxRowsAreCopiedAndLoadedInPlace) {
  const Space box = Space::UniformBox(-2, 2, {2});
  std::vector<std::byte> memory(3 * ActionSlots::SlotBytes(box));
  ActionSlots slots(box, memory.data());
  const float rows[3][2] = {{0.5f, -1.5f}, {2.0f, -2.0f}, {1e-3f, 7.0f}};
  for (int e = 0; e < 3; ++e) slots.Store(e, reinterpret_cast<const std::byte*>(rows[e]));
  for (int e = 0; e < 3; ++e) {
    int64_t unused = 0;
    const void* p = slots.Load(e, &unused);
    EXPECT_EQ(p, memory.data() + e * 8);  // the slot itself
    const auto* f = static_cast<const float*>(p);
    EXPECT_EQ(f[0], rows[e][0]);
    EXPECT_EQ(f[1], rows[e][1]);
  }
}

}  // namespace
}  // namespace flywheel::internal_envs
