// Helpers shared by the replay service tests: tables, a server on a free
// loopback port, and a fixed episode of steps.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/replay/service/client.h"
#include "flywheel/replay/service/server.h"

namespace flywheel::replay::testing_util {

inline std::shared_ptr<ReplayTable> MakeTable(const std::string& name, RateLimiterOptions limiter = RateLimiterOptions::MinSize(1),
                                 std::optional<Signature> signature = std::nullopt) {
  ReplayTableOptions o;
  o.name = name;
  o.sampler = NewFifoSelector();
  o.rate_limiter = limiter;
  o.signature = std::move(signature);
  o.max_times_sampled = 1;  // each item sampled once: tests see FIFO order
  auto t = ReplayTable::Create(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::shared_ptr<ReplayTable>(std::move(*t));
}

inline std::unique_ptr<Server> StartServer(ServerOptions o) {
  auto s = Server::Start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_GT((*s)->port(), 0);
  return std::move(*s);
}

inline std::unique_ptr<Server> StartServer(std::vector<std::shared_ptr<ReplayTable>> tables) {
  ServerOptions o;
  o.tables = std::move(tables);
  return StartServer(std::move(o));
}

// obs = float32[2] {i, -i}, action = int32 i.
template <typename Writer>
void AppendSteps(Writer& w, int first, int n) {
  for (int i = first; i < first + n; ++i) {
    float obs[2] = {static_cast<float>(i), static_cast<float>(-i)};
    int32_t action = i;
    ASSERT_TRUE(w.Append({{"obs", format::DataType::Tensor(format::TypeId::kFloat32, {2}), obs},
                          {"action", format::DataType::Scalar(format::TypeId::kInt32), &action}})
                    .ok());
  }
}

inline std::vector<int32_t> Actions(const SampledItem& s, int col = 0) {
  std::vector<int32_t> v(static_cast<size_t>(s.item->columns[col].length));
  EXPECT_TRUE(s.item->columns[col].Decode(v.data()).ok());
  return v;
}

}  // namespace flywheel::replay::testing_util
