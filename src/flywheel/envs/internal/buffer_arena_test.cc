#include "flywheel/envs/internal/buffer_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "flywheel/envs/internal/cache_line.h"

namespace flywheel::internal_envs {
namespace {

// One array of a buffer: [begin, begin + bytes).
struct Region {
  uintptr_t begin = 0;
  size_t bytes = 0;
};

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Every array of every buffer, then the extra region.
std::vector<Region> Regions(const BufferArena& a, const BufferArena::Shape& s, bool with_extra) {
  std::vector<Region> r;
  for (int i = 0; i < a.num_buffers(); ++i) {
    const envs::BufferView& v = a.view(i);
    const auto rows = static_cast<size_t>(v.rows);
    r.push_back({Addr(v.obs), rows * s.obs_bytes});
    r.push_back({Addr(v.reward), rows * sizeof(double)});
    r.push_back({Addr(v.terminated), rows});
    r.push_back({Addr(v.truncated), rows});
    r.push_back({Addr(v.env_id), rows * sizeof(int32_t)});
    if (s.final_obs) {
      r.push_back({Addr(v.final_obs), rows * s.obs_bytes});
      r.push_back({Addr(v.has_final_obs), rows});
    }
  }
  if (with_extra) r.push_back({Addr(a.extra()), s.extra_bytes});
  return r;
}

TEST(BufferArenaTest, EveryArrayIsAlignedZeroedAndApartFromTheOthers) {
  for (bool final_obs : {false, true}) {
    const BufferArena::Shape s{.ring_buffers = 4,
                               .ring_rows = 3,
                               .last_rows = 7,
                               .obs_bytes = 4 * sizeof(float),
                               .final_obs = final_obs,
                               .extra_bytes = 7 * 2};
    const BufferArena a(s);
    ASSERT_EQ(a.num_buffers(), 5);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(a.view(i).rows, 3);
    EXPECT_EQ(a.view(4).rows, 7);  // the last buffer (Reset's)
    for (int i = 0; i < a.num_buffers(); ++i) {
      EXPECT_EQ(a.view(i).final_obs != nullptr, final_obs);
      EXPECT_EQ(a.view(i).has_final_obs != nullptr, final_obs);
    }
    std::vector<Region> regions = Regions(a, s, /*with_extra=*/true);
    EXPECT_EQ(regions.size(), 5u * (final_obs ? 7 : 5) + 1);
    const uintptr_t base = regions.front().begin;
    for (const Region& r : regions) {
      EXPECT_EQ(r.begin % kCacheLine, 0u);
      // Inside the allocation, and zeroed.
      EXPECT_GE(r.begin, base);
      EXPECT_LE(r.begin + r.bytes, base + a.bytes());
      const auto* p = reinterpret_cast<const unsigned char*>(r.begin);
      EXPECT_TRUE(std::all_of(p, p + r.bytes, [](unsigned char c) { return c == 0; }));
    }
    // No two arrays share a cache line.
    std::sort(regions.begin(), regions.end(),
              [](const Region& x, const Region& y) { return x.begin < y.begin; });
    for (size_t i = 1; i < regions.size(); ++i) {
      EXPECT_GE(regions[i].begin, regions[i - 1].begin + AlignUp(regions[i - 1].bytes));
    }
    EXPECT_EQ(a.bytes() % kCacheLine, 0u);
  }
}

TEST(BufferArenaTest, BytesAreEveryRegionRoundedUpToCacheLines) {
  const BufferArena::Shape s{.ring_buffers = 2,
                             .ring_rows = 5,
                             .last_rows = 9,
                             .obs_bytes = 12,
                             .final_obs = false,
                             .extra_bytes = 100};
  const BufferArena a(s);
  // Per buffer: obs, reward, terminated, truncated, env_id.
  auto buffer = [](size_t rows) {
    return AlignUp(rows * 12) + AlignUp(rows * 8) + 2 * AlignUp(rows) + AlignUp(rows * 4);
  };
  EXPECT_EQ(a.bytes(), 2 * buffer(5) + buffer(9) + AlignUp(100));
}

TEST(BufferArenaTest, MemoryOutlivesTheArena) {
  const BufferArena::Shape s{.ring_buffers = 1,
                             .ring_rows = 2,
                             .last_rows = 2,
                             .obs_bytes = 8,
                             .final_obs = false,
                             .extra_bytes = 0};
  std::shared_ptr<const void> memory;
  envs::BufferView v;
  {
    const BufferArena a(s);
    memory = a.memory();
    v = a.view(0);
    v.reward[0] = 1.5;
    v.env_id[1] = 42;
  }
  // The arena is gone; its memory is not (ASan would flag a read after free).
  EXPECT_EQ(v.reward[0], 1.5);
  EXPECT_EQ(v.env_id[1], 42);
  EXPECT_EQ(memory.use_count(), 1);
}

TEST(BufferArenaTest, AnEmptyShapeStillAllocatesOneLine) {
  const BufferArena a(BufferArena::Shape{});
  EXPECT_EQ(a.num_buffers(), 1);
  EXPECT_EQ(a.view(0).rows, 0);
  EXPECT_EQ(a.bytes(), 0u);
  EXPECT_NE(a.memory(), nullptr);
  EXPECT_NE(a.extra(), nullptr);
}

}  // namespace
}  // namespace flywheel::internal_envs
