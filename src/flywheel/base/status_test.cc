#include "flywheel/base/status.h"

#include <gtest/gtest.h>

namespace flywheel {
namespace {

Status Fails() { return absl::NotFoundError("manifest 7 missing"); }
Result<int> Seven() { return 7; }
Result<int> NoInt() { return absl::InvalidArgumentError("bad"); }

Status UsesCtx() {
  FW_RETURN_IF_ERROR_CTX(Fails(), "opening table ", "t1");
  return absl::OkStatus();
}
Result<int> Adds() {
  FW_ASSIGN_OR_RETURN(int a, Seven());
  FW_ASSIGN_OR_RETURN_CTX(int b, NoInt(), "reading field ", 3);
  return a + b;
}
Result<int> AddsOk() {
  FW_ASSIGN_OR_RETURN(int a, Seven());
  FW_ASSIGN_OR_RETURN_CTX(int b, Seven(), "unused");
  return a + b;
}

TEST(StatusTest, ReturnIfErrorAddsContextAndKeepsCode) {
  Status s = UsesCtx();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "opening table t1: manifest 7 missing");
}

TEST(StatusTest, AssignOrReturnPropagatesWithContext) {
  auto r = Adds();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "reading field 3: bad");
  EXPECT_EQ(*AddsOk(), 14);
}

TEST(StatusTest, AnnotateLeavesOkAlone) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "ctx").ok());
  EXPECT_EQ(Annotate(absl::InternalError("x"), "").message(), "x");
}

}  // namespace
}  // namespace flywheel
