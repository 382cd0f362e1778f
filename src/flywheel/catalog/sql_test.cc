// Tests of the SqlDb interface, run against both backends: SQLite on a file
// in a temporary directory, and PostgreSQL on a throwaway server this binary
// starts itself (testing/pg_server.h), one fresh database per test. A server
// that cannot start fails the PostgreSQL tests; they are never skipped.
#include "flywheel/catalog/sql.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/catalog/testing/pg_server.h"

namespace flywheel::catalog {
namespace {

using internal_catalog::NumberPlaceholders;

#define ASSERT_OK(expr)                             \
  do {                                              \
    const ::absl::Status assert_ok_s_ = (expr);     \
    ASSERT_TRUE(assert_ok_s_.ok()) << assert_ok_s_; \
  } while (0)

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                    \
  auto FW_STATUS_CONCAT_(assert_r_, __LINE__) = (expr);    \
  ASSERT_TRUE(FW_STATUS_CONCAT_(assert_r_, __LINE__).ok()) \
      << FW_STATUS_CONCAT_(assert_r_, __LINE__).status();  \
  lhs = std::move(FW_STATUS_CONCAT_(assert_r_, __LINE__)).value()

// ---------------------------------------------------------------------------
// The PostgreSQL server shared by the whole binary (testing::SharedPgServer:
// started on first use, stopped when the process exits).

Result<testing::PgServer*> SharedPgServer() {
  std::string error;
  testing::PgServer* server = testing::SharedPgServer(&error);
  if (server == nullptr) return absl::UnavailableError("could not start PostgreSQL: " + error);
  return server;
}

// A fresh database name for the running test: its name made an identifier,
// after a counter so that the name is new even when truncated.
std::string FreshDatabaseName() {
  static int counter = 0;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat("t", ++counter, "_", info->test_suite_name(), "_", info->name());
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    } else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
      c = '_';
    }
  }
  if (name.size() > 63) name.resize(63);
  return name;
}

// A connection string for a fresh PostgreSQL database.
Result<std::string> FreshPgDatabase() {
  FW_ASSIGN_OR_RETURN(testing::PgServer * server, SharedPgServer());
  return server->CreateDatabase(FreshDatabaseName());
}

// ---------------------------------------------------------------------------
// NumberPlaceholders: `?` becomes $n except inside quotes and comments.

TEST(NumberPlaceholdersTest, NumbersBarePlaceholdersInOrder) {
  EXPECT_EQ(NumberPlaceholders("SELECT ?, ? FROM t WHERE a = ?"),
            "SELECT $1, $2 FROM t WHERE a = $3");
  EXPECT_EQ(NumberPlaceholders("INSERT INTO t VALUES (?,?,?,?,?,?,?,?,?,?,?)"),
            "INSERT INTO t VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)");
  EXPECT_EQ(NumberPlaceholders("SELECT 1"), "SELECT 1");
  EXPECT_EQ(NumberPlaceholders(""), "");
}

TEST(NumberPlaceholdersTest, LeavesStringLiteralsAlone) {
  EXPECT_EQ(NumberPlaceholders("SELECT '?', ?"), "SELECT '?', $1");
  EXPECT_EQ(NumberPlaceholders("SELECT 'it''s ?', ?"), "SELECT 'it''s ?', $1");
  EXPECT_EQ(NumberPlaceholders("SELECT '''?''' || ?"), "SELECT '''?''' || $1");
  EXPECT_EQ(NumberPlaceholders("SELECT '', ?"), "SELECT '', $1");
  // A backslash is an ordinary character in a standard string...
  EXPECT_EQ(NumberPlaceholders(R"(SELECT 'a\', ?)"), R"(SELECT 'a\', $1)");
  // ...and quotes the next one in an escape string.
  EXPECT_EQ(NumberPlaceholders(R"(SELECT E'a\'?', ?)"), R"(SELECT E'a\'?', $1)");
  EXPECT_EQ(NumberPlaceholders(R"(SELECT nameE'?', ?)"), R"(SELECT nameE'?', $1)");
  // An unterminated literal runs to the end; the server reports it.
  EXPECT_EQ(NumberPlaceholders("SELECT ?, 'oops ?"), "SELECT $1, 'oops ?");
}

