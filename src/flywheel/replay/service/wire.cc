#include "flywheel/replay/service/wire.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace flywheel::replay::internal_service {

Status FromWire(int32_t code, const std::string& message) {
  if (code == 0) return absl::OkStatus();
  if (code < 0 || code > 16) code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return Status(static_cast<absl::StatusCode>(code), message);
}

void ChunkToProto(const Chunk& c, proto::Chunk* out) {
  out->set_key(c.key());
  out->set_step_type(c.step_type().ToString());
  out->set_num_steps(c.num_steps());
  out->set_codec(static_cast<uint32_t>(c.codec()));
  out->set_compressed(c.compressed());
}

Result<ChunkRef> ChunkFromProto(proto::Chunk* c) {
  // A stream's chunks mostly repeat a few step types: parse each text once
  // per thread, not once per chunk.
  thread_local std::string last_text;
  thread_local format::DataType last_type;
  if (c->step_type() != last_text || last_text.empty()) {
    FW_ASSIGN_OR_RETURN_CTX(last_type, format::DataType::Parse(c->step_type()), "chunk ", c->key(), ": step_type");
    last_text = c->step_type();
  }
  const format::DataType& type = last_type;
  if (c->codec() > static_cast<uint32_t>(format::Codec::kZstd)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c->key(), ": unknown codec ", c->codec()));
  }
  if (c->num_steps() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c->key(), ": num_steps ", c->num_steps(), " must be > 0"));
  }
  return Chunk::FromCompressed(c->key(), type, c->num_steps(), static_cast<format::Codec>(c->codec()),
                               std::move(*c->mutable_compressed()));
}

void ItemToProto(const std::string& table, ItemKey key, double priority,
                 const std::vector<TrajectoryColumn>& columns, proto::Item* out) {
  out->set_table(table);
  out->set_key(key);
  out->set_priority(priority);
  for (const auto& col : columns) {
    proto::Column* pc = out->add_columns();
    pc->set_name(col.name);
    for (const auto& c : col.chunks) pc->add_chunk_keys(c->key());
    pc->set_offset(col.offset);
    pc->set_length(col.length);
  }
}

namespace {

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Wire-format tags (field number << 3 | wire type 2, length-delimited).
constexpr char kRequestChunksTag = (1 << 3) | 2;  // InsertStreamRequest.chunks
constexpr char kChunkCompressedTag = (5 << 3) | 2;  // Chunk.compressed

}  // namespace

void InsertRequestEncoder::AddChunk(const ChunkRef& c) {
  // The chunk's fields except `compressed`, encoded by protobuf, then
  // `compressed` by hand: its header here, its bytes copied or referenced.
  proto::Chunk header;
  header.set_key(c->key());
  header.set_step_type(c->step_type().ToString());
  header.set_num_steps(c->num_steps());
  header.set_codec(static_cast<uint32_t>(c->codec()));
  const size_t n = c->compressed().size();
  const size_t header_bytes = header.ByteSizeLong();
  const size_t chunk_bytes = header_bytes + 1 + VarintSize(n) + n;
  const size_t start = small_.size();
  small_.push_back(kRequestChunksTag);
  AppendVarint(chunk_bytes, &small_);
  small_.resize(small_.size() + header_bytes);
  header.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(small_.data() + small_.size() - header_bytes));
  small_.push_back(kChunkCompressedTag);
  AppendVarint(n, &small_);
  bytes_ += small_.size() - start + n;
  if (n < kSliceMinBytes) {
    small_.append(c->compressed());
  } else {
    FlushSmall();
    // The slice owns a reference to the chunk until gRPC has written it.
    auto* ref = new ChunkRef(c);
    slices_.emplace_back(const_cast<char*>(c->compressed().data()), n,
                         [](void* p) { delete static_cast<ChunkRef*>(p); }, ref);
  }
}

void InsertRequestEncoder::AddRest(const proto::InsertStreamRequest& rest) {
  const size_t before = small_.size();
  rest.AppendToString(&small_);
  bytes_ += small_.size() - before;
}

void InsertRequestEncoder::FlushSmall() {
  if (small_.empty()) return;
  slices_.emplace_back(small_);
  small_.clear();
}

grpc::ByteBuffer InsertRequestEncoder::Finish() {
  FlushSmall();
  grpc::ByteBuffer out(slices_.data(), slices_.size());
  slices_.clear();
  bytes_ = 0;
  return out;
}

void TableInfoToProto(const TableInfo& info, const std::string& explain, proto::TableInfo* out) {
  out->set_name(info.name);
  out->set_size(info.size);
  out->set_max_size(info.max_size);
  out->set_max_times_sampled(info.max_times_sampled);
  out->set_inserts(info.limiter.inserts);
  out->set_deletes(info.limiter.deletes);
  out->set_samples(info.limiter.samples);
  out->set_samples_per_insert(info.limiter_options.samples_per_insert);
  out->set_min_size_to_sample(info.limiter_options.min_size_to_sample);
  out->set_min_diff(info.limiter_options.min_diff);
  out->set_max_diff(info.limiter_options.max_diff);
  out->set_blocked_inserts(info.blocked_inserts);
  out->set_blocked_samples(info.blocked_samples);
  out->set_sampler(info.sampler);
  out->set_remover(info.remover);
  out->set_num_episodes_evicted(info.num_episodes_evicted);
  out->set_num_deleted(info.num_deleted);
  out->set_explain(explain);
}

TableInfo TableInfoFromProto(const proto::TableInfo& p) {
  TableInfo info;
  info.name = p.name();
  info.size = p.size();
  info.max_size = p.max_size();
  info.max_times_sampled = p.max_times_sampled();
  info.limiter.inserts = p.inserts();
  info.limiter.deletes = p.deletes();
  info.limiter.samples = p.samples();
  info.limiter_options.samples_per_insert = p.samples_per_insert();
  info.limiter_options.min_size_to_sample = p.min_size_to_sample();
  info.limiter_options.min_diff = p.min_diff();
  info.limiter_options.max_diff = p.max_diff();
  info.blocked_inserts = p.blocked_inserts();
  info.blocked_samples = p.blocked_samples();
  info.sampler = p.sampler();
  info.remover = p.remover();
  info.num_episodes_evicted = p.num_episodes_evicted();
  info.num_deleted = p.num_deleted();
  return info;
}

}  // namespace flywheel::replay::internal_service
