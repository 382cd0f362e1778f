// flywheel._core replay service classes (ReplayServer, ReplayClient,
// ReplayRemoteWriter) for flywheel.replay.Server / Client / RemoteWriter in
// python/flywheel/replay.py, over src/flywheel/replay/service/ (server.h,
// sharded_client.h). Without FLYWHEEL_HAVE_GRPC (a build with
// FLYWHEEL_BUILD_GRPC=OFF) only `replay_service_available = False` is
// defined and the Python classes refuse to start.
//
// GIL: released around every call that can wait or do I/O (starting and
// stopping a server, checkpoints, every RPC, channel and stream teardown in
// destructors). The service code never calls into Python.
//
// Interrupts: as in replay.cc, a main-thread call that can block waits in
// slices (BlockingCall, replay.h): each slice is a remote call with the
// slice as its timeout, and a DeadlineExceeded slice is retried until the
// caller's timeout. What a slice does must not depend on being cut short:
//   - sample, one server: a full batch (flexible=False) is all or nothing on
//     the server, so a timed-out slice took nothing; a flexible one returns
//     as soon as anything is there.
//   - sample, several servers, full batch: one ShardedClient call that times
//     out on one server loses the items the others sent (they count as
//     sampled), so slices would lose items every 100 ms. The batch is taken
//     instead as successive flexible slices (each takes what is there,
//     nothing when it times out) until it is complete.
//   - create_item: its timeout is also the server's rate-limiter wait for the
//     item, so it cannot be sliced. The only client-side wait is for room in
//     the run-ahead window (max_in_flight_items unacknowledged). When the
//     window may be full (that many items sent since the shard's last
//     complete flush) the binding first flushes that shard in slices, then
//     sends the item with what is left of the timeout.
//   - flush/close: flush in slices, then Close() finds nothing in flight.
// Other threads make one C++ call with the whole timeout.
//
// Remote writers are a ShardedWriter (one RemoteWriter per server, rotated
// per episode; docs/replay.md "Sharding"): steps, items and episode ends go
// through it; flush and close go server by server through its shard(i), so
// a sliced flush can wait on one server per slice and name the server of
// each item error.
//
// Errors: through status.h, except NotFound from a server, which means an
// unknown table and becomes KeyError (as the in-process writer's unknown
// table). Timeouts say what timed out and carry the servers' explanation.
//
// Thread-safety: ReplayServer and ReplayClient are thread-safe (the C++
// classes are; samples on one client run one at a time). ReplayRemoteWriter
// serialises its C++ calls with a mutex taken with the GIL released; its
// bookkeeping is guarded by the GIL. disconnect() while calls run on other
// threads is safe: calls hold the C++ client alive.
#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/format/codec.h"
#include "replay.h"
#include "status.h"

#if FLYWHEEL_HAVE_GRPC
#include "flywheel/replay/service/client.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/replay/service/sharded_client.h"
#include "flywheel/rl/service/weight_service.h"
#endif

