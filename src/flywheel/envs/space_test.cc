#include "flywheel/envs/space.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace flywheel::envs {
namespace {

using ::testing::HasSubstr;

TEST(SpaceTest, DiscreteDescribesItself) {
  const Space d = Space::Discrete(3);
  EXPECT_TRUE(d.is_discrete());
  EXPECT_EQ(d.num_elements(), 1);
  EXPECT_EQ(d.row_bytes(), 8u);  // int64
  EXPECT_EQ(d.ToString(), "Discrete(3)");
  EXPECT_EQ(Space::Discrete(2, -1).ToString(), "Discrete(2, start=-1)");
  EXPECT_TRUE(d.Validate().ok());
  EXPECT_THAT(Space::Discrete(0).Validate().message(), HasSubstr("n must be >= 1"));
}

TEST(SpaceTest, BoxSizesAndBounds) {
  const Space b = Space::UniformBox(-2.0, 2.0, {1});
  EXPECT_TRUE(b.is_box());
  EXPECT_EQ(b.row_bytes(), 4u);
  EXPECT_EQ(b.ToString(), "Box(-2, 2, (1,), float32)");
  const Space img = Space::UniformBox(0, 255, {84, 84, 4}, DType::kUInt8);
  EXPECT_EQ(img.num_elements(), 84 * 84 * 4);
  EXPECT_EQ(img.row_bytes(), 84u * 84 * 4);
  EXPECT_TRUE(img.Validate().ok());
  const Space mixed = Space::Box({-1, -2}, {1, 2}, {2});
  EXPECT_EQ(mixed.ToString(), "Box(shape=(2,), float32)");
}

TEST(SpaceTest, ValidateNamesTheProblem) {
  EXPECT_THAT(Space::Box({0}, {1, 2}, {2}).Validate().message(),
              HasSubstr("1 low and 2 high bounds for 2"));
  EXPECT_THAT(Space::Box({3}, {1}, {1}).Validate().message(),
              HasSubstr("element 0 has bounds [3, 1]"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(Space::Box({nan}, {1}, {1}).Validate().ok());
  EXPECT_THAT(Space::UniformBox(0, 1, {-1}).Validate().message(), HasSubstr("negative dimension"));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(Space::UniformBox(-inf, inf, {3}).Validate().ok());
}

}  // namespace
}  // namespace flywheel::envs
