// Catalog governance and audit against both backends: SQLite in a temporary
// catalog root and a throwaway PostgreSQL server the test starts itself
// (testing/pg_server.h). Several Catalog objects opened on one spec with
// different principals act as different users; "admin" creates the catalog.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/recorder.h"
#include "flywheel/catalog/sql.h"
#include "flywheel/catalog/testing/pg_server.h"
#include "gtest/gtest.h"

namespace flywheel::catalog {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string TempDir(const std::string& tag) {
  std::string dir = testing::MakeTempDir("governance-" + tag);
  EXPECT_FALSE(dir.empty());
  return dir;
}

inline const absl::Status& StatusOf(const Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const Result<T>& r) {
  return r.status();
}

#define EXPECT_OK(expr)                                           \
  do {                                                            \
    const auto& fw_r_ = (expr);                                   \
    EXPECT_TRUE(StatusOf(fw_r_).ok()) << #expr << ": " << StatusOf(fw_r_); \
  } while (0)
#define ASSERT_OK(expr)                                           \
  do {                                                            \
    const auto& fw_r_ = (expr);                                   \
    ASSERT_TRUE(StatusOf(fw_r_).ok()) << #expr << ": " << StatusOf(fw_r_); \
  } while (0)
#define EXPECT_CODE(expr, want)                                   \
  do {                                                            \
    const auto& fw_r_ = (expr);                                   \
    EXPECT_EQ(StatusOf(fw_r_).code(), absl::StatusCode::want) << #expr << ": " << StatusOf(fw_r_); \
  } while (0)

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

std::string Describe(const GrantInfo& g) {
  return g.principal + " " + g.object + " " + PrivilegeName(g.privilege) + " by " + g.granted_by;
}
std::vector<std::string> Describe(const std::vector<GrantInfo>& gs) {
  std::vector<std::string> out;
  for (const auto& g : gs) out.push_back(Describe(g));
  return out;
}

// Whether `p` (absolute, lexically normalised) lies strictly inside `dir`.
bool Inside(const fs::path& dir, const std::string& p) {
  fs::path path(p);
  if (!path.is_absolute()) return false;
  std::string rel = path.lexically_normal().lexically_relative(dir).generic_string();
  return !rel.empty() && rel != "." && rel.rfind("..", 0) != 0;
}

class GovernanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = TempDir(GetParam());
    warehouse_ = dir_ + "/warehouse";
    fs::create_directories(warehouse_);
    auto spec = testing::CatalogSpecForTest(GetParam(), dir_, "gov");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    admin_ = Open("admin");
    ASSERT_NE(admin_, nullptr);
  }
  void TearDown() override {
    admin_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<Catalog> Open(const std::string& principal) {
    CatalogOptions o;
    o.principal = principal;
    o.warehouse = warehouse_;
    o.openlineage_file = "-";
    // Both backends keep an anchor file (a directory catalog would default
    // to <root>/audit.head; PostgreSQL has no root).
    o.audit_anchor = dir_ + "/audit.head";
    auto c = Catalog::Open(spec_, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  Result<DatasetInfo> Register(Catalog& c, const std::string& name) {
    return c.RegisterDataset(name, warehouse_ + "/" + name);
  }

  // HasPrivilege, failing the test on an error.
  bool Has(const std::string& who, const std::string& object, Privilege p) {
    auto r = admin_->HasPrivilege(who, object, p);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  }

  std::vector<AuditEvent> Events(Catalog& c) {
    auto r = c.AuditEvents(0, 100000);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<AuditEvent>{};
  }

  AuditVerifyResult Verify(Catalog& c) {
    auto r = c.VerifyAudit();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : AuditVerifyResult{0, false, -1, "VerifyAudit failed", ""};
  }

  // `n` events from the admin, each different.
  void MakeChain(int n) {
    for (int i = 1; i <= n; ++i) {
      ASSERT_OK(admin_->Audit("event", "ns/t" + std::to_string(i), json{{"i", i}}.dump()));
    }
    AuditVerifyResult v = Verify(*admin_);
    ASSERT_TRUE(v.ok) << v.problem;
    ASSERT_EQ(v.events, n);
  }

  std::string dir_, warehouse_, spec_;
  std::unique_ptr<Catalog> admin_;
};

// ---- 1. admins and denials --------------------------------------------------

TEST_P(GovernanceTest, CreatorIsAdminAndOthersAreDeniedWithoutGrants) {
  auto alice = Open("alice");
  ASSERT_NE(alice, nullptr);
  ASSERT_OK(Register(*admin_, "ns/t"));

  auto me = admin_->GetPrincipal("admin");
  ASSERT_OK(me);
  EXPECT_TRUE(me->admin);
  auto her = alice->GetPrincipal("alice");
  ASSERT_OK(her);
  EXPECT_FALSE(her->admin);
  EXPECT_TRUE(her->clearances.empty());

  for (Privilege p : {Privilege::kRead, Privilege::kWrite, Privilege::kAdmin}) {
    EXPECT_TRUE(Has("admin", "ns/t", p)) << PrivilegeName(p);
    EXPECT_TRUE(Has("admin", "*", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("alice", "ns/t", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("alice", "ns", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("alice", "*", p)) << PrivilegeName(p);
    EXPECT_OK(admin_->Authorize("ns/t", p, "check"));

    Status s = alice->Authorize("ns/t", p, "check");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_TRUE(Contains(s.message(), "'alice'")) << s;
    EXPECT_TRUE(Contains(s.message(), "'ns/t'")) << s;
    EXPECT_TRUE(Contains(s.message(), PrivilegeName(p))) << s;
  }
  Status s = alice->Authorize("*", Privilege::kRead, "list");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Contains(s.message(), "alice")) << s;
  EXPECT_TRUE(Contains(s.message(), "catalog")) << s;
  // A catalog reopened by someone else keeps its one admin.
  auto bob = Open("bob");
  ASSERT_NE(bob, nullptr);
  EXPECT_FALSE(bob->GetPrincipal("bob")->admin);
  EXPECT_TRUE(bob->GetPrincipal("admin")->admin);
}

// ---- 2. inheritance and ordering -------------------------------------------

TEST_P(GovernanceTest, PrivilegesAreInheritedFromCatalogAndNamespace) {
  for (const char* ds : {"ns/t", "ns/u", "other/t", "third/x"}) ASSERT_OK(Register(*admin_, ds));

  // READ on "*": READ on every dataset and namespace, nothing more.
  ASSERT_OK(admin_->Grant("reader", "*", Privilege::kRead));
  for (const char* obj : {"ns/t", "ns/u", "other/t", "third/x", "ns", "*", "unregistered/ds"}) {
    EXPECT_TRUE(Has("reader", obj, Privilege::kRead)) << obj;
    EXPECT_FALSE(Has("reader", obj, Privilege::kWrite)) << obj;
    EXPECT_FALSE(Has("reader", obj, Privilege::kAdmin)) << obj;
  }

  // WRITE on "ns": WRITE and READ on ns/*, not on other namespaces.
  ASSERT_OK(admin_->Grant("writer", "ns", Privilege::kWrite));
  for (const char* obj : {"ns/t", "ns/u", "ns"}) {
    EXPECT_TRUE(Has("writer", obj, Privilege::kWrite)) << obj;
    EXPECT_TRUE(Has("writer", obj, Privilege::kRead)) << obj;
    EXPECT_FALSE(Has("writer", obj, Privilege::kAdmin)) << obj;
  }
  for (const char* obj : {"other/t", "other", "*", "third/x", "nsx/t"}) {
    for (Privilege p : {Privilege::kRead, Privilege::kWrite, Privilege::kAdmin})
      EXPECT_FALSE(Has("writer", obj, p)) << obj << " " << PrivilegeName(p);
  }

  // ADMIN on one dataset: all three on it, nothing elsewhere (not upwards).
  ASSERT_OK(admin_->Grant("owner", "ns/t", Privilege::kAdmin));
  for (Privilege p : {Privilege::kRead, Privilege::kWrite, Privilege::kAdmin}) {
    EXPECT_TRUE(Has("owner", "ns/t", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("owner", "ns/u", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("owner", "ns", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("owner", "*", p)) << PrivilegeName(p);
    EXPECT_FALSE(Has("owner", "other/t", p)) << PrivilegeName(p);
  }
  // Authorize agrees with HasPrivilege.
  auto writer = Open("writer");
  ASSERT_NE(writer, nullptr);
  EXPECT_OK(writer->Authorize("ns/u", Privilege::kWrite, "commit"));
  EXPECT_CODE(writer->Authorize("other/t", Privilege::kRead, "read"), kPermissionDenied);
  EXPECT_CODE(writer->Authorize("ns/u", Privilege::kAdmin, "grant"), kPermissionDenied);
}

TEST_P(GovernanceTest, WriteImpliesReadButReadDoesNotImplyWrite) {
  ASSERT_OK(Register(*admin_, "ns/t"));
  ASSERT_OK(admin_->Grant("r", "ns/t", Privilege::kRead));
  ASSERT_OK(admin_->Grant("w", "ns/t", Privilege::kWrite));
  EXPECT_TRUE(Has("r", "ns/t", Privilege::kRead));
  EXPECT_FALSE(Has("r", "ns/t", Privilege::kWrite));
  EXPECT_FALSE(Has("r", "ns/t", Privilege::kAdmin));
  EXPECT_TRUE(Has("w", "ns/t", Privilege::kRead));
  EXPECT_TRUE(Has("w", "ns/t", Privilege::kWrite));
  EXPECT_FALSE(Has("w", "ns/t", Privilege::kAdmin));
  // The strongest of several grants counts (READ on "*" beside WRITE on the dataset).
  ASSERT_OK(admin_->Grant("w", "*", Privilege::kRead));
  EXPECT_TRUE(Has("w", "ns/t", Privilege::kWrite));
  EXPECT_FALSE(Has("w", "other/t", Privilege::kWrite));

  EXPECT_EQ(*ParsePrivilege("read"), Privilege::kRead);
  EXPECT_EQ(*ParsePrivilege("Write"), Privilege::kWrite);
  EXPECT_EQ(*ParsePrivilege("ADMIN"), Privilege::kAdmin);
  EXPECT_CODE(ParsePrivilege("owner"), kInvalidArgument);
  EXPECT_STREQ(PrivilegeName(Privilege::kWrite), "WRITE");
}

// ---- 3. owners, grant, revoke ----------------------------------------------

TEST_P(GovernanceTest, RegistrantOwnsItsDatasetAndMayGrantOnIt) {
  auto alice = Open("alice");
  auto bob = Open("bob");
  ASSERT_NE(alice, nullptr);
  ASSERT_NE(bob, nullptr);
  ASSERT_OK(Register(*admin_, "ns/seed"));  // "ns" belongs to admin
  ASSERT_OK(admin_->Grant("alice", "ns", Privilege::kWrite));

  ASSERT_OK(Register(*alice, "ns/new"));
  auto owned = admin_->Grants("ns/new");
  ASSERT_OK(owned);
  ASSERT_EQ(owned->size(), 1u) << ::testing::PrintToString(Describe(*owned));
  EXPECT_EQ(Describe((*owned)[0]), "alice ns/new ADMIN by owner");
  EXPECT_GT((*owned)[0].granted_ms, 0);
  // The namespace existed: its grants are unchanged.
  EXPECT_EQ(Describe(*admin_->Grants("ns")),
            (std::vector<std::string>{"admin ns ADMIN by owner", "alice ns WRITE by admin"}));
  EXPECT_TRUE(Has("alice", "ns/new", Privilege::kAdmin));
  EXPECT_FALSE(Has("alice", "ns/seed", Privilege::kAdmin));
  EXPECT_FALSE(Has("alice", "ns", Privilege::kAdmin));

  // The owner grants READ on her dataset; bob then reads it.
  EXPECT_FALSE(Has("bob", "ns/new", Privilege::kRead));
  ASSERT_OK(alice->Grant("bob", "ns/new", Privilege::kRead));
  EXPECT_TRUE(Has("bob", "ns/new", Privilege::kRead));
  EXPECT_FALSE(Has("bob", "ns/new", Privilege::kWrite));
  EXPECT_EQ(Describe(*admin_->Grants("ns/new")),
            (std::vector<std::string>{"alice ns/new ADMIN by owner", "bob ns/new READ by alice"}));
  // ... but not on the namespace she only writes to, nor on another dataset.
  EXPECT_CODE(alice->Grant("bob", "ns", Privilege::kRead), kPermissionDenied);
  EXPECT_CODE(alice->Grant("bob", "ns/seed", Privilege::kRead), kPermissionDenied);

  // Without ADMIN: refused, and nothing is stored.
  Status denied = bob->Grant("carol", "ns/new", Privilege::kRead);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_TRUE(Contains(denied.message(), "bob")) << denied;
  EXPECT_TRUE(Contains(denied.message(), "ADMIN")) << denied;
  EXPECT_FALSE(Has("carol", "ns/new", Privilege::kRead));
  EXPECT_CODE(bob->Revoke("bob", "ns/new", Privilege::kRead), kPermissionDenied);
  EXPECT_TRUE(Has("bob", "ns/new", Privilege::kRead));
  EXPECT_EQ(Describe(*admin_->Grants("ns/new")),
            (std::vector<std::string>{"alice ns/new ADMIN by owner", "bob ns/new READ by alice"}));

  // Revoke; revoking again, or a grant never made, is NotFound.
  ASSERT_OK(alice->Revoke("bob", "ns/new", Privilege::kRead));
  EXPECT_FALSE(Has("bob", "ns/new", Privilege::kRead));
  Status again = alice->Revoke("bob", "ns/new", Privilege::kRead);
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound) << again;
  EXPECT_CODE(alice->Revoke("bob", "ns/new", Privilege::kWrite), kNotFound);
  EXPECT_CODE(admin_->Revoke("nobody", "ns", Privilege::kRead), kNotFound);

  // Everything stored, by object, principal, privilege.
  EXPECT_EQ(Describe(*admin_->Grants()), (std::vector<std::string>{
                                              "admin ns ADMIN by owner",
                                              "alice ns WRITE by admin",
                                              "alice ns/new ADMIN by owner",
                                              "admin ns/seed ADMIN by owner",
                                          }));
}

TEST_P(GovernanceTest, RegistrantOfANewNamespaceOwnsTheNamespace) {
  auto alice = Open("alice");
  auto bob = Open("bob");
  // Opening a namespace takes WRITE on the catalog.
  EXPECT_CODE(Register(*alice, "fresh/t"), kPermissionDenied);
  ASSERT_OK(admin_->Grant("alice", "*", Privilege::kWrite));
  ASSERT_OK(Register(*alice, "fresh/t"));
  EXPECT_EQ(Describe(*admin_->Grants("fresh")), (std::vector<std::string>{"alice fresh ADMIN by owner"}));
  // Naming a table in someone's namespace takes WRITE on it.
  EXPECT_CODE(Register(*bob, "fresh/u"), kPermissionDenied);
  ASSERT_OK(alice->Grant("bob", "fresh", Privilege::kWrite));
  ASSERT_OK(Register(*bob, "fresh/u"));
  EXPECT_EQ(Describe(*admin_->Grants("fresh")),
            (std::vector<std::string>{"alice fresh ADMIN by owner", "bob fresh WRITE by alice"}));
  EXPECT_EQ(Describe(*admin_->Grants("fresh/u")), (std::vector<std::string>{"bob fresh/u ADMIN by owner"}));
  EXPECT_TRUE(Has("alice", "fresh/u", Privilege::kAdmin));  // via the namespace
  EXPECT_FALSE(Has("bob", "fresh/t", Privilege::kAdmin));   // WRITE on the namespace, not ADMIN
  // Registering the same name and URI again grants nothing new.
  ASSERT_OK(Register(*bob, "fresh/t"));
  EXPECT_FALSE(Has("bob", "fresh/t", Privilege::kAdmin));
  EXPECT_EQ(Describe(*admin_->Grants("fresh/t")), (std::vector<std::string>{"alice fresh/t ADMIN by owner"}));
}

// A namespace may be named "*", which is also how grants name the catalog:
// whoever brings namespace "*" into the catalog must not become its admin.
TEST_P(GovernanceTest, RegisteringNamespaceStarDoesNotGrantTheCatalog) {
  ASSERT_OK(Register(*admin_, "secret/t"));
  auto mallory = Open("mallory");
  ASSERT_NE(mallory, nullptr);
  auto reg = Register(*mallory, "*/x");  // refusing the name is fine too
  (void)reg;
  EXPECT_FALSE(Has("mallory", "secret/t", Privilege::kRead))
      << "regression: registering dataset '*/x' gave mallory privileges on every dataset "
         "(catalog.cc RegisterDataset grants ADMIN on the new namespace '*', which grants read as the catalog); "
         "grants: "
      << ::testing::PrintToString(Describe(*admin_->Grants()));
  EXPECT_FALSE(Has("mallory", "*", Privilege::kAdmin)) << "regression: mallory holds ADMIN on the catalog";
  Status s = mallory->SetAdmin("mallory", true);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied)
      << "regression: a principal without grants made itself a catalog admin after registering '*/x': " << s;
  EXPECT_FALSE(admin_->GetPrincipal("mallory")->admin) << "regression: mallory is a catalog admin";
}

// The same through a table path: reading a table that lies in the
// warehouse's "*" directory registers it to the reader.
TEST_P(GovernanceTest, ReadingATableInNamespaceStarDoesNotGrantTheCatalog) {
  ASSERT_OK(Register(*admin_, "secret/t"));
  auto eve = Open("eve");
  ASSERT_NE(eve, nullptr);
  const fs::path wh = fs::weakly_canonical(warehouse_);
  fs::create_directories(wh / "*" / "t" / "_versions");
  auto r = AuthorizeTable(eve.get(), (wh / "*" / "t").string(), Privilege::kRead, "open");
  (void)r;
  EXPECT_FALSE(Has("eve", "secret/t", Privilege::kAdmin))
      << "regression: reading the table at <warehouse>/*/t made eve ADMIN of every dataset (recorder.cc AuthorizeTable -> "
         "Catalog::ResolveTable -> RegisterDataset grants ADMIN on namespace '*', the catalog); grants: "
      << ::testing::PrintToString(Describe(*admin_->Grants()));
}

// ---- 4. admins and clearances -----------------------------------------------

TEST_P(GovernanceTest, OnlyAdminsSetAdminsAndClearances) {
  auto alice = Open("alice");
  ASSERT_NE(alice, nullptr);
  ASSERT_OK(admin_->Grant("alice", "*", Privilege::kWrite));
  ASSERT_OK(Register(*alice, "hers/t"));  // ADMIN on a dataset and a namespace is not enough

  EXPECT_CODE(alice->SetAdmin("alice", true), kPermissionDenied);
  EXPECT_CODE(alice->SetClearances("alice", {"pii"}), kPermissionDenied);
  EXPECT_CODE(alice->SetAdmin("admin", false), kPermissionDenied);
  EXPECT_FALSE(admin_->GetPrincipal("alice")->admin);
  EXPECT_TRUE(admin_->GetPrincipal("alice")->clearances.empty());
  EXPECT_TRUE(admin_->GetPrincipal("admin")->admin);

  ASSERT_OK(admin_->SetClearances("alice", {"pii", "finance", "pii"}));
  EXPECT_EQ(admin_->GetPrincipal("alice")->clearances, (std::vector<std::string>{"finance", "pii"}));
  EXPECT_CODE(admin_->SetClearances("alice", {"bad tag"}), kInvalidArgument);
  EXPECT_CODE(admin_->SetClearances("alice", {"a,b"}), kInvalidArgument);
  EXPECT_EQ(admin_->GetPrincipal("alice")->clearances, (std::vector<std::string>{"finance", "pii"}));

  ASSERT_OK(admin_->SetAdmin("alice", true));
  EXPECT_TRUE(alice->GetPrincipal("alice")->admin);
  EXPECT_TRUE(Has("alice", "secret/anything", Privilege::kAdmin));
  ASSERT_OK(alice->SetClearances("bob", {"pii"}));
  EXPECT_EQ(admin_->GetPrincipal("bob")->clearances, (std::vector<std::string>{"pii"}));
  // SetClearances replaces; an empty list clears.
  ASSERT_OK(alice->SetClearances("bob", {}));
  EXPECT_TRUE(admin_->GetPrincipal("bob")->clearances.empty());
  // Demoting keeps the clearances; the demoted principal is denied again.
  ASSERT_OK(admin_->SetAdmin("alice", false));
  EXPECT_FALSE(admin_->GetPrincipal("alice")->admin);
  EXPECT_EQ(admin_->GetPrincipal("alice")->clearances, (std::vector<std::string>{"finance", "pii"}));
  EXPECT_CODE(alice->SetAdmin("alice", true), kPermissionDenied);
  EXPECT_FALSE(admin_->GetPrincipal("alice")->admin);
}

// ---- 5. column tags and read policies ----------------------------------------

TEST_P(GovernanceTest, TaggedColumnsAreMaskedForUnclearedReaders) {
  auto reader = Open("reader");
  auto other = Open("other");
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_OK(Register(*admin_, "ns/users"));
  ASSERT_OK(Register(*admin_, "ns/orders"));
  ASSERT_OK(admin_->Grant("reader", "ns", Privilege::kRead));
  ASSERT_OK(admin_->Grant("other", "ns", Privilege::kRead));

  // Tagging needs ADMIN on the dataset (and the dataset).
  EXPECT_CODE(reader->TagColumn("ns/users", "email", "pii"), kPermissionDenied);
  EXPECT_CODE(admin_->TagColumn("ns/missing", "email", "pii"), kNotFound);
  EXPECT_CODE(admin_->TagColumn("ns/users", "email", "not a tag"), kInvalidArgument);
  EXPECT_CODE(admin_->TagColumn("ns/users", "", "pii"), kInvalidArgument);
  EXPECT_TRUE(admin_->ColumnTags("ns/users")->empty());
  // Untagged: readable as is.
  EXPECT_TRUE(reader->ReadPolicyFor("ns/users")->columns.empty());

  ASSERT_OK(admin_->TagColumn("ns/users", "email", "pii"));
  ASSERT_OK(admin_->TagColumn("ns/users", "email", "contact"));
  ASSERT_OK(admin_->TagColumn("ns/users", "salary", "finance"));
  ASSERT_OK(admin_->TagColumn("ns/orders", "card", "pii"));
  EXPECT_EQ(*admin_->ColumnTags("ns/users"),
            (std::map<std::string, std::vector<std::string>>{{"email", {"contact", "pii"}}, {"salary", {"finance"}}}));

  auto p1 = reader->ReadPolicyFor("ns/users");
  ASSERT_OK(p1);
  EXPECT_EQ(p1->mode, ReadPolicy::Mode::kHash);
  ASSERT_EQ(p1->columns.size(), 2u);
  EXPECT_EQ(p1->columns[0].name, "email");
  EXPECT_EQ(p1->columns[0].tags, (std::vector<std::string>{"contact", "pii"}));
  EXPECT_EQ(p1->columns[1].name, "salary");
  EXPECT_EQ(p1->columns[1].tags, (std::vector<std::string>{"finance"}));
  EXPECT_FALSE(p1->salt.empty());
  // The salt stays: across calls, catalogs and principals; datasets differ.
  EXPECT_EQ(reader->ReadPolicyFor("ns/users")->salt, p1->salt);
  auto p_other = other->ReadPolicyFor("ns/users");
  ASSERT_OK(p_other);
  EXPECT_EQ(p_other->salt, p1->salt);
  auto reopened = Open("reader");
  EXPECT_EQ(reopened->ReadPolicyFor("ns/users")->salt, p1->salt);
  auto orders = reader->ReadPolicyFor("ns/orders");
  ASSERT_OK(orders);
  EXPECT_FALSE(orders->salt.empty());
  EXPECT_NE(orders->salt, p1->salt);

  // Cleared for some tags: only the uncleared ones remain.
  ASSERT_OK(admin_->SetClearances("reader", {"pii"}));
  auto p2 = reader->ReadPolicyFor("ns/users");
  ASSERT_OK(p2);
  ASSERT_EQ(p2->columns.size(), 2u);
  EXPECT_EQ(p2->columns[0].name, "email");
  EXPECT_EQ(p2->columns[0].tags, (std::vector<std::string>{"contact"}));
  EXPECT_TRUE(reader->ReadPolicyFor("ns/orders")->columns.empty());
  // Cleared for all: nothing masked.
  ASSERT_OK(admin_->SetClearances("reader", {"pii", "contact", "finance"}));
  EXPECT_TRUE(reader->ReadPolicyFor("ns/users")->columns.empty());

  // The mask mode per dataset (ADMIN on it); the salt survives mode changes.
  EXPECT_CODE(other->SetMaskPolicy("ns/users", ReadPolicy::Mode::kNull), kPermissionDenied);
  EXPECT_EQ(other->ReadPolicyFor("ns/users")->mode, ReadPolicy::Mode::kHash);
  ASSERT_OK(admin_->SetMaskPolicy("ns/users", ReadPolicy::Mode::kNull));
  auto pn = other->ReadPolicyFor("ns/users");
  EXPECT_EQ(pn->mode, ReadPolicy::Mode::kNull);
  EXPECT_EQ(pn->columns.size(), 2u);
  ASSERT_OK(admin_->SetMaskPolicy("ns/users", ReadPolicy::Mode::kRefuse));
  EXPECT_EQ(other->ReadPolicyFor("ns/users")->mode, ReadPolicy::Mode::kRefuse);
  ASSERT_OK(admin_->SetMaskPolicy("ns/users", ReadPolicy::Mode::kHash));
  auto ph = other->ReadPolicyFor("ns/users");
  EXPECT_EQ(ph->mode, ReadPolicy::Mode::kHash);
  EXPECT_EQ(ph->salt, p1->salt);
  EXPECT_EQ(ph->columns.size(), 2u);
  // Another dataset's mode is its own.
  EXPECT_EQ(other->ReadPolicyFor("ns/orders")->mode, ReadPolicy::Mode::kHash);

  // Admins see everything; untagging unmasks.
  auto pa = admin_->ReadPolicyFor("ns/users");
  ASSERT_OK(pa);
  EXPECT_TRUE(pa->columns.empty());
  ASSERT_OK(admin_->UntagColumn("ns/users", "salary", "finance"));
  ASSERT_EQ(other->ReadPolicyFor("ns/users")->columns.size(), 1u);
  EXPECT_EQ(other->ReadPolicyFor("ns/users")->columns[0].name, "email");

  EXPECT_STREQ(MaskModeName(ReadPolicy::Mode::kRefuse), "refuse");
  EXPECT_EQ(*ParseMaskMode("null"), ReadPolicy::Mode::kNull);
  EXPECT_CODE(ParseMaskMode("drop"), kInvalidArgument);
}

// ---- 6. the audit chain -------------------------------------------------------

TEST_P(GovernanceTest, AuthorizeGrantAndRevokeAreAuditedInAGaplessChain) {
  auto alice = Open("alice");
  ASSERT_NE(alice, nullptr);
  ASSERT_OK(Register(*admin_, "ns/t"));
  AuditVerifyResult empty = Verify(*admin_);
  EXPECT_TRUE(empty.ok);
  EXPECT_EQ(empty.events, 1);  // the registration
  const std::vector<AuditEvent> first = Events(*admin_);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].action, "register");
  EXPECT_EQ(empty.head_hash, first[0].hash);

  EXPECT_CODE(alice->Authorize("ns/t", Privilege::kRead, "read"), kPermissionDenied);  // 1
  ASSERT_OK(admin_->Grant("alice", "ns/t", Privilege::kRead));                         // 2
  ASSERT_OK(alice->Authorize("ns/t", Privilege::kRead, "read", R"({"version":7})"));   // 3
  EXPECT_CODE(alice->Grant("bob", "ns/t", Privilege::kRead), kPermissionDenied);       // 4
  ASSERT_OK(admin_->Revoke("alice", "ns/t", Privilege::kRead));                        // 5
  EXPECT_CODE(alice->Revoke("admin", "ns/t", Privilege::kAdmin), kPermissionDenied);   // 6
  ASSERT_OK(alice->Audit("custom", "run-123", R"({"k":1})"));                           // 7
  ASSERT_OK(admin_->SetAdmin("carol", true));                                           // 8

  std::vector<AuditEvent> ev = Events(*admin_);
  ASSERT_EQ(ev.size(), 9u);
  const std::string registration_hash = ev[0].hash;
  ev.erase(ev.begin());
  struct Want {
    const char* principal;
    const char* action;
    const char* object;
    bool denied;
  };
  const Want want[] = {{"alice", "read", "ns/t", true},      {"admin", "grant", "ns/t", false},
                       {"alice", "read", "ns/t", false},     {"alice", "grant", "ns/t", true},
                       {"admin", "revoke", "ns/t", false},   {"alice", "revoke", "ns/t", true},
                       {"alice", "custom", "run-123", false}, {"admin", "make_admin", "*", false}};
  for (size_t i = 0; i < ev.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(ev[i].seq, static_cast<int64_t>(i + 2));
    EXPECT_EQ(ev[i].principal, want[i].principal);
    EXPECT_EQ(ev[i].action, want[i].action);
    EXPECT_EQ(ev[i].object, want[i].object);
    EXPECT_GT(ev[i].time_ms, 0);
    json d = json::parse(ev[i].detail_json, nullptr, false);
    ASSERT_TRUE(d.is_object()) << ev[i].detail_json;
    EXPECT_EQ(d.value("denied", false), want[i].denied) << ev[i].detail_json;
    EXPECT_EQ(ev[i].prev_hash, i == 0 ? registration_hash : ev[i - 1].hash);
    EXPECT_EQ(ev[i].hash.size(), 64u);
    EXPECT_EQ(ev[i].hash.find_first_not_of("0123456789abcdef"), std::string::npos);
  }
  auto d = [&](int i) { return json::parse(ev[i].detail_json); };
  EXPECT_EQ(d(0)["privilege"], "READ");
  EXPECT_EQ(d(1)["privilege"], "ADMIN");
  EXPECT_EQ(d(1)["to"], "alice");
  EXPECT_EQ(d(1)["grant"], "READ");
  EXPECT_EQ(d(2)["version"], 7);
  EXPECT_EQ(d(3)["to"], "bob");
  EXPECT_EQ(d(4)["from"], "alice");
  EXPECT_EQ(d(4)["revoke"], "READ");
  EXPECT_EQ(d(6), json({{"k", 1}}));
  EXPECT_EQ(d(7)["principal"], "carol");

  // Paging.
  auto page = admin_->AuditEvents(3, 2);
  ASSERT_OK(page);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].seq, 4);
  EXPECT_EQ((*page)[1].seq, 5);

  AuditVerifyResult v = Verify(*alice);
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.events, 9);
  EXPECT_EQ(v.first_bad_seq, 0);
  EXPECT_EQ(v.head_hash, ev.back().hash);
}