TEST(NumberPlaceholdersTest, LeavesQuotedIdentifiersAlone) {
  EXPECT_EQ(NumberPlaceholders(R"(SELECT "a?b" FROM t WHERE "c""?" = ?)"),
            R"(SELECT "a?b" FROM t WHERE "c""?" = $1)");
  EXPECT_EQ(NumberPlaceholders(R"(SELECT "it's?", ?)"), R"(SELECT "it's?", $1)");
}

TEST(NumberPlaceholdersTest, LeavesCommentsAlone) {
  EXPECT_EQ(NumberPlaceholders("SELECT ? -- why? isn't it ?\n, ?"),
            "SELECT $1 -- why? isn't it ?\n, $2");
  EXPECT_EQ(NumberPlaceholders("SELECT ? -- trailing ?"), "SELECT $1 -- trailing ?");
  EXPECT_EQ(NumberPlaceholders("SELECT /* ? 'x */ ?"), "SELECT /* ? 'x */ $1");
  // PostgreSQL's block comments nest.
  EXPECT_EQ(NumberPlaceholders("SELECT /* a /* ? */ ? */ ?"), "SELECT /* a /* ? */ ? */ $1");
  // A single dash or slash is an operator.
  EXPECT_EQ(NumberPlaceholders("SELECT ? - ?, ? / ?"), "SELECT $1 - $2, $3 / $4");
}

TEST(NumberPlaceholdersTest, LeavesDollarQuotesAndPositionalParametersAlone) {
  EXPECT_EQ(NumberPlaceholders("DO $$ SELECT '?' $$; SELECT ?"), "DO $$ SELECT '?' $$; SELECT $1");
  EXPECT_EQ(NumberPlaceholders("SELECT $fn$ ? $x$ ? $fn$, ?"), "SELECT $fn$ ? $x$ ? $fn$, $1");
  // `$` inside an identifier and before a digit opens no dollar quote.
  EXPECT_EQ(NumberPlaceholders("SELECT a$b, ?, a$b"), "SELECT a$b, $1, a$b");
  EXPECT_EQ(NumberPlaceholders("SELECT $1 || '$', ?"), "SELECT $1 || '$', $1");
}

// ---------------------------------------------------------------------------
// Both backends.

class SqlDbTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      char dir[] = "/tmp/flywheel-sql-test-XXXXXX";
      ASSERT_NE(mkdtemp(dir), nullptr) << "mkdtemp: " << std::strerror(errno);
      dir_ = dir;
      target_ = dir_ + "/catalog.db";
    } else {
      ASSERT_OK_AND_ASSIGN(target_, FreshPgDatabase());
    }
    ASSERT_OK_AND_ASSIGN(db_, Open());
  }

  void TearDown() override {
    db_.reset();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  // Another connection to the same database.
  Result<std::unique_ptr<SqlDb>> Open() {
    return GetParam() == "sqlite" ? OpenSqlite(target_) : OpenPostgres(target_);
  }

  // Rows in `table`, or -1 (and a test failure) on error.
  int64_t Count(const std::string& table) {
    Result<SqlRows> rows = db_->Query(absl::StrCat("SELECT count(*) FROM ", table));
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok() || rows->size() != 1) return -1;
    return (*rows)[0].Int(0);
  }

  std::string dir_;
  std::string target_;
  std::unique_ptr<SqlDb> db_;
};

