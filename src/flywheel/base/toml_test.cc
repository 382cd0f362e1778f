#include "flywheel/base/toml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace flywheel::toml {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::string_literals;

Value MustParse(std::string_view text) {
  Result<Value> r = Parse(text, "t.toml");
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return Value();
  return *std::move(r);
}

// The error message of parsing `text`, which must fail with InvalidArgument.
std::string ParseError(std::string_view text) {
  Result<Value> r = Parse(text, "t.toml");
  if (r.ok()) return "<parsed ok>";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return std::string(r.status().message());
}

// Walks `keys` through nested tables; fails the test if one is missing.
const Value& At(const Value& v, std::initializer_list<std::string_view> keys) {
  static const Value kMissing;
  const Value* cur = &v;
  for (const std::string_view k : keys) {
    const Value* next = cur->Find(k);
    EXPECT_NE(next, nullptr) << "missing key " << k;
    if (next == nullptr) return kMissing;
    cur = next;
  }
  return *cur;
}

std::vector<std::string> Keys(const Value& table) {
  std::vector<std::string> keys;
  for (const auto& entry : table.as_table()) keys.push_back(entry.first);
  return keys;
}

constexpr std::string_view kReplayConfig = R"(# Replay server configuration.
port = 9000
checkpoint_dir = "/tmp/ckpt"

[[table]]
name = "replay"
sampler = { kind = "prioritized", priority_exponent = 0.6 }
remover = "fifo"
max_size = 1_000_000
rate_limiter = { kind = "sample_to_insert_ratio", samples_per_insert = 4.0, min_size_to_sample = 1000, error_buffer = 100.0 }
signature = { obs = "float32[4]", action = "int64" }

[[table]]
name = "queue"
max_size = 0
)";

TEST(TomlTest, ParsesReplayConfig) {
  Result<Value> r = Parse(kReplayConfig, "tables.toml");
  ASSERT_TRUE(r.ok()) << r.status();
  const Value& root = *r;
  ASSERT_TRUE(root.is_table());
  EXPECT_EQ(Keys(root), (std::vector<std::string>{"port", "checkpoint_dir", "table"}));
  EXPECT_EQ(*GetInt(root, "port"), 9000);
  EXPECT_EQ(*GetString(root, "checkpoint_dir"), "/tmp/ckpt");

  const Value& tables = At(root, {"table"});
  ASSERT_TRUE(tables.is_array());
  ASSERT_EQ(tables.as_array().size(), 2u);
  const Value& replay = tables.as_array()[0];
  EXPECT_EQ(Keys(replay), (std::vector<std::string>{"name", "sampler", "remover", "max_size",
                                                    "rate_limiter", "signature"}));
  EXPECT_EQ(*GetString(replay, "name"), "replay");
  EXPECT_EQ(*GetString(At(replay, {"sampler"}), "kind"), "prioritized");
  EXPECT_DOUBLE_EQ(*GetDouble(At(replay, {"sampler"}), "priority_exponent"), 0.6);
  EXPECT_EQ(*GetInt(replay, "max_size"), 1000000);
  const Value& limiter = At(replay, {"rate_limiter"});
  EXPECT_EQ(*GetString(limiter, "kind"), "sample_to_insert_ratio");
  EXPECT_DOUBLE_EQ(*GetDouble(limiter, "samples_per_insert"), 4.0);
  EXPECT_EQ(*GetInt(limiter, "min_size_to_sample"), 1000);
  EXPECT_DOUBLE_EQ(*GetDouble(limiter, "error_buffer"), 100.0);
  EXPECT_EQ(At(replay, {"signature", "obs"}).as_string(), "float32[4]");
  EXPECT_EQ(At(replay, {"signature", "action"}).as_string(), "int64");
  EXPECT_EQ(*GetString(tables.as_array()[1], "name"), "queue");

  // Locations, as a config reader reports them.
  EXPECT_EQ(replay.Location(), "tables.toml:5:1");
  EXPECT_EQ(At(replay, {"max_size"}).Location(), "tables.toml:9:12");
  EXPECT_EQ(At(replay, {"sampler"}).Location(), "tables.toml:7:11");
  EXPECT_EQ(At(replay, {"sampler", "priority_exponent"}).Location(), "tables.toml:7:55");
  const Value& queue_size = At(tables.as_array()[1], {"max_size"});
  ASSERT_EQ(queue_size.as_int(), 0);
  const Status s = queue_size.Error("max_size must be > 0");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tables.toml:15:12: max_size must be > 0");
}

TEST(TomlTest, EmptyAndCommentOnlyDocuments) {
  EXPECT_TRUE(MustParse("").as_table().empty());
  EXPECT_TRUE(MustParse("\n\n   \t\n").as_table().empty());
  EXPECT_TRUE(MustParse("# only a comment").as_table().empty());
  EXPECT_TRUE(MustParse("# c1\r\n  # c2 \"x\" = 1\n").as_table().empty());
  const Value root = MustParse("a = 1 # trailing comment\n# another\nb = 2");
  EXPECT_EQ(At(root, {"a"}).as_int(), 1);
  EXPECT_EQ(At(root, {"b"}).as_int(), 2);
  EXPECT_EQ(root.Location(), "t.toml:1:1");
}

TEST(TomlTest, AcceptsByteOrderMarkAndCrlf) {
  const Value root = MustParse(
      "\xEF\xBB\xBF"
      "a = 1\r\n[t]\r\nb = 'x'\r\n");
  EXPECT_EQ(At(root, {"a"}).as_int(), 1);
  EXPECT_EQ(At(root, {"a"}).column(), 5);
  EXPECT_EQ(At(root, {"t", "b"}).as_string(), "x");
  EXPECT_EQ(At(root, {"t", "b"}).line(), 3);
}