TEST_P(GovernanceTest, VerifyAuditFindsAnEditedEvent) {
  MakeChain(5);
  ASSERT_OK(admin_->db()->Exec("UPDATE audit SET detail = ? WHERE seq = 3", {std::string(R"({"i":99})")}));
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 3) << v.problem;
  EXPECT_TRUE(Contains(v.problem, "edited")) << v.problem;
}

TEST_P(GovernanceTest, VerifyAuditFindsAMissingEvent) {
  MakeChain(5);
  ASSERT_OK(admin_->db()->Exec("DELETE FROM audit WHERE seq = 3"));
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 3) << v.problem;
  EXPECT_TRUE(Contains(v.problem, "missing")) << v.problem;
  // Removing the first event is found too.
  ASSERT_OK(admin_->db()->Exec("DELETE FROM audit WHERE seq = 1"));
  v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 1) << v.problem;
}

TEST_P(GovernanceTest, VerifyAuditFindsReorderedEvents) {
  MakeChain(6);
  auto swap = [&](int64_t a, int64_t b) {
    std::vector<AuditEvent> ev = Events(*admin_);
    const AuditEvent ea = ev.at(a - 1), eb = ev.at(b - 1);
    for (auto [seq, e] : {std::pair{a, eb}, std::pair{b, ea}}) {
      ASSERT_OK(admin_->db()->Exec(
          "UPDATE audit SET time_ms = ?, principal = ?, action = ?, object = ?, detail = ?, prev_hash = ?, hash = ? "
          "WHERE seq = ?",
          {e.time_ms, e.principal, e.action, e.object, e.detail_json, e.prev_hash, e.hash, seq}));
    }
  };
  swap(2, 4);
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 2) << v.problem;
  EXPECT_TRUE(Contains(v.problem, "does not follow")) << v.problem;
  swap(2, 4);  // back: the chain is whole again
  v = Verify(*admin_);
  EXPECT_TRUE(v.ok) << v.problem;
  swap(5, 6);  // adjacent
  v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 5) << v.problem;
}