INSTANTIATE_TEST_SUITE_P(Backends, SqlDbTest, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(SqlDbTest, ReportsItsDialect) { EXPECT_EQ(db_->dialect(), GetParam()); }

TEST_P(SqlDbTest, RoundTripsEveryValueTypeAsBoundParameters) {
  ASSERT_OK(db_->ExecScript(
      "CREATE TABLE v (id INTEGER PRIMARY KEY, i BIGINT, d DOUBLE PRECISION, s TEXT)"));
  const std::vector<int64_t> ints = {0, -1, 42, INT64_MAX, INT64_MIN};
  // Doubles SQLite's 15-digit text conversion also gives back exactly.
  const std::vector<double> doubles = {0.0, 0.1, -2.5, 3.0, 1e-300, 1.5e300};
  const std::vector<std::string> texts = {
      "",
      "it's",
      "\"quoted\"",
      "semi; DROP TABLE v; --",
      "what? ? $1 :name @p",
      "/* not a comment */ -- nor this",
      R"(back\slash \' \")",
      "unicode: h\u00e9llo \u4e16\u754c \U0001F680",
      "line\nbreak\ttab",
  };
  int64_t id = 0;
  for (int64_t i : ints) ASSERT_OK(db_->Exec("INSERT INTO v (id, i) VALUES (?, ?)", {++id, i}));
  for (double d : doubles) ASSERT_OK(db_->Exec("INSERT INTO v (id, d) VALUES (?, ?)", {++id, d}));
  for (const std::string& s : texts) {
    ASSERT_OK(db_->Exec("INSERT INTO v (id, s) VALUES (?, ?)", {++id, s}));
  }
  ASSERT_OK(db_->Exec("INSERT INTO v (id, i, d, s) VALUES (?, ?, ?, ?)",
                      {++id, std::monostate{}, std::monostate{}, std::monostate{}}));

  ASSERT_OK_AND_ASSIGN(SqlRows rows, db_->Query("SELECT id, i, d, s FROM v ORDER BY id"));
  ASSERT_EQ(rows.size(), ints.size() + doubles.size() + texts.size() + 1);
  size_t r = 0;
  for (int64_t i : ints) {
    ASSERT_FALSE(rows[r].IsNull(1));
    EXPECT_EQ(rows[r].Int(1), i);
    EXPECT_EQ(rows[r].Text(1), std::to_string(i));
    EXPECT_TRUE(rows[r].IsNull(2));
    EXPECT_TRUE(rows[r].IsNull(3));
    ++r;
  }
  for (double d : doubles) {
    ASSERT_FALSE(rows[r].IsNull(2));
    EXPECT_EQ(std::strtod(rows[r].Text(2).c_str(), nullptr), d) << rows[r].Text(2);
    ++r;
  }
  for (const std::string& s : texts) {
    ASSERT_FALSE(rows[r].IsNull(3)) << s;
    EXPECT_EQ(rows[r].Text(3), s);
    ++r;
  }
  EXPECT_TRUE(rows[r].IsNull(1));
  EXPECT_TRUE(rows[r].IsNull(2));
  EXPECT_TRUE(rows[r].IsNull(3));
  EXPECT_EQ(rows[r].Text(3), "");
  EXPECT_EQ(rows[r].Int(1), 0);

  // Text is stored as characters: the server counts é and 🚀 as one each.
  ASSERT_OK_AND_ASSIGN(SqlRows len,
                       db_->Query("SELECT length(?)", {std::string("h\u00e9\U0001F680")}));
  EXPECT_EQ(len.at(0).Int(0), 3);
  // Values are compared as values: the quote, `?` and `;` did nothing.
  ASSERT_OK_AND_ASSIGN(SqlRows found, db_->Query("SELECT id FROM v WHERE s = ?", {texts[3]}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].Int(0), static_cast<int64_t>(ints.size() + doubles.size() + 4));
  ASSERT_OK_AND_ASSIGN(SqlRows nulls, db_->Query("SELECT count(*) FROM v WHERE s IS NULL"));
  EXPECT_EQ(nulls.at(0).Int(0), static_cast<int64_t>(ints.size() + doubles.size() + 1));
}

TEST_P(SqlDbTest, PlaceholderInLiteralIdentifierOrCommentIsNotAParameter) {
  ASSERT_OK(db_->ExecScript(R"(CREATE TABLE q ("a?b" TEXT))"));
  ASSERT_OK(db_->Exec(R"(INSERT INTO q ("a?b") /* ? */ VALUES (?))", {std::string("x")}));
  ASSERT_OK_AND_ASSIGN(
      SqlRows rows,
      db_->Query("SELECT \"a?b\", '?', 'it''s ?' FROM q -- one parameter? yes\nWHERE \"a?b\" = ?",
                 {std::string("x")}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].Text(0), "x");
  EXPECT_EQ(rows[0].Text(1), "?");
  EXPECT_EQ(rows[0].Text(2), "it's ?");
}

TEST_P(SqlDbTest, UniqueViolationIsAlreadyExists) {
  ASSERT_OK(db_->ExecScript("CREATE TABLE u (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)"));
  ASSERT_OK(db_->Exec("INSERT INTO u (id, name) VALUES (?, ?)", {int64_t{1}, std::string("a")}));

  Status dup_key =
      db_->Exec("INSERT INTO u (id, name) VALUES (?, ?)", {int64_t{1}, std::string("b")});
  EXPECT_EQ(dup_key.code(), absl::StatusCode::kAlreadyExists) << dup_key;
  EXPECT_TRUE(absl::StartsWith(dup_key.message(), absl::StrCat(GetParam(), ": "))) << dup_key;

  Status dup_name =
      db_->Exec("INSERT INTO u (id, name) VALUES (?, ?)", {int64_t{2}, std::string("a")});
  EXPECT_EQ(dup_name.code(), absl::StatusCode::kAlreadyExists) << dup_name;

  // Other constraints are not AlreadyExists.
  Status null_name =
      db_->Exec("INSERT INTO u (id, name) VALUES (?, ?)", {int64_t{3}, std::monostate{}});
  EXPECT_EQ(null_name.code(), absl::StatusCode::kFailedPrecondition) << null_name;
  EXPECT_EQ(Count("u"), 1);
}

TEST_P(SqlDbTest, InTransactionCommitsWhenFnSucceeds) {
  ASSERT_OK(db_->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY)"));
  ASSERT_OK(db_->InTransaction(TxnMode::kWrite, [&]() -> Status {
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{1}}));
    return db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{2}});
  }));
  // Committed: another connection sees both rows.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlDb> other, Open());
  ASSERT_OK_AND_ASSIGN(SqlRows rows, other->Query("SELECT id FROM t ORDER BY id"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].Int(0), 1);
  EXPECT_EQ(rows[1].Int(0), 2);

  ASSERT_OK(db_->InTransaction(TxnMode::kRead, [&]() -> Status {
    FW_ASSIGN_OR_RETURN(SqlRows in_txn, db_->Query("SELECT count(*) FROM t"));
    if (in_txn.at(0).Int(0) != 2) return absl::InternalError("expected 2 rows");
    return absl::OkStatus();
  }));
}

