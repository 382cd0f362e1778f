// The replay server's TOML configuration: every option, and errors that name
// the file, line and column.
#include "flywheel/replay/service/config.h"

#include <gtest/gtest.h>

namespace flywheel::replay {
namespace {

Result<ServerOptions> Load(std::string_view text) {
  FW_ASSIGN_OR_RETURN(toml::Value root, toml::Parse(text, "tables.toml"));
  return ServerOptionsFromToml(root);
}

void ExpectError(std::string_view text, const std::string& where_and_what) {
  auto o = Load(text);
  ASSERT_FALSE(o.ok()) << text;
  EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << o.status();
  EXPECT_NE(std::string(o.status().message()).find(where_and_what), std::string::npos)
      << "wanted '" << where_and_what << "' in: " << o.status();
}

TEST(ServerConfigTest, ExampleParsesIntoTheDocumentedTables) {
  auto o = Load(ExampleServerConfig());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->address, "127.0.0.1:9000");
  EXPECT_EQ(o->max_message_bytes, int64_t{64} << 20);
  EXPECT_EQ(o->checkpoint_dir, "replay-checkpoints");
  EXPECT_EQ(o->checkpoint_interval, absl::Seconds(600));
  EXPECT_EQ(o->checkpoint_keep_last, 3);
  EXPECT_TRUE(o->restore);
  ASSERT_EQ(o->tables.size(), 2u);
  const TableInfo r = o->tables[0]->Info();
  EXPECT_EQ(r.name, "replay");
  EXPECT_EQ(r.sampler, "Prioritized(priority_exponent=0.6)");
  EXPECT_EQ(r.remover, "Fifo");
  EXPECT_EQ(r.max_size, 1000000);
  EXPECT_EQ(r.max_times_sampled, 0);
  EXPECT_EQ(r.limiter_options.samples_per_insert, 4.0);
  EXPECT_EQ(r.limiter_options.min_size_to_sample, 1000);
  EXPECT_EQ(r.limiter_options.min_diff, 4000 - 100);
  EXPECT_EQ(r.limiter_options.max_diff, 4000 + 100);
  ASSERT_TRUE(o->tables[0]->signature().has_value());
  const auto& sig = o->tables[0]->signature()->columns;
  ASSERT_EQ(sig.size(), 3u);
  EXPECT_EQ(sig[0].first, "obs");
  EXPECT_EQ(sig[0].second.ToString(), "float32[4]");
  EXPECT_EQ(sig[2].second.ToString(), "float32");
  const TableInfo q = o->tables[1]->Info();
  EXPECT_EQ(q.name, "queue");
  EXPECT_EQ(q.sampler, "Fifo");
  EXPECT_EQ(q.remover, "Fifo");
  EXPECT_EQ(q.max_times_sampled, 1);
  EXPECT_EQ(q.limiter_options.max_diff, 10000);
  EXPECT_EQ(q.limiter_options.min_diff, 0);
}

TEST(ServerConfigTest, DefaultsAndEveryLimiterAndSelectorForm) {
  auto o = Load(R"(
[[table]]
name = "a"
[[table]]
name = "b"
sampler = "max_heap"
remover = { kind = "uniform", seed = 5 }
rate_limiter = { kind = "min_size", min_size = 7 }
[[table]]
name = "c"
preset = "stack"
max_size = 12
[[table]]
name = "d"
rate_limiter = { kind = "custom", samples_per_insert = 2, min_size_to_sample = 3, min_diff = -10, max_diff = 10 }
[[table]]
name = "e"
max_size = 50
rate_limiter = { kind = "queue" }
sampler = "fifo"
)");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->address, "127.0.0.1:0");
  EXPECT_TRUE(o->checkpoint_dir.empty());
  ASSERT_EQ(o->tables.size(), 5u);
  const TableInfo a = o->tables[0]->Info();
  EXPECT_EQ(a.sampler, "Uniform");
  EXPECT_EQ(a.remover, "Fifo");
  EXPECT_EQ(a.max_size, 1000000);
  EXPECT_EQ(a.limiter_options.min_size_to_sample, 1);
  EXPECT_FALSE(o->tables[0]->signature().has_value());
  const TableInfo b = o->tables[1]->Info();
  EXPECT_EQ(b.sampler, "MaxHeap");
  EXPECT_EQ(b.remover, "Uniform");
  EXPECT_EQ(b.limiter_options.min_size_to_sample, 7);
  const TableInfo c = o->tables[2]->Info();
  EXPECT_EQ(c.sampler, "Lifo");
  EXPECT_EQ(c.max_times_sampled, 1);
  EXPECT_EQ(c.limiter_options.max_diff, 12);
  const TableInfo d = o->tables[3]->Info();
  EXPECT_EQ(d.limiter_options.samples_per_insert, 2);
  EXPECT_EQ(d.limiter_options.min_diff, -10);
  const TableInfo e = o->tables[4]->Info();
  EXPECT_EQ(e.limiter_options.max_diff, 50);  // queue size defaults to max_size
}

TEST(ServerConfigTest, ErrorsNameFileLineAndColumn) {
  ExpectError("port = 9000\n", "tables.toml:1:1: no tables");
  ExpectError("[[table]]\nname = \"a\"\nmax_sise = 3\n", "tables.toml:3:12: unknown key \"max_sise\"");
  ExpectError("[[table]]\nname = \"a\"\n[[table]]\nname = \"a\"\n", "tables.toml:3:1: table name 'a' appears twice");
  ExpectError("[[table]]\nname = \"a\"\nsampler = \"random\"\n", "tables.toml:3:11: sampler: unknown selector \"random\"");
  ExpectError("[[table]]\nname = \"a\"\nsampler = { kind = \"prioritized\" }\n",
              "tables.toml:3:11: sampler: prioritized needs priority_exponent");
  ExpectError("[[table]]\nname = \"a\"\nsampler = { kind = \"uniform\", priority_exponent = 1.0 }\n",
              "priority_exponent is only for kind = \"prioritized\"");
  ExpectError("[[table]]\nname = \"a\"\nrate_limiter = { kind = \"sample_to_insert_ratio\", samples_per_insert = 4.0, "
              "min_size_to_sample = 10, error_buffer = 0.5 }\n",
              "tables.toml:3:16: rate_limiter: ");
  ExpectError("[[table]]\nname = \"a\"\nrate_limiter = { kind = \"fast\" }\n", "unknown kind \"fast\"");
  ExpectError("[[table]]\nname = \"a\"\npreset = \"queue\"\nsampler = \"uniform\"\n",
              "tables.toml:4:11: preset \"queue\" sets sampler");
  ExpectError("[[table]]\nname = \"a\"\nsignature = { obs = \"float33\" }\n", "tables.toml:3:21: signature column 'obs'");
  ExpectError("[[table]]\nname = \"a\"\nmax_size = \"big\"\n", "tables.toml:3:12: max_size: expected integer, got string");
  ExpectError("[[table]]\nname = \"a\"\nmax_size = 0\n", "tables.toml:1:1: table: ");
  ExpectError("port = 70000\n[[table]]\nname = \"a\"\n", "tables.toml:1:8: port must be in [0, 65535]");
  ExpectError("checkpoint_interval_s = 5\n[[table]]\nname = \"a\"\n", "checkpoint_interval_s needs checkpoint_dir");
  ExpectError("table = 3\n", "tables.toml:1:9: table: expected [[table]] entries");
  ExpectError("[[table]]\nname = \"a\"\nmax_times_sampled = -1\n", "max_times_sampled must be in [0, 2^31-1]");
}

TEST(ServerConfigTest, LoadServerConfigNamesAMissingFile) {
  auto o = LoadServerConfig("/nonexistent/tables.toml");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(std::string(o.status().message()).find("/nonexistent/tables.toml"), std::string::npos) << o.status();
}

}  // namespace
}  // namespace flywheel::replay