TEST_P(GovernanceTest, VerifyAuditFindsAnAppendedForgery) {
  MakeChain(4);
  const std::string head = Verify(*admin_).head_hash;
  ASSERT_OK(admin_->db()->Exec(
      "INSERT INTO audit (seq, time_ms, principal, action, object, detail, prev_hash, hash) "
      "VALUES (5, 1, 'admin', 'grant', '*', '{}', ?, ?)",
      {std::string(64, '0'), std::string(64, 'a')}));
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 5) << v.problem;
  // With the right prev_hash but a made-up hash: still found.
  ASSERT_OK(admin_->db()->Exec("UPDATE audit SET prev_hash = ? WHERE seq = 5", {head}));
  v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, 5) << v.problem;
  EXPECT_TRUE(Contains(v.problem, "edited")) << v.problem;
}

TEST_P(GovernanceTest, TheAnchorShowsEventsCutFromTheEnd) {
  MakeChain(5);
  AuditVerifyResult before = Verify(*admin_);
  ASSERT_TRUE(before.ok) << before.problem;
  EXPECT_TRUE(before.anchored);
  // Cutting the newest event leaves a valid, shorter chain.
  ASSERT_OK(admin_->db()->Exec("DELETE FROM audit WHERE seq = (SELECT max(seq) FROM audit)"));
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, before.events) << v.problem;
  EXPECT_TRUE(Contains(v.problem, "removed from the end")) << v.problem;
  // Rewriting the whole chain consistently (here: re-appending a different
  // last event) does not fool it either: the anchored event differs.
  ASSERT_OK(admin_->Audit("forged", "*"));
  v = Verify(*admin_);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.first_bad_seq, before.events) << v.problem;
}