namespace flywheel::python {
namespace py = pybind11;

#if FLYWHEEL_HAVE_GRPC

namespace {

using replay::ItemKey;
using replay::SampledItem;

// The watchdog of restored tables (RestoreOptions' default; ServerOptions
// has no field for it).
constexpr absl::Duration kRestoredWatchdog = absl::Seconds(10);

[[noreturn]] void Raise(const Status& s) {
  if (absl::IsNotFound(s)) throw py::key_error(std::string(s.message()));
  throw StatusError(s);
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Value(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

int64_t CheckMessageBytes(int64_t max_message_bytes) {
  if (max_message_bytes <= 0 || max_message_bytes > INT_MAX) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes ", max_message_bytes, " must be in [1, 2^31-1]")));
  }
  return max_message_bytes;
}

// Runs `f` with the GIL released when this thread holds it (destructors run
// from Python's deallocation with it, but also at interpreter teardown).
template <typename F>
void WithoutGil(F&& f) {
  if (PyGILState_Check()) {
    py::gil_scoped_release nogil;
    f();
  } else {
    f();
  }
}

std::vector<std::string> Addresses(const replay::ShardedClient& c) {
  std::vector<std::string> out;
  for (int s = 0; s < c.num_shards(); ++s) out.push_back(c.address(s));
  return out;
}

// The servers' Explain() of `table` (every table when empty), for timeout
// messages and watchdog lines. Runs without the GIL.
std::function<std::string()> ServersExplainer(std::weak_ptr<replay::ShardedClient> weak,
                                              std::string table) {
  return [weak = std::move(weak), table = std::move(table)] {
    std::shared_ptr<replay::ShardedClient> c = weak.lock();
    if (c == nullptr) return std::string("(no explanation: the client is disconnected)");
    auto r = c->MergedInfo(absl::Seconds(2));
    if (!r.ok()) return absl::StrCat("(no explanation: ", r.status().ToString(), ")");
    std::string out;
    for (const auto& t : *r) {
      if (table.empty()) {
        absl::StrAppend(&out, out.empty() ? "" : "\n", "table '", t.info.name, "':\n", t.explain);
      } else if (t.info.name == table) {
        return t.explain;
      }
    }
    if (table.empty()) return out;
    return absl::StrCat("(the servers have no table '", table, "')");
  };
}

// ---------------------------------------------------------------- ReplayServer

class PyReplayServer {
 public:
  PyReplayServer(std::vector<py::object> tables, const std::string& address,
                 int64_t max_message_bytes, const std::string& checkpoint_dir,
                 std::optional<double> checkpoint_interval_s, int keep_last, bool restore,
                 uint64_t restore_seed, bool serve_weights)
      : configured_(std::move(tables)) {
    replay::ServerOptions o;
    o.address = address;
    for (const auto& t : configured_) o.tables.push_back(SharedTable(t));
    o.max_message_bytes = max_message_bytes;
    o.checkpoint_dir = checkpoint_dir;
    o.checkpoint_interval = checkpoint_interval_s
                                ? ToDuration(checkpoint_interval_s, "checkpoint_interval")
                                : absl::ZeroDuration();
    if (o.checkpoint_interval == absl::InfiniteDuration())
      o.checkpoint_interval = absl::ZeroDuration();
    o.checkpoint_keep_last = keep_last;
    o.restore = restore;
    o.restore_seed = restore_seed;
    if (serve_weights) o.services.push_back(std::make_shared<rl::WeightService>(std::make_shared<rl::WeightStore>()));
    Result<std::unique_ptr<replay::Server>> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;  // binds, and restores a checkpoint
      r = replay::Server::Start(std::move(o));
    }
    server_ = ValueOrThrow(std::move(r));
  }

  ~PyReplayServer() {
    WithoutGil([this] { server_.reset(); });
  }

  int port() const { return server_->port(); }
  std::string address() const { return server_->address(); }

  std::optional<int64_t> restored_checkpoint() const {
    const int64_t id = server_->restored_checkpoint();
    if (id < 0) return std::nullopt;
    return id;
  }

  // The served tables, in Info() order: the objects given for configured
  // tables, new _core.ReplayTable objects for restored ones.
  py::list tables() const {
    py::list out;
    for (const auto& t : server_->tables()) {
      py::object found;
      for (const auto& c : configured_) {
        if (SharedTable(c).get() == t.get()) found = c;
      }
      out.append(found ? found : WrapTable(t, kRestoredWatchdog));
    }
    return out;
  }

  py::dict stats() const {
    const replay::ServerStats s = server_->stats();
    py::dict d;
    d["chunks_received"] = s.chunks_received;
    d["chunk_bytes_received"] = s.chunk_bytes_received;
    d["items_inserted"] = s.items_inserted;
    d["item_errors"] = s.item_errors;
    d["chunks_sent"] = s.chunks_sent;
    d["items_sent"] = s.items_sent;
    d["open_insert_streams"] = s.open_insert_streams;
    d["open_sample_streams"] = s.open_sample_streams;
    d["cached_insert_chunks"] = s.cached_insert_chunks;
    d["checkpoints"] = s.checkpoints;
    d["checkpoint_failures"] = s.checkpoint_failures;
    return d;
  }

  py::dict checkpoint() {
    Result<replay::CheckpointResult> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      r = server_->Checkpoint();
    }
    const replay::CheckpointResult c = ValueOrThrow(std::move(r));
    py::dict d;
    d["id"] = c.id;
    d["path"] = c.path;
    d["max_pause"] = absl::ToDoubleSeconds(c.max_pause);
    py::dict pauses;
    for (const auto& [name, pause] : c.pauses) pauses[py::str(name)] = absl::ToDoubleSeconds(pause);
    d["pauses"] = pauses;
    d["num_items"] = c.num_items;
    d["num_chunks"] = c.num_chunks;
    d["chunk_bytes"] = c.chunk_bytes;
    d["duration"] = absl::ToDoubleSeconds(c.duration);
    d["deleted"] = c.deleted;
    return d;
  }