TEST(TomlTest, Keys) {
  const Value root = MustParse(R"(
bare_key-1 = 1
1234 = 2
"quoted key" = 3
'literal "key"' = 4
"" = 5
"\u00e9t\u00e9" = 6
a.b.c = 7
a . d = 8
a."e.f" = 9
3.14 = 10
true = 11
)");
  EXPECT_EQ(At(root, {"bare_key-1"}).as_int(), 1);
  EXPECT_EQ(At(root, {"1234"}).as_int(), 2);
  EXPECT_EQ(At(root, {"quoted key"}).as_int(), 3);
  EXPECT_EQ(At(root, {"literal \"key\""}).as_int(), 4);
  EXPECT_EQ(At(root, {""}).as_int(), 5);
  EXPECT_EQ(At(root, {"\xC3\xA9t\xC3\xA9"}).as_int(), 6);
  EXPECT_EQ(At(root, {"a", "b", "c"}).as_int(), 7);
  EXPECT_EQ(At(root, {"a", "d"}).as_int(), 8);
  EXPECT_EQ(At(root, {"a", "e.f"}).as_int(), 9);
  EXPECT_EQ(At(root, {"3", "14"}).as_int(), 10);
  EXPECT_EQ(At(root, {"true"}).as_int(), 11);
  EXPECT_EQ(Keys(At(root, {"a"})), (std::vector<std::string>{"b", "d", "e.f"}));
  EXPECT_EQ(root.Find("missing"), nullptr);
  EXPECT_EQ(At(root, {"a", "b", "c"}).Find("x"), nullptr);  // not a table
}

TEST(TomlTest, TablesKeepInsertionOrder) {
  const Value root = MustParse(R"(
top = true
[zeta]
z = 1
y = 2
[alpha]
x = 3
[alpha.beta]
w = 4
[ "quoted header" . inner ]
v = 5
)");
  EXPECT_EQ(Keys(root), (std::vector<std::string>{"top", "zeta", "alpha", "quoted header"}));
  EXPECT_EQ(Keys(At(root, {"zeta"})), (std::vector<std::string>{"z", "y"}));
  EXPECT_EQ(At(root, {"alpha", "beta", "w"}).as_int(), 4);
  EXPECT_EQ(At(root, {"quoted header", "inner", "v"}).as_int(), 5);
  EXPECT_EQ(At(root, {"alpha"}).Location(), "t.toml:6:1");
}

TEST(TomlTest, ImplicitTablesMayBeDefinedLater) {
  const Value root = MustParse(R"(
[x.y.z]
a = 1
[x]
b = 2
[x.y]
c = 3
)");
  EXPECT_EQ(At(root, {"x", "y", "z", "a"}).as_int(), 1);
  EXPECT_EQ(At(root, {"x", "b"}).as_int(), 2);
  EXPECT_EQ(At(root, {"x", "y", "c"}).as_int(), 3);
  EXPECT_EQ(At(root, {"x"}).line(), 4);  // where [x] defined it
}

TEST(TomlTest, HeadersMayAddSubTablesToDottedTables) {
  const Value root = MustParse(R"(
[fruit]
apple.color = "red"
apple.taste.sweet = true
[fruit.apple.texture]
smooth = true
)");
  EXPECT_EQ(At(root, {"fruit", "apple", "color"}).as_string(), "red");
  EXPECT_TRUE(At(root, {"fruit", "apple", "taste", "sweet"}).as_bool());
  EXPECT_TRUE(At(root, {"fruit", "apple", "texture", "smooth"}).as_bool());
}

TEST(TomlTest, ArraysOfTables) {
  const Value root = MustParse(R"(
[[fruits]]
name = "apple"
[fruits.physical]
color = "red"
[[fruits.varieties]]
name = "red delicious"
[[fruits.varieties]]
name = "granny smith"

[[fruits]]
name = "banana"
[[fruits.varieties]]
name = "plantain"

[[empty]]
[[empty]]
)");
  const auto& fruits = At(root, {"fruits"}).as_array();
  ASSERT_EQ(fruits.size(), 2u);
  EXPECT_EQ(At(fruits[0], {"name"}).as_string(), "apple");
  EXPECT_EQ(At(fruits[0], {"physical", "color"}).as_string(), "red");
  const auto& varieties = At(fruits[0], {"varieties"}).as_array();
  ASSERT_EQ(varieties.size(), 2u);
  EXPECT_EQ(At(varieties[1], {"name"}).as_string(), "granny smith");
  EXPECT_EQ(At(fruits[1], {"name"}).as_string(), "banana");
  ASSERT_EQ(At(fruits[1], {"varieties"}).as_array().size(), 1u);
  EXPECT_EQ(At(fruits[1], {"varieties"}).as_array()[0].Find("name")->as_string(), "plantain");
  EXPECT_EQ(fruits[1].Location(), "t.toml:11:1");
  const auto& empty = At(root, {"empty"}).as_array();
  ASSERT_EQ(empty.size(), 2u);
  EXPECT_TRUE(empty[0].is_table());
  EXPECT_TRUE(empty[0].as_table().empty());
}

TEST(TomlTest, BasicStringsAndEscapes) {
  const Value root = MustParse(R"(
plain = "hello world"
escapes = "q\" b\\ n\n t\t r\r b\b f\f"
u4 = "\u00E9\u4e2d"
u8 = "\U0001F600\U00000041"
nul = "\u0000"
raw_utf8 = "héllo ✓"
tab = "a	b"
)");
  EXPECT_EQ(At(root, {"plain"}).as_string(), "hello world");
  EXPECT_EQ(At(root, {"escapes"}).as_string(), "q\" b\\ n\n t\t r\r b\b f\f");
  EXPECT_EQ(At(root, {"u4"}).as_string(), "\xC3\xA9\xE4\xB8\xAD");
  EXPECT_EQ(At(root, {"u8"}).as_string(),
            "\xF0\x9F\x98\x80"
            "A");
  EXPECT_EQ(At(root, {"nul"}).as_string(), std::string(1, '\0'));
  EXPECT_EQ(At(root, {"raw_utf8"}).as_string(), "h\xC3\xA9llo \xE2\x9C\x93");
  EXPECT_EQ(At(root, {"tab"}).as_string(), "a\tb");
}