// ---- 7. concurrent writers ------------------------------------------------------

TEST_P(GovernanceTest, ConcurrentProcessesKeepTheAuditChainGapless) {
  constexpr int kProcs = 4, kEvents = 50;
  ASSERT_OK(Register(*admin_, "ns/t"));
  ASSERT_OK(admin_->Authorize("ns/t", Privilege::kRead, "read"));
  ASSERT_OK(admin_->Grant("worker0", "ns/t", Privilege::kRead));
  const int64_t before = static_cast<int64_t>(Events(*admin_).size());
  ASSERT_EQ(before, 3);  // register, read, grant

  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child opens its own catalog and never returns into the test
      // (_exit: no destructors, the parent's server and connections stay).
      auto c = Open("worker" + std::to_string(p));
      int ok = c != nullptr;
      for (int i = 0; ok && i < kEvents; ++i) {
        ok = c->Audit("append", "ns/t", json{{"worker", p}, {"i", i}}.dump()).ok();
      }
      ::_exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::vector<AuditEvent> ev = Events(*admin_);
  ASSERT_EQ(static_cast<int64_t>(ev.size()), before + kProcs * kEvents);
  std::map<std::string, int> per_worker;
  for (size_t i = 0; i < ev.size(); ++i) {
    ASSERT_EQ(ev[i].seq, static_cast<int64_t>(i + 1));
    if (i >= static_cast<size_t>(before)) {
      ++per_worker[ev[i].principal];
      EXPECT_EQ(ev[i].prev_hash, ev[i - 1].hash);
    }
  }
  for (int p = 0; p < kProcs; ++p) EXPECT_EQ(per_worker["worker" + std::to_string(p)], kEvents) << p;
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.events, before + kProcs * kEvents);
  EXPECT_EQ(v.head_hash, ev.back().hash);
}