  void stop() {
    py::gil_scoped_release nogil;
    server_->Stop();
  }

 private:
  const std::vector<py::object> configured_;  // _core.ReplayTable objects
  std::unique_ptr<replay::Server> server_;
};

// ----------------------------------------------------------- ReplayRemoteWriter

class PyRemoteWriter {
 public:
  PyRemoteWriter(std::shared_ptr<replay::ShardedClient> client, std::unique_ptr<replay::ShardedWriter> writer,
                 int64_t max_in_flight, absl::Duration watchdog)
      : client_(client),
        addresses_(Addresses(*client)),
        writer_(std::move(writer)),
        sent_(static_cast<size_t>(writer_->num_shards()), 0),
        max_in_flight_(max_in_flight),
        watchdog_(watchdog) {}

  ~PyRemoteWriter() {
    WithoutGil([this] { writer_.reset(); });  // cancels unclosed streams, joins their readers
  }

  void DefineColumn(const std::string& column, const std::string& type_text) {
    steps_.Define(column, type_text);
  }

  void Append(const py::dict& step) {
    CheckOpen();
    StepColumns::Step prepared = steps_.Prepare(step);
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      Check(writer_->Append(prepared.values));
    }
    steps_.Appended(prepared);
  }

  void Extend(const py::dict& columns) {
    CheckOpen();
    StepColumns::Block b = steps_.PrepareBlock(columns);
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      Check(StepColumns::AppendEach(b, [&](const std::vector<replay::StepValue>& v) {
        return writer_->Append(v);
      }));
    }
    steps_.AppendedBlock(b);
  }

  ItemKey CreateItem(const std::string& table, double priority,
                     const std::vector<std::pair<std::string, int64_t>>& trajectory,
                     std::optional<double> timeout_s) {
    CheckOpen();
    steps_.CheckTrajectory(trajectory);
    const absl::Duration timeout = ToDuration(timeout_s);
    const int shard = writer_->current_shard();
    BlockingCall call("insert into", Target(table, shard), timeout, watchdog_, Explainer(table));
    absl::Duration left = timeout;
    if (call.sliced()) {
      // Room in the window without an uninterruptible wait (file comment).
      if (sent_[shard] >= max_in_flight_) FlushShard(shard, call);
      if (timeout != absl::InfiniteDuration()) {
        left = call.deadline() - absl::Now();
        if (left <= absl::ZeroDuration()) Raise(call.TimedOut());
      }
    }
    Result<ItemKey> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      r = writer_->CreateItem(table, priority, trajectory, left);
    }
    if (!r.ok()) {
      if (IsOwnTimeout(r.status(), "create_item: ")) Raise(call.TimedOut());
      Raise(OnShard(r.status(), shard));
    }
    sent_[shard]++;
    return *r;
  }

  void EndEpisode() {
    CheckOpen();
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      Check(writer_->EndEpisode());  // moves to the next server
    }
    steps_.EndEpisode();
  }

  // Every server's stream: waits for all acks; raises the first item error
  // (naming its server), with the others' appended.
  void Flush(std::optional<double> timeout_s) {
    CheckOpen();
    BlockingCall call("flush to", Targets(), ToDuration(timeout_s), watchdog_, Explainer(""));
    FlushAll(call);
  }

  // Flushes, then ends every stream. Idempotent.
  void Close() {
    if (closed_) return;
    BlockingCall call("close of a writer to", Targets(), absl::InfiniteDuration(), watchdog_,
                      [] { return std::string(); });
    std::vector<Status> errors;
    if (call.sliced()) errors = FlushEach(call);  // interruptible; Close() then waits for nothing
    closed_ = true;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      for (int s = 0; s < writer_->num_shards(); ++s) {
        Status st = writer_->shard(s).Close();
        if (!st.ok()) errors.push_back(OnShard(st, s));
      }
    }
    RaiseFirst(errors);
  }

  int64_t EpisodeSteps() const { return steps_.episode_steps(); }
  int CurrentShard() const { return writer_->current_shard(); }
  bool closed() const { return closed_; }

 private:
  void CheckOpen() const {
    if (closed_) throw StatusError(absl::FailedPreconditionError("the remote writer is closed"));
  }

  // A call's own timeout (not a server-side item error, which may be a
  // DeadlineExceeded too): RemoteWriter's messages start with the call name.
  static bool IsOwnTimeout(const Status& s, std::string_view prefix) {
    return absl::IsDeadlineExceeded(s) && absl::StartsWith(s.message(), AsAbsl(prefix));
  }

  Status OnShard(const Status& s, int shard) const {
    return Annotate(s, absl::StrCat("server ", addresses_[shard]));
  }

  std::string Target(const std::string& table, int shard) const {
    return absl::StrCat("table '", table, "' on ", addresses_[shard]);
  }

  std::string Targets() const { return absl::StrJoin(addresses_, ", "); }

  std::function<std::string()> Explainer(const std::string& table) const {
    return ServersExplainer(client_, table);
  }

  // Waits until `shard` acknowledged everything (in slices on the main
  // thread); returns the first item error, or raises the timeout.
  Status FlushOne(int shard, BlockingCall& call) {
    for (;;) {
      Status s;
      {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mu_);
        s = writer_->shard(shard).Flush(call.sliced() ? call.NextWait() : call.Left());
      }
      if (s.ok()) {
        sent_[shard] = 0;
        return s;
      }
      if (!IsOwnTimeout(s, "flush: ")) {
        // An item error (now cleared in the writer) or a broken stream. The
        // window wait is over either way: Flush waited for every ack.
        sent_[shard] = 0;
        return OnShard(s, shard);
      }
      if (!call.sliced()) Raise(call.TimedOut());
      Check(call.Retry(s));
    }
  }

  void FlushShard(int shard, BlockingCall& call) { Check(FlushOne(shard, call)); }

  std::vector<Status> FlushEach(BlockingCall& call) {
    std::vector<Status> errors;
    for (int s = 0; s < writer_->num_shards(); ++s) {
      Status st = FlushOne(s, call);
      if (!st.ok()) errors.push_back(st);
    }
    return errors;
  }

  void FlushAll(BlockingCall& call) { RaiseFirst(FlushEach(call)); }

  static void RaiseFirst(const std::vector<Status>& errors) {
    if (errors.empty()) return;
    Status first = errors.front();
    if (errors.size() > 1) {
      std::string more;
      for (size_t i = 1; i < errors.size(); ++i)
        absl::StrAppend(&more, "; also: ", errors[i].ToString());
      first = Status(first.code(), absl::StrCat(first.message(), more));
    }
    Raise(first);
  }

  // For explanations only: the writer's streams do not need the client,
  // and holding it would keep its sample streams open after disconnect().
  const std::weak_ptr<replay::ShardedClient> client_;
  const std::vector<std::string> addresses_;
  // Guards the writers' C++ calls; taken only with the GIL released.
  std::mutex mu_;
  std::unique_ptr<replay::ShardedWriter> writer_;
  // Guarded by the GIL: items sent per shard since its last complete flush
  // (a bound on its unacknowledged items).
  std::vector<int64_t> sent_;
  const int64_t max_in_flight_;
  const absl::Duration watchdog_;
  StepColumns steps_;
  bool closed_ = false;
};

