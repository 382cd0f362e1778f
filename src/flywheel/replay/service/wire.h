// Conversions between the replay service's wire messages (proto/replay.proto,
// docs/protocol/replay.md) and replay:: types, and between grpc::Status and
// absl::Status. Internal to the service: the server and client only.
//
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/replay/chunk.h"
#include "flywheel/replay/table.h"
#include "flywheel/base/grpc_status.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/status.h"
#include "replay.pb.h"

namespace flywheel::replay::internal_service {

using grpc_status::FromGrpc;
using grpc_status::ToGrpc;

// Status carried in a message's (code, message) fields.
Status FromWire(int32_t code, const std::string& message);

// Copies the chunk's stored bytes as is.
void ChunkToProto(const Chunk& c, proto::Chunk* out);
// Moves the bytes out of `c`. InvalidArgument naming the chunk key and the
// field for a bad step type, codec or size.
Result<ChunkRef> ChunkFromProto(proto::Chunk* c);

// An item's wire form: table, key, priority and, per column, its chunk keys
// and slice (the chunks themselves travel separately).
void ItemToProto(const std::string& table, ItemKey key, double priority,
                 const std::vector<TrajectoryColumn>& columns, proto::Item* out);

// Builds an InsertStreamRequest in wire form (proto/replay.proto) without
// copying large chunk bytes: each chunk's `compressed` goes out as a gRPC
// slice that holds a reference to the chunk, so the bytes reach the socket
// straight from the writer's chunk. The result parses as the equivalent
// proto::InsertStreamRequest (protobuf lets fields come in any order and
// concatenates repeated ones): the chunks first, then `rest`.
//
// Thread-safety: one thread at a time.
class InsertRequestEncoder {
 public:
  // Chunks at least this large travel as their own slice; smaller ones are
  // copied (a slice per 18-byte chunk costs more than the copy).
  static constexpr size_t kSliceMinBytes = 2048;

  // Appends one entry of `chunks`.
  void AddChunk(const ChunkRef& c);
  // Appends the other fields (items, release keys, timeout, flags); `rest`
  // should hold no chunks.
  void AddRest(const proto::InsertStreamRequest& rest);
  // Bytes appended so far.
  size_t bytes() const { return bytes_; }
  // The message; the encoder is empty again afterwards.
  grpc::ByteBuffer Finish();

 private:
  void FlushSmall();

  std::string small_;  // bytes not yet in a slice
  std::vector<grpc::Slice> slices_;
  size_t bytes_ = 0;
};

void TableInfoToProto(const TableInfo& info, const std::string& explain, proto::TableInfo* out);
TableInfo TableInfoFromProto(const proto::TableInfo& p);

// Default chunk-cache capacity of a sample stream (docs/protocol/replay.md).
inline constexpr int64_t kDefaultSampleChunkCache = 256;

}  // namespace flywheel::replay::internal_service