TEST(TomlTest, LiteralStrings) {
  const Value root = MustParse(R"(
path = 'C:\Users\nodejs\templates'
quoted = 'Tom "Dubs" Preston'
regex = '<\i\c*\s*>'
empty = ''
)");
  EXPECT_EQ(At(root, {"path"}).as_string(), "C:\\Users\\nodejs\\templates");
  EXPECT_EQ(At(root, {"quoted"}).as_string(), "Tom \"Dubs\" Preston");
  EXPECT_EQ(At(root, {"regex"}).as_string(), "<\\i\\c*\\s*>");
  EXPECT_EQ(At(root, {"empty"}).as_string(), "");
}

TEST(TomlTest, MultilineBasicStrings) {
  const Value root = MustParse(
      "a = \"\"\"\nRoses are red\nViolets are blue\"\"\"\n"
      "b = \"\"\"\\\n    The quick \\\n\n    brown fox.\\\n    \"\"\"\n"
      "c = \"\"\"Here are two quotation marks: \"\". Simple.\"\"\"\n"
      "d = \"\"\"\"This,\" she said, \"is just a pointless statement.\"\"\"\"\n"
      "e = \"\"\"crlf\r\nline\\u0021\"\"\"\n"
      "f = \"\"\"trailing\\   \n  space\"\"\"\n"
      "g = \"\"\"\"\"\"\n"
      "h = \"\"\"x\"\"\"\"\"\n");
  EXPECT_EQ(At(root, {"a"}).as_string(), "Roses are red\nViolets are blue");
  EXPECT_EQ(At(root, {"b"}).as_string(), "The quick brown fox.");
  EXPECT_EQ(At(root, {"c"}).as_string(), "Here are two quotation marks: \"\". Simple.");
  EXPECT_EQ(At(root, {"d"}).as_string(), "\"This,\" she said, \"is just a pointless statement.\"");
  EXPECT_EQ(At(root, {"e"}).as_string(), "crlf\nline!");
  EXPECT_EQ(At(root, {"f"}).as_string(), "trailingspace");
  EXPECT_EQ(At(root, {"g"}).as_string(), "");
  EXPECT_EQ(At(root, {"h"}).as_string(), "x\"\"");
}

TEST(TomlTest, MultilineLiteralStrings) {
  const Value root = MustParse(
      "regex2 = '''I [dw]on't need \\d{2} apples'''\n"
      "lines = '''\nThe first newline is\ntrimmed in raw strings.\n   All other whitespace\n"
      "   is preserved.\n'''\n"
      "quot15 = '''Here are fifteen quotation marks: \"\"\"\"\"\"\"\"\"\"\"\"\"\"\"'''\n"
      "apos = ''''That,' she said, 'is still pointless.''''\n");
  EXPECT_EQ(At(root, {"regex2"}).as_string(), "I [dw]on't need \\d{2} apples");
  EXPECT_EQ(At(root, {"lines"}).as_string(),
            "The first newline is\ntrimmed in raw strings.\n   All other whitespace\n"
            "   is preserved.\n");
  EXPECT_EQ(At(root, {"quot15"}).as_string(),
            "Here are fifteen quotation marks: \"\"\"\"\"\"\"\"\"\"\"\"\"\"\"");
  EXPECT_EQ(At(root, {"apos"}).as_string(), "'That,' she said, 'is still pointless.'");
}