// ---------------------------------------------------------------- ReplayClient

class PyReplayClient {
 public:
  PyReplayClient(std::vector<std::string> addresses, int64_t max_message_bytes, uint64_t seed,
                 double watchdog_s)
      : addresses_(addresses) {
    replay::ShardedClientOptions o;
    o.client.max_message_bytes = CheckMessageBytes(max_message_bytes);
    o.seed = seed;
    watchdog_ = ToDuration(watchdog_s, "watchdog");
    if (watchdog_ == absl::InfiniteDuration()) watchdog_ = absl::ZeroDuration();
    client_ = std::shared_ptr<replay::ShardedClient>(
        ValueOrThrow(replay::ShardedClient::Create(std::move(addresses), o)));
  }

  ~PyReplayClient() { Disconnect(); }

  int num_shards() const { return static_cast<int>(addresses_.size()); }
  const std::vector<std::string>& addresses() const { return addresses_; }

  py::dict Sample(const std::string& table, int64_t n, std::optional<double> timeout_s,
                  bool flexible) {
    auto c = Get();
    const absl::Duration timeout = ToDuration(timeout_s);
    BlockingCall call("sample from", Target(*c, table), timeout, watchdog_,
                      ServersExplainer(c, table));
    // Several servers, a full batch, sliced: successive flexible slices (file comment).
    const bool accumulate = call.sliced() && !flexible && c->num_shards() > 1;
    std::vector<SampledItem> items;
    for (;;) {
      Status s;
      {
        py::gil_scoped_release nogil;
        auto r = c->Sample(table, n - static_cast<int64_t>(items.size()), call.NextWait(),
                           flexible || accumulate);
        if (r.ok()) {
          for (auto& it : *r) items.push_back(std::move(it));
        }
        s = r.status();
      }
      if (s.ok() && (!accumulate || static_cast<int64_t>(items.size()) >= n)) break;
      if (!call.sliced() && absl::IsDeadlineExceeded(s)) Raise(call.TimedOut());
      Check(call.Retry(s));
    }
    if (items.empty())
      throw StatusError(absl::InternalError("sample: the servers returned no items"));
    return SampleToPython(std::move(items));
  }