// ---- 8. table paths ------------------------------------------------------------

TEST_P(GovernanceTest, AuthorizeTableChecksTheNamespaceForNewTables) {
  auto bob = Open("bob");
  ASSERT_NE(bob, nullptr);
  ASSERT_OK(Register(*admin_, "ns/seed"));
  const fs::path wh = fs::weakly_canonical(warehouse_);
  ASSERT_EQ(bob->warehouse(), wh.string());

  auto denied = AuthorizeTable(bob.get(), "ns/t", Privilege::kWrite, "create", /*for_create=*/true);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  EXPECT_TRUE(Contains(denied.status().message(), "bob")) << denied.status();
  // By path into the warehouse: the same check.
  auto denied_path =
      AuthorizeTable(bob.get(), (wh / "ns" / "t").string(), Privilege::kWrite, "create", /*for_create=*/true);
  EXPECT_EQ(denied_path.status().code(), absl::StatusCode::kPermissionDenied) << denied_path.status();
  auto denied_dots = AuthorizeTable(bob.get(), (wh / "mine" / ".." / "ns" / "t").string(), Privilege::kWrite,
                                    "create", /*for_create=*/true);
  EXPECT_EQ(denied_dots.status().code(), absl::StatusCode::kPermissionDenied) << denied_dots.status();

  ASSERT_OK(admin_->Grant("bob", "ns", Privilege::kWrite));
  auto allowed = AuthorizeTable(bob.get(), "ns/t", Privilege::kWrite, "create", /*for_create=*/true);
  ASSERT_OK(allowed);
  EXPECT_EQ(*allowed, (wh / "ns" / "t").string());
  EXPECT_CODE(bob->GetDataset("ns/t"), kNotFound);  // not registered until it exists
  // WRITE on "ns" is not WRITE elsewhere.
  EXPECT_CODE(AuthorizeTable(bob.get(), "other/t", Privilege::kWrite, "create", true), kPermissionDenied);

  std::vector<AuditEvent> ev = Events(*admin_);
  ASSERT_GE(ev.size(), 3u);
  const AuditEvent& last = ev.back();
  EXPECT_EQ(last.principal, "bob");
  EXPECT_EQ(last.action, "create");
  EXPECT_EQ(last.object, "other/t");
  const AuditEvent& ok_event = ev[ev.size() - 2];
  EXPECT_EQ(ok_event.object, "ns/t");
  EXPECT_EQ(json::parse(ok_event.detail_json).value("denied", false), false);
  EXPECT_EQ(json::parse(ok_event.detail_json)["privilege"], "WRITE");
}