TEST_P(SqlDbTest, InTransactionRollsBackWhenFnFails) {
  ASSERT_OK(db_->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY)"));
  int calls = 0;
  Status s = db_->InTransaction(TxnMode::kWrite, [&]() -> Status {
    ++calls;
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{1}}));
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{2}}));
    return absl::NotFoundError("dataset ds/x is gone");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "dataset ds/x is gone");
  EXPECT_EQ(calls, 1);  // Only conflicts are retried.
  EXPECT_EQ(Count("t"), 0);
}

TEST_P(SqlDbTest, FailedStatementRollsBackTheTransactionAndTheConnectionRecovers) {
  ASSERT_OK(db_->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY)"));
  Status s = db_->InTransaction(TxnMode::kExclusive, [&]() -> Status {
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{1}}));
    return db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{1}});
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_EQ(Count("t"), 0);
  // The next transaction on the same connection works.
  ASSERT_OK(db_->InTransaction(
      TxnMode::kWrite, [&] { return db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{1}}); }));
  EXPECT_EQ(Count("t"), 1);
}

TEST_P(SqlDbTest, InTransactionIsNotReentrant) {
  ASSERT_OK(db_->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY)"));
  bool inner_ran = false;
  Status s = db_->InTransaction(TxnMode::kWrite, [&]() -> Status {
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO t (id) VALUES (?)", {int64_t{1}}));
    return db_->InTransaction(TxnMode::kWrite, [&] {
      inner_ran = true;
      return absl::OkStatus();
    });
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE(inner_ran);
  EXPECT_EQ(Count("t"), 0);
}

TEST_P(SqlDbTest, ConcurrentWritersEachCommitEveryRow) {
  ASSERT_OK(db_->ExecScript(
      "CREATE TABLE w (writer BIGINT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (writer, seq))"));
  constexpr int kWriters = 4;
  constexpr int kRowsEach = 200;
  std::vector<std::unique_ptr<SqlDb>> conns;
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlDb> conn, Open());
    conns.push_back(std::move(conn));
  }
  std::vector<Status> results(kWriters);
  std::latch start(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      SqlDb& db = *conns[w];
      for (int i = 0; i < kRowsEach && results[w].ok(); ++i) {
        results[w] = db.InTransaction(TxnMode::kWrite, [&] {
          return db.Exec("INSERT INTO w (writer, seq) VALUES (?, ?)", {int64_t{w}, int64_t{i}});
        });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < kWriters; ++w)
    EXPECT_TRUE(results[w].ok()) << "writer " << w << ": " << results[w];
  EXPECT_EQ(Count("w"), kWriters * kRowsEach);
  ASSERT_OK_AND_ASSIGN(SqlRows per_writer,
                       db_->Query("SELECT writer, count(*), min(seq), max(seq) FROM w "
                                  "GROUP BY writer ORDER BY writer"));
  ASSERT_EQ(per_writer.size(), static_cast<size_t>(kWriters));
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_EQ(per_writer[w].Int(0), w);
    EXPECT_EQ(per_writer[w].Int(1), kRowsEach);
    EXPECT_EQ(per_writer[w].Int(2), 0);
    EXPECT_EQ(per_writer[w].Int(3), kRowsEach - 1);
  }
}