  std::unique_ptr<PyRemoteWriter> Writer(int64_t chunk_length, const std::string& codec,
                                         int64_t max_history, int64_t max_in_flight_items) {
    auto c = Get();
    replay::RemoteWriterOptions o;
    o.writer.chunk_length = chunk_length;
    o.writer.codec = ValueOrThrow(format::ParseCodec(codec));
    o.writer.max_history = max_history;
    o.max_in_flight_items = max_in_flight_items;
    ThrowIfError(Annotate(o.Validate(), "remote writer options"));
    std::unique_ptr<replay::ShardedWriter> w;
    {
      py::gil_scoped_release nogil;
      w = ValueOrThrow(c->NewWriter(o));  // writers start on different servers
    }
    return std::make_unique<PyRemoteWriter>(c, std::move(w), max_in_flight_items, watchdog_);
  }

  int64_t MutatePriorities(const std::string& table,
                           const std::vector<std::pair<ItemKey, double>>& updates,
                           const std::vector<ItemKey>& deletes) {
    auto c = Get();
    Result<int64_t> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      r = c->MutatePriorities(table, updates, deletes);
    }
    return Value(std::move(r));
  }

  // name -> Table.info()-style dict over all servers, plus "explain".
  py::dict Info(std::optional<double> timeout_s) {
    auto c = Get();
    const absl::Duration timeout = ToDuration(timeout_s);
    Result<std::vector<replay::RemoteTableInfo>> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      r = c->MergedInfo(timeout);
    }
    py::dict out;
    for (const auto& t : Value(std::move(r))) {
      py::dict d = TableInfoToPython(t.info);
      d["explain"] = t.explain;
      out[py::str(t.info.name)] = d;
    }
    return out;
  }

  void Reset(const std::string& table) {
    auto c = Get();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->Reset(table);
    }
    Check(s);
  }

  void Close(const std::string& table) {
    auto c = Get();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->Close(table);
    }
    Check(s);
  }

  py::list Checkpoint() {
    auto c = Get();
    Result<std::vector<replay::RemoteCheckpoint>> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      r = c->Checkpoint();
    }
    py::list out;
    int s = 0;
    for (const auto& cp : Value(std::move(r))) {
      py::dict d;
      d["address"] = c->address(s++);
      d["id"] = cp.id;
      d["path"] = cp.path;
      d["max_pause"] = absl::ToDoubleSeconds(cp.max_pause);
      d["num_items"] = cp.num_items;
      d["num_chunks"] = cp.num_chunks;
      d["chunk_bytes"] = cp.chunk_bytes;
      d["duration"] = absl::ToDoubleSeconds(cp.duration);
      out.append(d);
    }
    return out;
  }

  // Drops this object's hold on the channels and its sample streams (calls
  // running on other threads keep theirs until they return). Idempotent.
  void Disconnect() {
    std::shared_ptr<replay::ShardedClient> c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      c = std::move(client_);
    }
    WithoutGil([&c] { c.reset(); });
  }

  bool connected() const {
    std::lock_guard<std::mutex> lock(mu_);
    return client_ != nullptr;
  }

 private:
  std::shared_ptr<replay::ShardedClient> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (client_ == nullptr) {
      throw StatusError(absl::FailedPreconditionError("the replay client is disconnected"));
    }
    return client_;
  }

  static std::string Target(const replay::ShardedClient& c, const std::string& table) {
    std::vector<std::string> a;
    for (int s = 0; s < c.num_shards(); ++s) a.push_back(c.address(s));
    return absl::StrCat("table '", table, "' on ", absl::StrJoin(a, ", "));
  }

  const std::vector<std::string> addresses_;
  mutable std::mutex mu_;  // guards client_ (the pointer, not the client)
  std::shared_ptr<replay::ShardedClient> client_;
  absl::Duration watchdog_;
};

}  // namespace

