#include "flywheel/rl/weights.h"

#include <gtest/gtest.h>

#include <thread>

namespace flywheel::rl {
namespace {

Tensor Floats(const std::string& name, std::vector<float> v) {
  Tensor t;
  t.name = name;
  t.type = format::DataType::Tensor(format::TypeId::kFloat32, {static_cast<int64_t>(v.size())});
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

TEST(WeightStoreTest, VersionsGrowAndReadersShareTheSameWeights) {
  WeightStore store;
  EXPECT_EQ(store.Version("p"), 0);
  EXPECT_TRUE(absl::IsNotFound(store.Get("p").status()));
  auto v1 = store.Publish("p", {Floats("w", {1, 2})});
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(*v1, 1);
  auto a = store.Get("p");
  auto b = store.Get("p");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());  // shared, not copied
  EXPECT_EQ((*a)->version, 1);
  ASSERT_NE((*a)->Find("w"), nullptr);
  EXPECT_EQ((*a)->Find("w")->data.size(), 8u);
  EXPECT_EQ((*a)->Find("nope"), nullptr);
  EXPECT_EQ(*store.Publish("p", {Floats("w", {3, 4})}), 2);
  EXPECT_EQ(*store.Publish("p", {Floats("w", {5, 6})}, 10), 10);
  auto old = store.Publish("p", {Floats("w", {5, 6})}, 10);
  EXPECT_TRUE(absl::IsFailedPrecondition(old.status())) << old.status();
  EXPECT_EQ((*a)->version, 1);  // earlier readers keep their version
  EXPECT_EQ(store.Models(), (std::vector<std::string>{"p"}));
}

TEST(WeightStoreTest, TheVersionBeforeTheLatestIsHeldExactlyAndLentOnlyWhenUnread) {
  WeightStore store;
  ASSERT_TRUE(store.Publish("p", {Floats("w", {1})}).ok());
  EXPECT_EQ(store.TakeUnusedPrevious("p"), nullptr);  // no version before the latest
  ASSERT_TRUE(store.Publish("p", {Floats("w", {2})}).ok());
  auto v1 = store.GetExact("p", 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(reinterpret_cast<const float*>((*v1)->tensors[0].data.data())[0], 1.0f);
  EXPECT_EQ(store.TakeUnusedPrevious("p"), nullptr);  // a reader holds version 1
  v1 = absl::NotFoundError("dropped");
  auto lent = store.TakeUnusedPrevious("p");
  ASSERT_NE(lent, nullptr);
  EXPECT_EQ(lent->version, 1);
  auto gone = store.GetExact("p", 1);
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_NE(std::string(gone.status().message()).find("current 2"), std::string::npos) << gone.status();
  EXPECT_TRUE(store.GetExact("p", 2).ok());
  ASSERT_TRUE(store.Publish("p", {Floats("w", {3})}).ok());
  EXPECT_TRUE(store.GetExact("p", 2).ok());  // the one before the latest
  EXPECT_TRUE(absl::IsNotFound(store.GetExact("q", 1).status()));
}

TEST(WeightStoreTest, GetWaitsForANewerVersion) {
  WeightStore store;
  ASSERT_TRUE(store.Publish("p", {Floats("w", {1})}).ok());
  auto none = store.Get("p", /*newer_than=*/1, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(none.status())) << none.status();
  EXPECT_NE(std::string(none.status().message()).find("current version 1"), std::string::npos);
  std::thread publisher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Publish("p", {Floats("w", {2})}).ok());
  });
  auto got = store.Get("p", 1, absl::Seconds(30));
  publisher.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)->version, 2);
  // A model not yet published: a waiting reader gets its first version.
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(30));
    ASSERT_TRUE(store.Publish("q", {Floats("w", {1})}).ok());
  });
  auto first = store.Get("q", 0, absl::Seconds(30));
  later.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->version, 1);
}

TEST(WeightStoreTest, CancelAndCloseWakeWaiters) {
  WeightStore store;
  bool flag = false;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(30));
    store.Cancel(&flag);
  });
  auto r = store.Get("p", 0, absl::Seconds(30), &flag);
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(30));
    store.Close();
  });
  EXPECT_TRUE(absl::IsCancelled(store.Get("p", 0, absl::Seconds(30)).status()));
  closer.join();
  EXPECT_TRUE(absl::IsCancelled(store.Publish("p", {Floats("w", {1})}).status()));
}

TEST(WeightStoreTest, BadTensorsAreRefusedNamingThem) {
  WeightStore store;
  EXPECT_TRUE(absl::IsInvalidArgument(store.Publish("", {Floats("w", {1})}).status()));
  Tensor short_data = Floats("w", {1, 2});
  short_data.data.resize(5);
  auto s = store.Publish("p", {short_data}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(std::string(s.message()).find("tensor 'w': 5 bytes"), std::string::npos) << s;
  Tensor str;
  str.name = "s";
  str.type = format::DataType::String();
  EXPECT_TRUE(absl::IsInvalidArgument(store.Publish("p", {str}).status()));
  auto dup = store.Publish("p", {Floats("w", {1}), Floats("w", {2})}).status();
  EXPECT_NE(std::string(dup.message()).find("'w' given twice"), std::string::npos) << dup;
  EXPECT_EQ(store.Version("p"), 0);  // nothing half-published
}

}  // namespace
}  // namespace flywheel::rl