TEST_P(GovernanceTest, AuthorizeTableReadOfAMissingPathRegistersNothing) {
  auto bob = Open("bob");
  ASSERT_NE(bob, nullptr);
  const fs::path wh = fs::weakly_canonical(warehouse_);
  auto before = admin_->ListDatasets();
  ASSERT_OK(before);
  const size_t datasets = before->size();
  const size_t events = Events(*admin_).size();

  const std::string missing = (wh / "ns" / "missing").string();
  auto r = AuthorizeTable(bob.get(), missing, Privilege::kRead, "open");
  ASSERT_OK(r);
  EXPECT_EQ(*r, missing);
  EXPECT_EQ(admin_->ListDatasets()->size(), datasets);
  EXPECT_EQ(Events(*admin_).size(), events);
  EXPECT_CODE(admin_->GetDataset("ns/missing"), kNotFound);
  EXPECT_TRUE(admin_->Grants()->empty());
}

TEST_P(GovernanceTest, AuthorizeTableReadOfADirectoryWithoutATableRegistersNothing) {
  auto bob = Open("bob");
  ASSERT_NE(bob, nullptr);
  const fs::path wh = fs::weakly_canonical(warehouse_);
  auto before = admin_->ListDatasets();
  ASSERT_OK(before);
  const size_t datasets = before->size();
  // A directory that holds no table (no _versions, no _latest) is no table.
  const fs::path empty = wh / "ns" / "empty";
  fs::create_directories(empty);
  auto e = AuthorizeTable(bob.get(), empty.string(), Privilege::kRead, "open");
  if (e.ok()) {
    EXPECT_EQ(*e, empty.string());
  }
  auto listed = admin_->ListDatasets();
  ASSERT_OK(listed);
  std::vector<std::string> names;
  for (const auto& d : *listed) names.push_back(d.name);
  EXPECT_EQ(names.size(), datasets)
      << "regression: reading a directory that holds no table registered it as a dataset owned by the reader "
         "(recorder.cc AuthorizeTable: the !for_create branch tests only that the path exists, not the "
         "table's _versions/_latest): "
      << ::testing::PrintToString(names) << " grants " << ::testing::PrintToString(Describe(*admin_->Grants()));
}

