// Creates a table in the folder given, appends rows, reopens it and checks
// them: what a C++ user does first with an installed flywheel.
#include <cstdio>
#include <string>
#include <vector>

#include "flywheel/format/column.h"
#include "flywheel/table/table.h"

using flywheel::format::DataType;
using flywheel::format::RecordBatch;
using flywheel::format::Schema;
using flywheel::format::TypeId;
using flywheel::table::Table;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DIR\n");
    return 2;
  }
  const std::string uri = std::string(argv[1]) + "/t";
  auto schema = Schema::Parse("id:int64, name:string");
  if (!schema.ok()) return 1;
  auto created = Table::Create(uri, *schema);
  if (!created.ok()) {
    std::fprintf(stderr, "create: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  RecordBatch b;
  b.schema = *schema;
  b.num_rows = 3;
  b.columns.push_back(flywheel::format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::vector<int64_t>{7, 8, 9}));
  b.columns.push_back(flywheel::format::MakeStringColumn({"a", "bb", "ccc"}));
  if (auto s = (*created)->Append(b); !s.ok()) {
    std::fprintf(stderr, "append: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto t = Table::Open(uri);
  if (!t.ok()) return 1;
  auto it = (*t)->Scan();
  if (!it.ok()) return 1;
  int64_t sum = 0;
  std::string names;
  while (true) {
    auto batch = (*it)->Next();
    if (!batch.ok()) return 1;
    if (!batch->has_value()) break;
    const auto& ids = (**batch).columns[0];
    const auto& strs = (**batch).columns[1];
    for (int64_t i = 0; i < ids.length; ++i) {
      sum += ids.values.as<int64_t>()[i];
      names += std::string(strs.GetBytes(i));
    }
  }
  std::printf("version %lld rows %lld sum %lld names %s\n", static_cast<long long>((*t)->version()),
              static_cast<long long>((*t)->num_rows()), static_cast<long long>(sum), names.c_str());
  return (*t)->version() == 2 && (*t)->num_rows() == 3 && sum == 24 && names == "abbccc" ? 0 : 1;
}
