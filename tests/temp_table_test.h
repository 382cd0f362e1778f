// A GoogleTest fixture base for the cross-process table tests: each test gets
// a fresh directory under /tmp (dir_) with the table path uri_ = dir_/t,
// removed when the test ends.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>

namespace flywheel::table {

class TempTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fw_table_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    uri_ = dir_ + "/t";
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string dir_, uri_;
};

}  // namespace flywheel::table
