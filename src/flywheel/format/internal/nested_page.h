// Page bodies of nested columns (struct, map, list of anything but non-null
// scalars) in shard files: docs/format/shard.md, section 3.3.
//
// A nested page holds rows [first, first + n) of one column as its tree of
// child columns, Arrow-like: a node table (one entry per node of the type,
// in pre-order), then each node's validity bitmap, offsets and values, each
// padded to 8 bytes. Offsets are rebased so every page starts at 0, and each
// child holds exactly the elements its parent's rows refer to, so a page
// decodes on its own and its buffers are views of the (mapped) page.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/types.h"

namespace flywheel::internal_format {

using format::Buffer;
using format::Column;
using format::DataType;
using format::Field;

// Bytes of one node table entry: length, null_count, validity_size,
// offsets_size, values_size (u64 each).
inline constexpr uint64_t kNestedNodeEntryBytes = 40;

// Nodes of `type`'s tree in pre-order (the column itself included).
int NestedNodeCount(const DataType& type);

// Bytes the page body of rows [offset, offset + n) of `c` takes, counting a
// validity bitmap for every node that has nulls anywhere (an upper bound on
// EncodeNestedPage's output; what the writer cuts pages by).
uint64_t EstimateNestedPageBytes(const Column& c, int64_t offset, int64_t n);

// Appends the page body of rows [offset, offset + n) of `c` to *out.
// REQUIRES: c.type.is_nested(); c valid; the range inside c.
void EncodeNestedPage(const Column& c, int64_t offset, int64_t n, std::string* out);

// The column of a page body of `num_rows` rows of `field`, its buffers views
// of `body` (kept alive through body.owner). Always checks that the node
// table and the sections fit the body exactly and agree with the type, so
// no view leaves the body. With `full`, also checks offsets (start at 0,
// never decrease, end where the child or values end) and counts each
// bitmap's nulls against the table: O(rows); the shard reader runs it once
// per mapped page and on every copied page. Errors are DataLoss naming the
// node's path ("messages[item].role").
Result<Column> DecodeNestedPage(const Field& field, int64_t num_rows, int64_t null_count, const Buffer& body,
                                bool full);

}  // namespace flywheel::internal_format