TEST(TomlTest, Integers) {
  const Value root = MustParse(R"(
a = 99
b = +42
c = 0
d = -17
e = 1_000
f = 5_349_221
g = 1_2_3_4_5
h = 0xDEADBEEF
i = 0xdead_beef
j = 0o755
k = 0b1101_0110
l = 9223372036854775807
m = -9223372036854775808
n = 0x7FFFFFFFFFFFFFFF
o = -0
p = +0
)");
  EXPECT_EQ(At(root, {"a"}).as_int(), 99);
  EXPECT_EQ(At(root, {"b"}).as_int(), 42);
  EXPECT_EQ(At(root, {"c"}).as_int(), 0);
  EXPECT_EQ(At(root, {"d"}).as_int(), -17);
  EXPECT_EQ(At(root, {"e"}).as_int(), 1000);
  EXPECT_EQ(At(root, {"f"}).as_int(), 5349221);
  EXPECT_EQ(At(root, {"g"}).as_int(), 12345);
  EXPECT_EQ(At(root, {"h"}).as_int(), 0xDEADBEEF);
  EXPECT_EQ(At(root, {"i"}).as_int(), 0xDEADBEEF);
  EXPECT_EQ(At(root, {"j"}).as_int(), 0755);
  EXPECT_EQ(At(root, {"k"}).as_int(), 0xD6);
  EXPECT_EQ(At(root, {"l"}).as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(At(root, {"m"}).as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(At(root, {"n"}).as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(At(root, {"o"}).as_int(), 0);
  EXPECT_EQ(At(root, {"p"}).as_int(), 0);
  EXPECT_TRUE(At(root, {"a"}).is_int());
  EXPECT_FALSE(At(root, {"a"}).is_double());
}

TEST(TomlTest, Floats) {
  const Value root = MustParse(R"(
a = +1.0
b = 3.1415
c = -0.01
d = 5e+22
e = 1e06
f = -2E-2
g = 6.626e-34
h = 224_617.445_991_228
i = 0.0
j = -0.0
k = inf
l = +inf
m = -inf
n = nan
o = +nan
p = -nan
q = 1.7976931348623157e308
)");
  EXPECT_DOUBLE_EQ(At(root, {"a"}).as_double(), 1.0);
  EXPECT_DOUBLE_EQ(At(root, {"b"}).as_double(), 3.1415);
  EXPECT_DOUBLE_EQ(At(root, {"c"}).as_double(), -0.01);
  EXPECT_DOUBLE_EQ(At(root, {"d"}).as_double(), 5e22);
  EXPECT_DOUBLE_EQ(At(root, {"e"}).as_double(), 1e6);
  EXPECT_DOUBLE_EQ(At(root, {"f"}).as_double(), -2e-2);
  EXPECT_DOUBLE_EQ(At(root, {"g"}).as_double(), 6.626e-34);
  EXPECT_DOUBLE_EQ(At(root, {"h"}).as_double(), 224617.445991228);
  EXPECT_EQ(At(root, {"i"}).as_double(), 0.0);
  EXPECT_FALSE(std::signbit(At(root, {"i"}).as_double()));
  EXPECT_TRUE(std::signbit(At(root, {"j"}).as_double()));
  EXPECT_EQ(At(root, {"k"}).as_double(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(At(root, {"l"}).as_double(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(At(root, {"m"}).as_double(), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(At(root, {"n"}).as_double()));
  EXPECT_FALSE(std::signbit(At(root, {"o"}).as_double()));
  EXPECT_TRUE(std::isnan(At(root, {"p"}).as_double()));
  EXPECT_TRUE(std::signbit(At(root, {"p"}).as_double()));
  EXPECT_EQ(At(root, {"q"}).as_double(), std::numeric_limits<double>::max());
  EXPECT_TRUE(At(root, {"a"}).is_double());
}

TEST(TomlTest, Booleans) {
  const Value root = MustParse("t = true\nf = false\n");
  EXPECT_TRUE(At(root, {"t"}).is_bool());
  EXPECT_TRUE(At(root, {"t"}).as_bool());
  EXPECT_FALSE(At(root, {"f"}).as_bool());
}

TEST(TomlTest, Arrays) {
  const Value root = MustParse(R"(
ints = [ 1, 2, 3 ]
empty = []
nested = [ [ 1, 2 ], ["a", 'b', """c"""], [] ]
mixed = [ 0.1, 1, "x", true, { a = 1 }, [2] ]
multi = [
  1,  # one
  # a comment line
  2,
]
trailing = [1,2,]
)");
  const auto& ints = At(root, {"ints"}).as_array();
  ASSERT_EQ(ints.size(), 3u);
  EXPECT_EQ(ints[2].as_int(), 3);
  EXPECT_EQ(ints[1].Location(), "t.toml:2:13");
  EXPECT_TRUE(At(root, {"empty"}).as_array().empty());
  const auto& nested = At(root, {"nested"}).as_array();
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(nested[0].as_array()[1].as_int(), 2);
  EXPECT_EQ(nested[1].as_array()[2].as_string(), "c");
  EXPECT_TRUE(nested[2].as_array().empty());
  const auto& mixed = At(root, {"mixed"}).as_array();
  ASSERT_EQ(mixed.size(), 6u);
  EXPECT_DOUBLE_EQ(mixed[0].as_double(), 0.1);
  EXPECT_EQ(mixed[1].as_int(), 1);
  EXPECT_EQ(mixed[2].as_string(), "x");
  EXPECT_TRUE(mixed[3].as_bool());
  EXPECT_EQ(At(mixed[4], {"a"}).as_int(), 1);
  EXPECT_EQ(mixed[5].as_array()[0].as_int(), 2);
  const auto& multi = At(root, {"multi"}).as_array();
  ASSERT_EQ(multi.size(), 2u);
  EXPECT_EQ(multi[1].as_int(), 2);
  EXPECT_EQ(multi[1].line(), 9);
  EXPECT_EQ(At(root, {"trailing"}).as_array().size(), 2u);
}

TEST(TomlTest, InlineTables) {
  const Value root = MustParse(R"(
name = { first = "Tom", last = "Preston-Werner" }
point = {x=1,y=2}
empty = {}
nested = { a = { b = { c = 1 } }, list = [ { d = 2 } ] }
dotted = { type.name = "pug", type.size = 3 }
)");
  EXPECT_EQ(Keys(At(root, {"name"})), (std::vector<std::string>{"first", "last"}));
  EXPECT_EQ(At(root, {"name", "last"}).as_string(), "Preston-Werner");
  EXPECT_EQ(At(root, {"point", "y"}).as_int(), 2);
  EXPECT_TRUE(At(root, {"empty"}).as_table().empty());
  EXPECT_EQ(At(root, {"nested", "a", "b", "c"}).as_int(), 1);
  EXPECT_EQ(At(At(root, {"nested", "list"}).as_array()[0], {"d"}).as_int(), 2);
  EXPECT_EQ(At(root, {"dotted", "type", "name"}).as_string(), "pug");
  EXPECT_EQ(At(root, {"dotted", "type", "size"}).as_int(), 3);
}

TEST(TomlTest, ColumnsCountCharactersNotBytes) {
  const Value root = MustParse("\"é✓\" = 1\nx = \"✓\" \n");
  EXPECT_EQ(At(root, {"\xC3\xA9\xE2\x9C\x93"}).column(), 8);
  EXPECT_THAT(ParseError("k = \"é\" x"), StartsWith("t.toml:1:9: expected a newline"));
  EXPECT_THAT(ParseError("\t\"✓\" = \"\\q\""), StartsWith("t.toml:1:9: invalid escape"));
}

TEST(TomlTest, NestingIsCappedAtMaxDepth) {
  // The root is depth 0 and `a` depth 1, so kMaxDepth arrays fit.
  const std::string ok = "a = " + std::string(kMaxDepth, '[') + std::string(kMaxDepth, ']');
  const Value root = MustParse(ok);
  const Value* v = root.Find("a");
  int depth = 0;
  while (v != nullptr && v->is_array()) {
    ++depth;
    v = v->as_array().empty() ? nullptr : &v->as_array()[0];
  }
  EXPECT_EQ(depth, kMaxDepth);

  const std::string deep_array =
      "a = " + std::string(kMaxDepth + 1, '[') + std::string(kMaxDepth + 1, ']');
  EXPECT_THAT(ParseError(deep_array), StartsWith("t.toml:1:133: nesting deeper than 128 levels"));
  EXPECT_THAT(ParseError("a = " + std::string(100000, '[')), HasSubstr("nesting deeper than"));
  std::string deep_inline = "a = ";
  for (int i = 0; i < 200; ++i) deep_inline += "{b = ";
  EXPECT_THAT(ParseError(deep_inline), HasSubstr("nesting deeper than"));
  std::string dotted = "k";
  for (int i = 0; i < 200; ++i) dotted += ".k";
  EXPECT_THAT(ParseError(dotted + " = 1"), HasSubstr("key has more than 128 parts"));
  EXPECT_THAT(ParseError("[" + dotted + "]"), HasSubstr("key has more than 128 parts"));
  // Depth adds up across a header, a dotted key and the value.
  std::string half = "k";
  for (int i = 0; i < 99; ++i) half += ".k";
  EXPECT_THAT(ParseError("[" + half + "]\n" + half + " = 1"), HasSubstr("nesting deeper than"));
  EXPECT_THAT(ParseError("[" + half + "]\nv = " + std::string(40, '[')),
              HasSubstr("nesting deeper than"));
  const std::string header_aot = "[[" + half + "]]\n[[" + half + "]]\n";
  EXPECT_TRUE(Parse(header_aot).ok());
}

// --- errors ---

TEST(TomlErrorTest, DuplicateKeys) {
  EXPECT_EQ(ParseError("a = 1\na = 2\n"), "t.toml:2:1: duplicate key 'a' (first defined at 1:5)");
  EXPECT_THAT(ParseError("a = 1\n\"a\" = 2\n"), StartsWith("t.toml:2:1: duplicate key 'a'"));
  EXPECT_THAT(ParseError("a.b = 1\na.b = 2\n"), StartsWith("t.toml:2:3: duplicate key 'a.b'"));
  EXPECT_THAT(ParseError("p = { x = 1, x = 2 }"), StartsWith("t.toml:1:14: duplicate key 'p.x'"));
  EXPECT_THAT(ParseError("[t]\nk = 1\n[u]\n[t.v]\nk = 1\n[t]\n"),
              StartsWith("t.toml:6:1: table 't' is already defined at 1:1"));
  EXPECT_THAT(ParseError("\"a b\" = 1\n'a b' = 2"),
              StartsWith("t.toml:2:1: duplicate key '\"a b\"'"));
}

TEST(TomlErrorTest, TableRedefinitions) {
  EXPECT_EQ(ParseError("[a]\nb = 1\n\n[a]\nc = 2\n"),
            "t.toml:4:1: table 'a' is already defined at 1:1");
  EXPECT_THAT(ParseError("[a.b]\n[a]\n[a]\n"), StartsWith("t.toml:3:1: table 'a' is already"));
  EXPECT_THAT(ParseError("[a]\nb.c = 1\n[a.b]\n"),
              StartsWith("t.toml:3:1: table 'a.b' is already defined by dotted keys at 2:1"));
  EXPECT_THAT(ParseError("a = { b = 1 }\n[a]\n"),
              StartsWith("t.toml:2:1: table 'a' is already defined as an inline table at 1:5"));
  EXPECT_THAT(ParseError("a = { b = 1 }\n[a.c]\n"),
              StartsWith("t.toml:2:2: cannot add a table to inline table 'a' defined at 1:5"));
  EXPECT_THAT(ParseError("a = {}\na.b = 1\n"),
              StartsWith("t.toml:2:1: cannot add keys to inline table 'a' defined at 1:5"));
  EXPECT_THAT(ParseError("a = { b.c = 1 }\n[a.b.d]\n"), StartsWith("t.toml:2:2: cannot add"));
  // Dotted keys cannot reach back into tables defined by headers.
  EXPECT_THAT(ParseError("[a.b]\nx = 1\n[a]\nb.y = 2\n"),
              StartsWith("t.toml:4:1: cannot add to table 'a.b' with dotted keys: it was created "
                         "by a [table] header at 1:1"));
  EXPECT_THAT(ParseError("[a.b.c]\n[a]\nb.c.d = 1\n"),
              StartsWith("t.toml:3:1: cannot add to table 'a.b' with dotted keys: it was created "
                         "by a [table] header at 1:4"));
}

TEST(TomlErrorTest, KeyIsBothValueAndTable) {
  EXPECT_EQ(ParseError("a = 1\n[a]\n"),
            "t.toml:2:1: key 'a' is already defined as integer at 1:5 and cannot also be a table");
  EXPECT_THAT(ParseError("a = 1\n[a.b]\n"),
              StartsWith("t.toml:2:2: key 'a' is already defined as integer at 1:5"));
  EXPECT_THAT(ParseError("a = \"x\"\na.b = 2\n"),
              StartsWith("t.toml:2:1: key 'a' is already defined as string at 1:5"));
  EXPECT_THAT(ParseError("a.b = 1\na.b.c = 2\n"),
              StartsWith("t.toml:2:3: key 'a.b' is already defined as integer at 1:7"));
  EXPECT_THAT(ParseError("[t]\na = [1]\n[t.a.b]\n"),
              StartsWith("t.toml:3:4: key 't.a' is an array defined at 2:5, not a table"));
  EXPECT_THAT(ParseError("[[a]]\n[a]\n"),
              StartsWith("t.toml:2:1: key 'a' is already an array of tables (defined at 1:1)"));
  EXPECT_THAT(ParseError("[a]\n[[a]]\n"),
              StartsWith("t.toml:2:1: key 'a' is already defined as table at 1:1 and cannot also "
                         "be an array of tables"));
  EXPECT_EQ(ParseError("a = []\n[[a]]\n"),
            "t.toml:2:1: cannot append to static array 'a' defined at 1:5");
  EXPECT_THAT(ParseError("[[a]]\nb = 1\na.c = 1\n[[a.b]]\n"),
              StartsWith("t.toml:4:1: key 'a.b' is already defined as integer at 2:5"));
}

TEST(TomlErrorTest, Strings) {
  EXPECT_EQ(ParseError("a = \"abc\n"),
            "t.toml:1:5: unterminated string (use \"\"\" for a multi-line string)");
  EXPECT_EQ(ParseError("a = \"abc"), "t.toml:1:5: unterminated string");
  EXPECT_THAT(ParseError("a = 'abc\nb = 1"), StartsWith("t.toml:1:5: unterminated string"));
  EXPECT_EQ(ParseError("x = 1\na = \"\"\"abc\n\n"), "t.toml:2:5: unterminated multi-line string");
  EXPECT_EQ(ParseError("a = '''abc''"), "t.toml:1:5: unterminated multi-line string");
  EXPECT_EQ(ParseError("a = \"\\x41\""), "t.toml:1:6: invalid escape sequence \\x");
  EXPECT_EQ(ParseError("a = \"ok \\e\""), "t.toml:1:9: invalid escape sequence \\e");
  EXPECT_THAT(ParseError("a = \"\\ \""), StartsWith("t.toml:1:6: invalid escape sequence"));
  EXPECT_EQ(ParseError("a = \"\\u12G4\""), "t.toml:1:6: \\u needs 4 hexadecimal digits");
  EXPECT_EQ(ParseError("a = \"\\U0001F60\""), "t.toml:1:6: \\U needs 8 hexadecimal digits");
  EXPECT_EQ(ParseError("a = \"\\uD800\""),
            "t.toml:1:6: escape \\uD800 is not a Unicode scalar value");
  EXPECT_EQ(ParseError("a = \"\\U00110000\""),
            "t.toml:1:6: escape \\U00110000 is not a Unicode scalar value");
  EXPECT_THAT(ParseError("a = \"\"\"x\\ y\"\"\""), StartsWith("t.toml:1:9: invalid escape"));
  // Too many closing quotes leave one behind.
  EXPECT_THAT(ParseError("a = \"\"\"x\"\"\"\"\"\"\n"),
              StartsWith("t.toml:1:14: expected a newline after the value, found '\"'"));
  EXPECT_THAT(ParseError("\"\"\"key\"\"\" = 1"),
              StartsWith("t.toml:1:1: a multi-line string cannot be a key"));
  EXPECT_THAT(ParseError("\"key\nx\" = 1"), StartsWith("t.toml:1:1: unterminated string"));
}

TEST(TomlErrorTest, ControlCharactersAndEncoding) {
  EXPECT_EQ(ParseError("a = \"x\x01y\""),
            "t.toml:1:7: control character U+0001 must be escaped in a string");
  EXPECT_EQ(ParseError("a = 'x\x7f'"),
            "t.toml:1:7: control character U+007F is not allowed in a literal string");
  EXPECT_THAT(ParseError("a = \"\"\"x\x1b\"\"\""), StartsWith("t.toml:1:9: control character"));
  EXPECT_THAT(ParseError("a = '''\n\x00'''"s), StartsWith("t.toml:2:1: control character U+0000"));
  EXPECT_EQ(ParseError("a = 1 # bell\x07\n"),
            "t.toml:1:13: control character U+0007 is not allowed in a comment");
  EXPECT_THAT(ParseError("# comment\rb = 1"),
              StartsWith("t.toml:1:10: control character U+000D is not allowed in a comment"));
  EXPECT_EQ(ParseError("a = 1\rb = 2"),
            "t.toml:1:6: expected a newline after the value, found U+000D");
  EXPECT_EQ(ParseError("\ra = 1"), "t.toml:1:1: a carriage return must be followed by a newline");
  EXPECT_EQ(ParseError("a = \"\"\"x\ry\"\"\""),
            "t.toml:1:9: control character U+000D must be escaped in a string");
  EXPECT_EQ(ParseError("a = 1\nb = \"caf\xC3\"\n"), "t.toml:2:9: invalid UTF-8");
  EXPECT_EQ(ParseError("a = \"\xC0\xAF\""), "t.toml:1:6: invalid UTF-8");      // overlong
  EXPECT_EQ(ParseError("é = \"\xED\xA0\x80\""), "t.toml:1:6: invalid UTF-8");  // surrogate
  EXPECT_EQ(ParseError("# \xFF\n"), "t.toml:1:3: invalid UTF-8");
  EXPECT_EQ(ParseError("a = 1\n\x00"s), "t.toml:2:1: expected a key, found U+0000");
}

TEST(TomlErrorTest, Numbers) {
  const auto number_error = [](std::string_view value) {
    return ParseError(absl::StrCat("key = ", AsAbsl(value), "\n"));
  };
  for (const char* bad :
       {"1__2", "_1", "1_",   "0x",    "0x_1", "0xG",  "0b102",  "0o8",      "1e",
        "1e+",  "1.", "1.e5", ".5",    "1._5", "1e_5", "+",      "-",        "1.2.3",
        "0X1F", "1f", "+-1",  "1e5.0", "++1",  "0b",   "1_000_", "infinity", "+nan1"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(number_error(bad), StartsWith("t.toml:1:7: invalid "));
  }
  EXPECT_EQ(number_error("012"), "t.toml:1:7: leading zeros are not allowed: \"012\"");
  EXPECT_EQ(number_error("-01.5"), "t.toml:1:7: leading zeros are not allowed: \"-01.5\"");
  EXPECT_EQ(number_error("0_0"), "t.toml:1:7: leading zeros are not allowed: \"0_0\"");
  EXPECT_EQ(number_error("+0x10"),
            "t.toml:1:7: a sign is not allowed on a hexadecimal, octal or binary integer: "
            "\"+0x10\"");
  EXPECT_EQ(number_error("9223372036854775808"),
            "t.toml:1:7: integer \"9223372036854775808\" does not fit in 64 bits");
  EXPECT_THAT(number_error("-9223372036854775809"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(number_error("99999999999999999999999"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(number_error("0x8000000000000000"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(number_error("0b" + std::string(64, '1')), HasSubstr("does not fit in 64 bits"));
  EXPECT_EQ(number_error("1e400"), "t.toml:1:7: float \"1e400\" is out of range for a double");
  EXPECT_THAT(number_error("-1.5e999"), HasSubstr("out of range"));
  EXPECT_THAT(ParseError("a = [1, 2_]"), StartsWith("t.toml:1:9: invalid number \"2_\""));
}

TEST(TomlErrorTest, DatesAreNotSupported) {
  EXPECT_EQ(ParseError("when = 1979-05-27\n"), "t.toml:1:8: dates and times are not supported");
  EXPECT_EQ(ParseError("x = 1\nwhen = 1979-05-27T07:32:00Z"),
            "t.toml:2:8: dates and times are not supported");
  EXPECT_EQ(ParseError("t = 07:32:00"), "t.toml:1:5: dates and times are not supported");
  EXPECT_EQ(ParseError("t = [1, 1979-05-27 ]"), "t.toml:1:9: dates and times are not supported");
}

TEST(TomlErrorTest, TrailingGarbageAndBadValues) {
  EXPECT_EQ(ParseError("a = 1 2"), "t.toml:1:7: expected a newline after the value, found '2'");
  EXPECT_EQ(ParseError("a = \"x\"y"), "t.toml:1:8: expected a newline after the value, found 'y'");
  EXPECT_EQ(ParseError("a = true false"),
            "t.toml:1:10: expected a newline after the value, found 'f'");
  EXPECT_EQ(ParseError("a = [1] ]"), "t.toml:1:9: expected a newline after the value, found ']'");
  EXPECT_EQ(ParseError("a = { b = 1 } c"),
            "t.toml:1:15: expected a newline after the value, found 'c'");
  EXPECT_EQ(ParseError("a = 1 b = 2"), "t.toml:1:7: expected a newline after the value, found 'b'");
  EXPECT_EQ(ParseError("[a] b = 1"),
            "t.toml:1:5: expected a newline after the table header, found 'b'");
  EXPECT_EQ(ParseError("[a]]"), "t.toml:1:4: expected a newline after the table header, found ']'");
  EXPECT_EQ(ParseError("a = hello"),
            "t.toml:1:5: invalid value \"hello\" (strings must be quoted; booleans are true and "
            "false)");
  EXPECT_THAT(ParseError("a = True"), StartsWith("t.toml:1:5: invalid value \"True\""));
  EXPECT_THAT(ParseError("a = truex"), StartsWith("t.toml:1:5: invalid value \"truex\""));
  EXPECT_THAT(ParseError("a = NaN"), StartsWith("t.toml:1:5: invalid value \"NaN\""));
  EXPECT_EQ(ParseError("a = \n"), "t.toml:1:5: expected a value, found a newline");
  EXPECT_EQ(ParseError("a ="), "t.toml:1:4: expected a value, found end of input");
  EXPECT_EQ(ParseError("a = # c"), "t.toml:1:5: expected a value, found '#'");
  EXPECT_EQ(ParseError("a = @"), "t.toml:1:5: expected a value, found '@'");
  EXPECT_EQ(ParseError("a 1"), "t.toml:1:3: expected '=' after key 'a', found '1'");
  EXPECT_EQ(ParseError("a.b\n"), "t.toml:1:4: expected '=' after key 'a.b', found a newline");
  EXPECT_EQ(ParseError("= 1"), "t.toml:1:1: expected a key, found '='");
  EXPECT_EQ(ParseError("a. = 1"), "t.toml:1:4: expected a key, found '='");
  EXPECT_EQ(ParseError("a..b = 1"), "t.toml:1:3: expected a key, found '.'");
  EXPECT_EQ(ParseError("a b = 1"), "t.toml:1:3: expected '=' after key 'a', found 'b'");
  EXPECT_EQ(ParseError("ключ = 1"), "t.toml:1:1: expected a key, found U+043A");
}

TEST(TomlErrorTest, Headers) {
  EXPECT_EQ(ParseError("[a"),
            "t.toml:1:3: expected ']' to close the table header, found end of "
            "input");
  EXPECT_EQ(ParseError("[[a]\n"),
            "t.toml:1:5: expected ']]' to close the array of tables header, found a newline");
  EXPECT_EQ(ParseError("[[a] ]\n"),
            "t.toml:1:5: expected ']]' to close the array of tables header, found ' '");
  EXPECT_EQ(ParseError("[]"), "t.toml:1:2: expected a key, found ']'");
  EXPECT_EQ(ParseError("[a.]"), "t.toml:1:4: expected a key, found ']'");
  EXPECT_EQ(ParseError("[ [a]]"), "t.toml:1:3: expected a key, found '['");
  EXPECT_EQ(ParseError("[a\nb]"),
            "t.toml:1:3: expected ']' to close the table header, found a "
            "newline");
}

TEST(TomlErrorTest, ArraysAndInlineTables) {
  EXPECT_EQ(ParseError("a = [1 2]"),
            "t.toml:1:8: expected ',' or ']' after an array element, found '2'");
  EXPECT_EQ(ParseError("a = [1,\n2,\n"), "t.toml:1:5: unterminated array");
  EXPECT_EQ(ParseError("a = [,]"), "t.toml:1:6: expected a value, found ','");
  EXPECT_EQ(ParseError("a = [1,,2]"), "t.toml:1:8: expected a value, found ','");
  EXPECT_EQ(ParseError("a = [1 # c\n, 2 # \x01\n]"),
            "t.toml:2:7: control character U+0001 is not allowed in a comment");
  EXPECT_EQ(ParseError("a = { b = 1,\n c = 2 }"),
            "t.toml:1:13: newlines are not allowed inside inline tables");
  EXPECT_EQ(ParseError("a = {\n}"), "t.toml:1:6: newlines are not allowed inside inline tables");
  EXPECT_EQ(ParseError("a = { b = 1\n}"),
            "t.toml:1:12: newlines are not allowed inside inline tables");
  EXPECT_EQ(ParseError("a = { b = 1, }"),
            "t.toml:1:14: trailing comma is not allowed in an inline table");
  EXPECT_EQ(ParseError("a = { b = 1 c = 2 }"),
            "t.toml:1:13: expected ',' or '}' after a value in an inline table, found 'c'");
  EXPECT_EQ(ParseError("a = { b = 1"), "t.toml:1:5: unterminated inline table");
  EXPECT_EQ(ParseError("a = { b = 1, c.d = 2, c = 3 }"),
            "t.toml:1:23: duplicate key 'a.c' (first defined at 1:14)");
  EXPECT_EQ(ParseError("a = { b }"), "t.toml:1:9: expected '=' after key 'b', found '}'");
}

// --- typed getters ---

TEST(TomlGetTest, TypedGettersReturnValuesDefaultsAndLocatedErrors) {
  const Value root = MustParse(
      "[server]\nport = 9000\nname = \"r\"\nratio = 4\nfrac = 0.5\n"
      "on = true\nbig = 9007199254740993\n");
  const Value& server = At(root, {"server"});
  EXPECT_EQ(*GetInt(server, "port"), 9000);
  EXPECT_EQ(*GetInt(server, "missing", 7), 7);
  EXPECT_EQ(*GetString(server, "name"), "r");
  EXPECT_EQ(*GetString(server, "missing", "dflt"), "dflt");
  EXPECT_DOUBLE_EQ(*GetDouble(server, "frac"), 0.5);
  EXPECT_DOUBLE_EQ(*GetDouble(server, "ratio"), 4.0);  // integers convert
  EXPECT_DOUBLE_EQ(*GetDouble(server, "missing", 1.5), 1.5);
  EXPECT_TRUE(*GetBool(server, "on"));
  EXPECT_FALSE(*GetBool(server, "missing", false));

  EXPECT_EQ(GetInt(server, "name").status().message(),
            "t.toml:3:8: name: expected integer, got string");
  EXPECT_EQ(GetInt(server, "name", 1).status().message(),
            "t.toml:3:8: name: expected integer, got string");
  EXPECT_EQ(GetString(server, "port").status().message(),
            "t.toml:2:8: port: expected string, got integer");
  EXPECT_EQ(GetBool(server, "frac").status().message(),
            "t.toml:5:8: frac: expected boolean, got float");
  EXPECT_EQ(GetDouble(server, "on").status().message(),
            "t.toml:6:6: on: expected float, got boolean");
  EXPECT_EQ(GetInt(server, "frac").status().message(),
            "t.toml:5:8: frac: expected integer, got float");
  EXPECT_EQ(GetDouble(server, "big").status().message(),
            "t.toml:7:7: big: integer 9007199254740993 is not exactly representable as a float");
  const Result<int64_t> missing = GetInt(server, "max_size");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "t.toml:1:1: missing key \"max_size\"");
  EXPECT_EQ(GetString(root, "x").status().message(), "t.toml:1:1: missing key \"x\"");
  EXPECT_EQ(GetInt(root, "server").status().message(),
            "t.toml:1:1: server: expected integer, got table");
}

TEST(TomlGetTest, CheckKeysNamesTheUnknownKey) {
  const Value root = MustParse("[t]\nname = \"a\"\nmax_sise = 3\n");
  const Value& t = At(root, {"t"});
  EXPECT_TRUE(CheckKeys(t, {"max_sise", "name", "other"}).ok());
  EXPECT_TRUE(CheckKeys(Value(), {}).ok());
  const Status s = CheckKeys(t, {"name", "max_size"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "t.toml:3:12: unknown key \"max_sise\" (expected one of: name, max_size)");
}

TEST(TomlGetTest, ValueBasics) {
  const Value v;
  EXPECT_TRUE(v.is_table());
  EXPECT_TRUE(v.as_table().empty());
  EXPECT_EQ(v.line(), 0);
  EXPECT_EQ(v.Location(), "");
  EXPECT_EQ(v.Error("oops").message(), "oops");
  EXPECT_EQ(TypeName(Type::kDouble), "float");
  EXPECT_EQ(TypeName(Type::kArray), "array");
  const Value root = MustParse("s = 's'");
  EXPECT_EQ(At(root, {"s"}).type(), Type::kString);
  EXPECT_EQ(At(root, {"s"}).source(), "t.toml");
  // Values are copyable and keep their lookups.
  const Value copy = root;
  EXPECT_EQ(At(copy, {"s"}).as_string(), "s");
  EXPECT_EQ(Parse("x = 1").value().Find("x")->Location(), "<input>:1:5");
}

TEST(TomlGetTest, WrongAccessorAborts) {
  const Value root = MustParse("n = 1");
  EXPECT_DEATH((void)At(root, {"n"}).as_string(),
               "as_string\\(\\) called on a value of type integer");
}

// --- files ---

TEST(TomlFileTest, ParseFileReadsAndNamesThePath) {
  char path[] = "/tmp/flywheel_toml_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "a = 1\nb = [\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const Result<Value> r = ParseFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), absl::StrCat(path, ":2:5: unterminated array"));

  FILE* f = std::fopen(path, "w");
  ASSERT_NE(f, nullptr);
  std::fputs("[t]\nk = 'v'\n", f);
  std::fclose(f);
  const Result<Value> ok = ParseFile(path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(At(*ok, {"t", "k"}).as_string(), "v");
  EXPECT_EQ(At(*ok, {"t", "k"}).Location(), absl::StrCat(path, ":2:5"));
  unlink(path);

  const Result<Value> missing = ParseFile("/nonexistent/dir/tables.toml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/dir/tables.toml"));
}

}  // namespace
}  // namespace flywheel::toml