TEST_P(GovernanceTest, AuthorizeTableOfAnExistingTableChecksItsDataset) {
  auto bob = Open("bob");
  ASSERT_NE(bob, nullptr);
  const fs::path wh = fs::weakly_canonical(warehouse_);
  fs::create_directories(wh / "ns" / "t" / "_versions");
  ASSERT_OK(Register(*admin_, "ns/t"));
  EXPECT_CODE(AuthorizeTable(bob.get(), "ns/t", Privilege::kRead, "open"), kPermissionDenied);
  EXPECT_CODE(AuthorizeTable(bob.get(), (wh / "ns" / "t").string(), Privilege::kRead, "open"), kPermissionDenied);
  EXPECT_CODE(AuthorizeTable(bob.get(), "ns/t", Privilege::kWrite, "commit", true), kPermissionDenied);
  ASSERT_OK(admin_->Grant("bob", "ns/t", Privilege::kRead));
  auto r = AuthorizeTable(bob.get(), "ns/t", Privilege::kRead, "open");
  ASSERT_OK(r);
  EXPECT_EQ(*r, (wh / "ns" / "t").string());
  EXPECT_CODE(AuthorizeTable(bob.get(), "ns/t", Privilege::kWrite, "commit"), kPermissionDenied);
  // Without a catalog: unchecked, unchanged.
  EXPECT_EQ(*AuthorizeTable(nullptr, "../anything", Privilege::kAdmin, "x", true), "../anything");
}

