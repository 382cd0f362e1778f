// A GoogleTest fixture base for the cross-process table tests: each test gets
// a fresh directory under /tmp (dir_) with the table path uri_ = dir_/t,
// removed when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "flywheel/io/temp_dir.h"

namespace flywheel::table {

class TempTableTest : public ::testing::Test {
 protected:
  io::TempDir tmp_{"fw_table_test"};
  std::string dir_ = tmp_.path();
  std::string uri_ = dir_ + "/t";
};

}  // namespace flywheel::table