void RegisterReplayService(py::module_& m) {
  m.attr("replay_service_available") = true;

  py::class_<PyReplayServer>(m, "ReplayServer", "A replay gRPC server; see flywheel.replay.Server.")
      .def(py::init<std::vector<py::object>, const std::string&, int64_t, const std::string&,
                    std::optional<double>, int, bool, uint64_t, bool>(),
           py::arg("tables"), py::arg("address"), py::arg("max_message_bytes"),
           py::arg("checkpoint_dir"), py::arg("checkpoint_interval"), py::arg("keep_last"),
           py::arg("restore"), py::arg("restore_seed"), py::arg("serve_weights") = false)
      .def_property_readonly("port", &PyReplayServer::port)
      .def_property_readonly("address", &PyReplayServer::address)
      .def_property_readonly("restored_checkpoint", &PyReplayServer::restored_checkpoint)
      .def("tables", &PyReplayServer::tables)
      .def("stats", &PyReplayServer::stats)
      .def("checkpoint", &PyReplayServer::checkpoint)
      .def("stop", &PyReplayServer::stop);

  py::class_<PyRemoteWriter>(m, "ReplayRemoteWriter",
                             "A writer to replay servers; see flywheel.replay.RemoteWriter.")
      .def("define_column", &PyRemoteWriter::DefineColumn, py::arg("column"), py::arg("type"))
      .def("append", &PyRemoteWriter::Append, py::arg("step"))
      .def("extend", &PyRemoteWriter::Extend, py::arg("columns"))
      .def("create_item", &PyRemoteWriter::CreateItem, py::arg("table"), py::arg("priority"),
           py::arg("trajectory"), py::arg("timeout"))
      .def("end_episode", &PyRemoteWriter::EndEpisode)
      .def("flush", &PyRemoteWriter::Flush, py::arg("timeout"))
      .def("close", &PyRemoteWriter::Close)
      .def_property_readonly("episode_steps", &PyRemoteWriter::EpisodeSteps)
      .def_property_readonly("current_shard", &PyRemoteWriter::CurrentShard)
      .def_property_readonly("closed", &PyRemoteWriter::closed);

  py::class_<PyReplayClient>(m, "ReplayClient",
                             "A client of replay servers; see flywheel.replay.Client.")
      .def(py::init<std::vector<std::string>, int64_t, uint64_t, double>(), py::arg("addresses"),
           py::arg("max_message_bytes"), py::arg("seed"), py::arg("watchdog"))
      .def_property_readonly("num_shards", &PyReplayClient::num_shards)
      .def_property_readonly("addresses", &PyReplayClient::addresses)
      .def_property_readonly("connected", &PyReplayClient::connected)
      .def("sample", &PyReplayClient::Sample, py::arg("table"), py::arg("batch_size"),
           py::arg("timeout"), py::arg("flexible"))
      .def("writer", &PyReplayClient::Writer, py::arg("chunk_length"), py::arg("codec"),
           py::arg("max_history"), py::arg("max_in_flight_items"))
      .def("mutate_priorities", &PyReplayClient::MutatePriorities, py::arg("table"),
           py::arg("updates"), py::arg("deletes"))
      .def("info", &PyReplayClient::Info, py::arg("timeout"))
      .def("reset", &PyReplayClient::Reset, py::arg("table"))
      .def("close", &PyReplayClient::Close, py::arg("table"))
      .def("checkpoint", &PyReplayClient::Checkpoint)
      .def("disconnect", &PyReplayClient::Disconnect);
}

#else  // !FLYWHEEL_HAVE_GRPC

void RegisterReplayService(py::module_& m) { m.attr("replay_service_available") = false; }

#endif

}  // namespace flywheel::python