// A read-modify-write that loses updates unless kExclusive transactions
// really run one at a time (PostgreSQL's READ COMMITTED alone would let two
// read the same value).
TEST_P(SqlDbTest, ExclusiveTransactionsSerializeReadModifyWrite) {
  ASSERT_OK(db_->ExecScript("CREATE TABLE counter (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)"));
  ASSERT_OK(db_->Exec("INSERT INTO counter (id, n) VALUES (1, 0)"));
  constexpr int kThreads = 4;
  constexpr int kIncrements = 100;
  std::vector<std::unique_ptr<SqlDb>> conns;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlDb> conn, Open());
    conns.push_back(std::move(conn));
  }
  std::vector<Status> results(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      SqlDb& db = *conns[t];
      for (int i = 0; i < kIncrements && results[t].ok(); ++i) {
        results[t] = db.InTransaction(TxnMode::kExclusive, [&]() -> Status {
          FW_ASSIGN_OR_RETURN(SqlRows rows, db.Query("SELECT n FROM counter WHERE id = 1"));
          const int64_t n = rows.at(0).Int(0);
          // Widen the window between read and write.
          std::this_thread::yield();
          return db.Exec("UPDATE counter SET n = ? WHERE id = 1", {n + 1});
        });
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_TRUE(results[t].ok()) << "thread " << t << ": " << results[t];
  ASSERT_OK_AND_ASSIGN(SqlRows rows, db_->Query("SELECT n FROM counter WHERE id = 1"));
  EXPECT_EQ(rows.at(0).Int(0), kThreads * kIncrements);
}

TEST_P(SqlDbTest, InsertReturningGivesGeneratedKeys) {
  ASSERT_OK(db_->ExecScript(
      GetParam() == "sqlite"
          ? "CREATE TABLE r (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"
          : "CREATE TABLE r (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
            "name TEXT NOT NULL)"));
  std::vector<int64_t> ids;
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_OK_AND_ASSIGN(
        SqlRows rows,
        db_->Query("INSERT INTO r (name) VALUES (?) RETURNING id, name", {std::string(name)}));
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].Text(1), name);
    ids.push_back(rows[0].Int(0));
  }
  EXPECT_GT(ids[0], 0);
  EXPECT_LT(ids[0], ids[1]);
  EXPECT_LT(ids[1], ids[2]);
  ASSERT_OK_AND_ASSIGN(SqlRows b, db_->Query("SELECT name FROM r WHERE id = ?", {ids[1]}));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].Text(0), "b");
}

