#include "flywheel/loader/internal/slot_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

namespace flywheel::internal_loader {
namespace {

TEST(AlignedBufferTest, IsAlignedGrowsAndKeepsCapacity) {
  AlignedBuffer b;
  EXPECT_EQ(b.capacity(), 0u);
  uint8_t* p = b.Reserve(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_GE(b.capacity(), 64u);
  EXPECT_EQ(b.capacity() % 64, 0u);
  EXPECT_EQ(b.Reserve(b.capacity()), p);  // fits: same memory
  uint8_t* q = b.Reserve(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  EXPECT_GE(b.capacity(), 1500u);  // 1.5x headroom so growing batches do not reallocate each time
  EXPECT_EQ(b.Reserve(20), q);     // never shrinks
}

TEST(SlotPoolTest, ReleasedSlotsAreReusedWithTheirBuffers) {
  auto pool = std::make_shared<SlotPool>(3);
  Slot* first = nullptr;
  uint8_t* buffer = nullptr;
  {
    std::shared_ptr<Slot> s = pool->Acquire();
    ASSERT_EQ(s->values.size(), 3u);
    ASSERT_EQ(s->offsets.size(), 3u);
    ASSERT_EQ(s->validity.size(), 3u);
    ASSERT_EQ(s->images.size(), 3u);
    ASSERT_EQ(s->image_src.size(), 3u);
    buffer = s->values[1].Reserve(4096);
    first = s.get();
    EXPECT_EQ(pool->free_slots(), 0u);
  }
  EXPECT_EQ(pool->free_slots(), 1u);
  std::shared_ptr<Slot> again = pool->Acquire();
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(again->values[1].data(), buffer);  // capacity kept across batches
  std::shared_ptr<Slot> other = pool->Acquire();
  EXPECT_NE(other.get(), first);  // none free: a new slot
}

TEST(SlotPoolTest, SlotsMayOutliveThePool) {
  auto pool = std::make_shared<SlotPool>(1);
  std::shared_ptr<Slot> s = pool->Acquire();
  s->values[0].Reserve(100)[99] = 7;
  pool.reset();
  EXPECT_EQ(s->values[0].data()[99], 7);
  s.reset();  // freed, not returned (the sanitizer build checks for leaks and use after free)
}

TEST(SlotPoolTest, ConcurrentAcquireAndReleaseNeverShareASlot) {
  auto pool = std::make_shared<SlotPool>(1);
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  std::vector<int64_t> errors(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        std::shared_ptr<Slot> s = pool->Acquire();
        // The holder owns the slot: what it writes stays until it releases it.
        s->skipped = t * kRounds + i;
        std::this_thread::yield();
        if (s->skipped != t * kRounds + i) ++errors[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], 0) << t;
  EXPECT_GE(pool->free_slots(), 1u);
  EXPECT_LE(pool->free_slots(), static_cast<size_t>(kThreads));  // at most one slot per concurrent holder
}

}  // namespace
}  // namespace flywheel::internal_loader