TEST_P(GovernanceTest, AuthorizeTableNeverPlacesAMaliciousNameOutsideTheWarehouse) {
  auto mallory = Open("mallory");
  ASSERT_NE(mallory, nullptr);
  ASSERT_OK(Register(*admin_, "ns/seed"));
  ASSERT_OK(admin_->Grant("mallory", "*", Privilege::kWrite));
  const fs::path wh = fs::weakly_canonical(warehouse_);
  const std::vector<std::string> args = {
      "../x", "ns/..", "..", "../../etc/passwd", "ns/../../x", "./x", "ns/.", "../ns/t", "ns/t/../../..",
      "ns\\..\\..\\x/t", "ns/t'; DROP TABLE grants; --", "ns\"; DELETE FROM audit; --/t", "'/;", "ns/\"",
      (wh / ".." / "escape" / "t").string(), (wh / "ns" / ".." / ".." / "t").string()};
  for (const std::string& arg : args) {
    for (bool create : {true, false}) {
      for (Privilege p : {Privilege::kRead, Privilege::kWrite}) {
        SCOPED_TRACE(arg + (create ? " create " : " ") + PrivilegeName(p));
        auto r = AuthorizeTable(mallory.get(), arg, p, "probe", create);
        if (!r.ok()) {
          // Refusals are fine; a dataset name that is valid and allowed is not refused when created.
          EXPECT_FALSE(create && Catalog::ValidateDatasetName(arg).ok()) << r.status();
          continue;
        }
        // Either the caller's own path, untouched, or a place in the warehouse:
        // never something the catalog built that leads out of it.
        EXPECT_TRUE(*r == arg || Inside(wh, *r)) << *r;
        if (Catalog::ValidateDatasetName(arg).ok() && create) {
          EXPECT_EQ(*r, (wh / arg).string());
        }
      }
    }
  }
  // The quoted names were values, not SQL: everything is still there.
  auto all = admin_->Grants();
  ASSERT_OK(all);
  std::vector<std::string> stored = Describe(*all);
  for (const char* g : {"mallory * WRITE by admin", "admin ns ADMIN by owner", "admin ns/seed ADMIN by owner"})
    EXPECT_NE(std::find(stored.begin(), stored.end(), g), stored.end()) << g;
  AuditVerifyResult v = Verify(*admin_);
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_GT(v.events, 1);
  auto datasets = admin_->ListDatasets();
  ASSERT_OK(datasets);
  for (const auto& d : *datasets) EXPECT_TRUE(Inside(wh, d.uri) || d.ns == "external") << d.uri;
}

// ---- 9. names ----------------------------------------------------------------------

TEST_P(GovernanceTest, ObjectNamesWithQuotesAndUnicodeRoundTrip) {
  const std::vector<std::pair<std::string, std::string>> grants = {
      {"o'brien; DROP TABLE grants; --", "ns'x;y/t\"z"},
      {"ren\xc3\xa9", "donn\xc3\xa9" "es/\xe8\xa1\xa8\xf0\x9f\x98\x80"},
      {"bob", "q'\";--"},
      {"\"quoted\"", "ns/it's"},
  };
  for (const auto& [who, obj] : grants) {
    SCOPED_TRACE(obj);
    ASSERT_OK(admin_->Grant(who, obj, Privilege::kWrite));
    auto got = admin_->Grants(obj);
    ASSERT_OK(got);
    ASSERT_EQ(got->size(), 1u);
    EXPECT_EQ((*got)[0].principal, who);
    EXPECT_EQ((*got)[0].object, obj);
    EXPECT_EQ((*got)[0].privilege, Privilege::kWrite);
    EXPECT_EQ((*got)[0].granted_by, "admin");
    EXPECT_TRUE(Has(who, obj, Privilege::kRead));
    EXPECT_FALSE(Has(who, "other/t", Privilege::kRead));
  }
  // A namespace grant with quotes reaches its datasets.
  EXPECT_TRUE(Has("bob", "q'\";--/anything", Privilege::kWrite));
  auto all = admin_->Grants();
  ASSERT_OK(all);
  EXPECT_EQ(all->size(), grants.size());
  // Byte order by object on both backends.
  std::vector<std::string> objects;
  for (const auto& g : *all) objects.push_back(g.object);
  EXPECT_TRUE(std::is_sorted(objects.begin(), objects.end())) << ::testing::PrintToString(objects);
  for (const auto& [who, obj] : grants) ASSERT_OK(admin_->Revoke(who, obj, Privilege::kWrite));
  EXPECT_TRUE(admin_->Grants()->empty());
}

TEST_P(GovernanceTest, InvalidObjectsAreInvalidArgument) {
  auto alice = Open("alice");
  ASSERT_NE(alice, nullptr);
  const std::vector<std::string> bad = {"a/b/c", "..", ".", "", "ns/", "/t", "ns/..", "../t", "./t",
                                        "ns/t\n", "n\\s", "ns/a\\b", std::string("ns/t\0x", 5),
                                        std::string(129, 'n'), "ns/" + std::string(129, 't')};
  for (const std::string& obj : bad) {
    SCOPED_TRACE(::testing::PrintToString(obj));
    EXPECT_CODE(admin_->Grant("alice", obj, Privilege::kRead), kInvalidArgument);
    EXPECT_CODE(admin_->Revoke("alice", obj, Privilege::kRead), kInvalidArgument);
    EXPECT_CODE(admin_->HasPrivilege("alice", obj, Privilege::kRead), kInvalidArgument);
    EXPECT_CODE(alice->Authorize(obj, Privilege::kRead, "read"), kInvalidArgument);
  }
  EXPECT_CODE(admin_->Grant("", "ns", Privilege::kRead), kInvalidArgument);
  EXPECT_TRUE(admin_->Grants()->empty());
  // Nothing was audited for a request that named nothing.
  EXPECT_TRUE(Events(*admin_).empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, GovernanceTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flywheel::catalog