TEST_P(SqlDbTest, BadSqlIsAnErrorNamingTheBackend) {
  const std::string prefix = absl::StrCat(GetParam(), ": ");
  Result<SqlRows> syntax = db_->Query("SELEC 1");
  ASSERT_FALSE(syntax.ok());
  EXPECT_TRUE(absl::StartsWith(syntax.status().message(), prefix)) << syntax.status();
  EXPECT_TRUE(absl::StrContains(syntax.status().message(), "SELEC")) << syntax.status();

  Result<SqlRows> missing = db_->Query("SELECT * FROM no_such_table");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StartsWith(missing.status().message(), prefix)) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "no_such_table")) << missing.status();

  Status script = db_->ExecScript("CREATE TABLE ok1 (x INTEGER); CREATE TABLE (;");
  ASSERT_FALSE(script.ok());
  EXPECT_TRUE(absl::StartsWith(script.message(), prefix)) << script;

  // The connection is still usable.
  ASSERT_OK_AND_ASSIGN(SqlRows one, db_->Query("SELECT 1 + ?", {int64_t{1}}));
  EXPECT_EQ(one.at(0).Int(0), 2);
}

TEST_P(SqlDbTest, ExecScriptRunsEveryStatement) {
  ASSERT_OK(db_->ExecScript(R"(
      -- a migration
      CREATE TABLE a (x INTEGER);
      CREATE TABLE b (y TEXT);
      INSERT INTO a (x) VALUES (1), (2);
      INSERT INTO b (y) VALUES ('semi;colon?');
  )"));
  EXPECT_EQ(Count("a"), 2);
  ASSERT_OK_AND_ASSIGN(SqlRows b, db_->Query("SELECT y FROM b"));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].Text(0), "semi;colon?");
}

// ---------------------------------------------------------------------------
// PostgreSQL only.

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(conninfo_, FreshPgDatabase());
    ASSERT_OK_AND_ASSIGN(db_, OpenPostgres(conninfo_));
  }
  std::string conninfo_;
  std::unique_ptr<SqlDb> db_;
};

constexpr const char* kRaiseSerializationFailure =
    "DO $$ BEGIN RAISE EXCEPTION 'could not serialize (test)' USING ERRCODE = '40001'; END $$";

TEST_F(PostgresTest, SerializationFailureIsAbortedAndRetried) {
  Status direct = db_->Exec(kRaiseSerializationFailure);
  EXPECT_EQ(direct.code(), absl::StatusCode::kAborted) << direct;
  EXPECT_TRUE(absl::StrContains(direct.message(), "could not serialize (test)")) << direct;

  ASSERT_OK(db_->ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY)"));
  int attempts = 0;
  ASSERT_OK(db_->InTransaction(TxnMode::kWrite, [&]() -> Status {
    ++attempts;
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO t (id) VALUES (1)"));
    if (attempts < 3) return db_->Exec(kRaiseSerializationFailure);
    return absl::OkStatus();
  }));
  EXPECT_EQ(attempts, 3);
  ASSERT_OK_AND_ASSIGN(SqlRows rows, db_->Query("SELECT count(*) FROM t"));
  EXPECT_EQ(rows.at(0).Int(0), 1);  // The failed attempts were rolled back.
}

// Two transactions that lock two rows in opposite orders: the server kills
// one with deadlock_detected (after deadlock_timeout, 1 s), InTransaction
// retries it, and both updates land.
TEST_F(PostgresTest, DeadlockIsAbortedAndRetried) {
  ASSERT_OK(
      db_->ExecScript("CREATE TABLE d (id INTEGER PRIMARY KEY, n BIGINT NOT NULL);"
                      "INSERT INTO d VALUES (1, 0), (2, 0);"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlDb> a, OpenPostgres(conninfo_));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlDb> b, OpenPostgres(conninfo_));
  std::promise<void> a_locked, b_locked;
  std::shared_future<void> a_locked_f = a_locked.get_future().share();
  std::shared_future<void> b_locked_f = b_locked.get_future().share();
  int attempts_a = 0, attempts_b = 0;
  // Locks `first`, waits (first attempt only) until the other side holds
  // its row, then locks `second`.
  auto txn = [](SqlDb& db, int first, int second, int& attempts, std::promise<void>& mine,
                std::shared_future<void> theirs) -> Status {
    return db.InTransaction(TxnMode::kWrite, [&]() -> Status {
      ++attempts;
      FW_RETURN_IF_ERROR(db.Exec("UPDATE d SET n = n + 1 WHERE id = ?", {int64_t{first}}));
      if (attempts == 1) {
        mine.set_value();
        if (theirs.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
          return absl::DeadlineExceededError("the other transaction never locked its row");
        }
      }
      return db.Exec("UPDATE d SET n = n + 1 WHERE id = ?", {int64_t{second}});
    });
  };
  Status status_a, status_b;
  std::thread ta([&] { status_a = txn(*a, 1, 2, attempts_a, a_locked, b_locked_f); });
  std::thread tb([&] { status_b = txn(*b, 2, 1, attempts_b, b_locked, a_locked_f); });
  ta.join();
  tb.join();
  ASSERT_OK(status_a);
  ASSERT_OK(status_b);
  // At least one was chosen as the victim and ran again. (A retry can win
  // the race for its first row against the woken survivor and deadlock
  // once more, so not exactly one.)
  EXPECT_GE(attempts_a + attempts_b, 3);
  ASSERT_OK_AND_ASSIGN(SqlRows rows, db_->Query("SELECT n FROM d ORDER BY id"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].Int(0), 2);
  EXPECT_EQ(rows[1].Int(0), 2);
}

TEST_F(PostgresTest, NoticesAndWarningsAreNotPrinted) {
  ::testing::internal::CaptureStderr();
  Status s = db_->Exec("DO $$ BEGIN RAISE NOTICE 'a notice'; RAISE WARNING 'a warning'; END $$");
  const std::string printed = ::testing::internal::GetCapturedStderr();
  ASSERT_OK(s);
  EXPECT_EQ(printed, "");
}

TEST_F(PostgresTest, ServerListensOnlyOnItsUnixSocket) {
  ASSERT_OK_AND_ASSIGN(SqlRows rows, db_->Query("SHOW listen_addresses"));
  EXPECT_EQ(rows.at(0).Text(0), "");
  ASSERT_OK_AND_ASSIGN(testing::PgServer * server, SharedPgServer());
  ASSERT_OK_AND_ASSIGN(SqlRows dirs, db_->Query("SHOW unix_socket_directories"));
  EXPECT_EQ(dirs.at(0).Text(0), server->socket_dir());
}

TEST_F(PostgresTest, CreateDatabaseValidatesNamesAndIsIdempotent) {
  ASSERT_OK_AND_ASSIGN(testing::PgServer * server, SharedPgServer());
  for (const char* bad : {"", "Upper", "semi;colon", "quo\"te", "dash-ed"}) {
    Result<std::string> r = server->CreateDatabase(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  ASSERT_OK_AND_ASSIGN(std::string first, server->CreateDatabase("twice"));
  ASSERT_OK_AND_ASSIGN(std::string second, server->CreateDatabase("twice"));
  EXPECT_EQ(first, second);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlDb> db, OpenPostgres(second));
  ASSERT_OK_AND_ASSIGN(SqlRows rows, db->Query("SELECT current_database()"));
  EXPECT_EQ(rows.at(0).Text(0), "twice");
}

TEST(PostgresConnectTest, ConnectionFailureIsUnavailableWithoutThePassword) {
  for (const std::string conninfo :
       {"host=/nonexistent/dir port=5432 dbname=x user=u password=hunter2 connect_timeout=5",
        "postgresql://u:hunter2@/x?host=/nonexistent/dir&connect_timeout=5"}) {
    Result<std::unique_ptr<SqlDb>> db = OpenPostgres(conninfo);
    ASSERT_FALSE(db.ok()) << conninfo;
    EXPECT_EQ(db.status().code(), absl::StatusCode::kUnavailable) << db.status();
    const std::string message(db.status().message());
    EXPECT_TRUE(absl::StartsWith(message, "postgresql: ")) << message;
    EXPECT_TRUE(absl::StrContains(message, "/nonexistent/dir")) << message;
    EXPECT_FALSE(absl::StrContains(message, "hunter2")) << message;
  }
}

}  // namespace
}  // namespace flywheel::catalog
