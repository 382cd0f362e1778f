#include "flywheel/replay/service/sharded_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace flywheel::replay {

// ---------------------------------------------------------------- ShardedWriter

ShardedWriter::ShardedWriter(std::vector<std::unique_ptr<RemoteWriter>> writers, int first)
    : writers_(std::move(writers)), current_(first) {}

ShardedWriter::~ShardedWriter() = default;

Status ShardedWriter::Append(const std::vector<StepValue>& step) { return writers_[current_]->Append(step); }

Result<ItemKey> ShardedWriter::CreateItem(const std::string& table, double priority,
                                          const std::vector<std::pair<std::string, int64_t>>& trajectory,
                                          absl::Duration timeout) {
  return writers_[current_]->CreateItem(table, priority, trajectory, timeout);
}

Status ShardedWriter::EndEpisode() {
  Status s = writers_[current_]->EndEpisode();
  current_ = (current_ + 1) % static_cast<int>(writers_.size());
  return s;
}

Status ShardedWriter::Flush(absl::Duration timeout) {
  const absl::Time deadline =
      timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  std::vector<Status> all;
  for (auto& w : writers_) {
    const absl::Duration left =
        deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : std::max(deadline - absl::Now(), absl::ZeroDuration());
    all.push_back(w->Flush(left));
  }
  return Combined(all);
}

Status ShardedWriter::Close() {
  std::vector<Status> all;
  for (auto& w : writers_) all.push_back(w->Close());
  return Combined(all);
}

// The first error, with the others' messages appended: Flush clears each
// writer's error, so none may be dropped.
Status ShardedWriter::Combined(const std::vector<Status>& all) {
  Status first;
  std::string others;
  for (size_t s = 0; s < all.size(); ++s) {
    if (all[s].ok()) continue;
    if (first.ok()) {
      first = all[s];
    } else {
      absl::StrAppend(&others, "; also from server ", s, ": ", all[s].message());
    }
  }
  if (others.empty()) return first;
  return Status(first.code(), absl::StrCat(first.message(), others));
}

// --------------------------------------------------------------- ShardedSampler

ShardedSampler::ShardedSampler(ShardedClient* client, std::vector<std::unique_ptr<RemoteSampler>> samplers)
    : client_(client), samplers_(std::move(samplers)) {}

ShardedSampler::~ShardedSampler() = default;

Result<std::vector<SampledItem>> ShardedSampler::Sample(const std::string& table, int64_t n,
                                                        absl::Duration timeout, bool flexible) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("sample: num_samples ", n, " must be >= 1"));
  std::vector<double> share;
  const std::vector<int64_t> counts = client_->Spread(table, n, &share);
  const int shards = static_cast<int>(samplers_.size());
  // All requests out first, so the servers work at the same time.
  std::vector<Status> sent(shards);
  for (int s = 0; s < shards; ++s) {
    if (counts[s] > 0) sent[s] = samplers_[s]->Send(table, counts[s], timeout, flexible);
  }
  std::vector<SampledItem> out;
  out.reserve(n);
  Status first_error;
  int failed = 0, asked = 0;
  for (int s = 0; s < shards; ++s) {
    if (counts[s] == 0) continue;
    asked++;
    Result<std::vector<SampledItem>> got = sent[s].ok() ? samplers_[s]->Receive() : Result<std::vector<SampledItem>>(sent[s]);
    if (!got.ok()) {
      failed++;
      if (first_error.ok()) first_error = Annotate(got.status(), absl::StrCat("server ", client_->address(s)));
      continue;
    }
    for (SampledItem& item : *got) {
      client_->NoteSize(table, s, item.table_size);
      item.probability *= share[s];
      out.push_back(std::move(item));
    }
  }
  if (flexible ? failed == asked : failed > 0) return first_error;
  return out;
}

// ---------------------------------------------------------------- ShardedClient

ShardedClient::ShardedClient(std::vector<std::string> addresses, ShardedClientOptions options)
    : addresses_(std::move(addresses)), options_(options), rng_(options.seed) {
  for (const auto& a : addresses_) clients_.push_back(std::make_unique<Client>(a, options_.client));
}

ShardedClient::~ShardedClient() = default;

Result<std::unique_ptr<ShardedClient>> ShardedClient::Create(std::vector<std::string> addresses,
                                                             ShardedClientOptions options) {
  if (addresses.empty()) return absl::InvalidArgumentError("replay client: no server addresses");
  absl::flat_hash_set<std::string> seen;
  for (const auto& a : addresses) {
    if (a.empty()) return absl::InvalidArgumentError("replay client: an empty server address");
    if (!seen.insert(a).second) {
      return absl::InvalidArgumentError(absl::StrCat("replay client: server address '", a, "' is given twice"));
    }
  }
  if (options.size_refresh < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("replay client: size_refresh must be >= 0");
  }
  return std::unique_ptr<ShardedClient>(new ShardedClient(std::move(addresses), options));
}

Result<std::unique_ptr<ShardedWriter>> ShardedClient::NewWriter(RemoteWriterOptions options) {
  std::vector<std::unique_ptr<RemoteWriter>> writers;
  for (auto& c : clients_) {
    FW_ASSIGN_OR_RETURN(auto w, c->NewWriter(options));
    writers.push_back(std::move(w));
  }
  int first = 0;
  {
    absl::MutexLock l(&mu_);
    first = next_writer_;
    next_writer_ = (next_writer_ + 1) % num_shards();
  }
  return std::unique_ptr<ShardedWriter>(new ShardedWriter(std::move(writers), first));
}

std::unique_ptr<ShardedSampler> ShardedClient::NewSampler(int64_t chunk_cache_capacity) {
  std::vector<std::unique_ptr<RemoteSampler>> samplers;
  for (auto& c : clients_) samplers.push_back(c->NewSampler(chunk_cache_capacity));
  return std::unique_ptr<ShardedSampler>(new ShardedSampler(this, std::move(samplers)));
}

Result<std::vector<SampledItem>> ShardedClient::Sample(const std::string& table, int64_t n, absl::Duration timeout,
                                                       bool flexible) {
  absl::MutexLock lock(&sample_mu_);
  if (sampler_ == nullptr) sampler_ = NewSampler();
  auto r = sampler_->Sample(table, n, timeout, flexible);
  // A broken stream is replaced on the next call.
  if (!r.ok() && (absl::IsUnavailable(r.status()) || absl::IsInternal(r.status()))) sampler_.reset();
  return r;
}

void ShardedClient::NoteSize(const std::string& table, int shard, int64_t size) {
  absl::MutexLock l(&mu_);
  Sizes& s = sizes_[table];
  if (s.size.empty()) s.size.assign(clients_.size(), 0);
  s.size[shard] = size;
}

std::vector<int64_t> ShardedClient::Spread(const std::string& table, int64_t n, std::vector<double>* share) {
  const int shards = num_shards();
  std::vector<int64_t> counts(shards, 0);
  share->assign(shards, 1.0);
  if (shards == 1) {
    counts[0] = n;
    return counts;
  }
  bool stale = false;
  {
    absl::MutexLock l(&mu_);
    stale = absl::Now() - sizes_[table].refreshed > options_.size_refresh;
  }
  if (stale) {
    // Outside the lock: Info is a round trip per server. A server that does
    // not answer keeps its last known size.
    std::vector<std::pair<int, int64_t>> fresh;
    for (int s = 0; s < shards; ++s) {
      auto info = clients_[s]->Info(absl::Seconds(5));
      if (!info.ok()) continue;
      for (const auto& t : *info) {
        if (t.info.name == table) fresh.emplace_back(s, t.info.size);
      }
    }
    absl::MutexLock l(&mu_);
    Sizes& sz = sizes_[table];
    if (sz.size.empty()) sz.size.assign(shards, 0);
    for (const auto& [s, size] : fresh) sz.size[s] = size;
    sz.refreshed = absl::Now();
  }
  absl::MutexLock l(&mu_);
  Sizes& sz = sizes_[table];
  if (sz.size.empty()) sz.size.assign(shards, 0);
  std::vector<double> w(shards);
  double total = 0;
  for (int s = 0; s < shards; ++s) total += static_cast<double>(std::max<int64_t>(sz.size[s], 0));
  for (int s = 0; s < shards; ++s) {
    // Nothing known (all empty): spread evenly, so whoever fills first is found.
    w[s] = total > 0 ? static_cast<double>(std::max<int64_t>(sz.size[s], 0)) / total : 1.0 / shards;
  }
  // Systematic sampling: server s gets the points u, u+1, ... (u uniform in
  // [0,1)) that fall in its interval of length n*w[s]; the expected count is
  // exactly n*w[s], and every count is within one of it.
  const double u = rng_.UniformDouble();
  double cum = 0;
  int64_t before = 0;
  for (int s = 0; s < shards; ++s) {
    cum += w[s] * static_cast<double>(n);
    const int64_t upto = s + 1 == shards ? n : std::min<int64_t>(n, static_cast<int64_t>(std::floor(cum + u)));
    counts[s] = std::max<int64_t>(0, upto - before);
    before += counts[s];
    // The chance that a given draw of the batch is served by s.
    (*share)[s] = w[s];
  }
  return counts;
}

Result<int64_t> ShardedClient::MutatePriorities(const std::string& table,
                                                const std::vector<std::pair<ItemKey, double>>& updates,
                                                const std::vector<ItemKey>& deletes) {
  const int64_t keys = static_cast<int64_t>(updates.size() + deletes.size());
  int64_t missing = 0;
  for (auto& c : clients_) {
    FW_ASSIGN_OR_RETURN(int64_t m, c->MutatePriorities(table, updates, deletes));
    missing += m;
  }
  // Each key lives on at most one server; every other server reports it missing.
  return missing - keys * (num_shards() - 1);
}

Result<std::vector<std::vector<RemoteTableInfo>>> ShardedClient::Info(absl::Duration timeout) {
  std::vector<std::vector<RemoteTableInfo>> out;
  for (int s = 0; s < num_shards(); ++s) {
    FW_ASSIGN_OR_RETURN_CTX(auto info, clients_[s]->Info(timeout), "server ", addresses_[s]);
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::vector<RemoteTableInfo>> ShardedClient::MergedInfo(absl::Duration timeout) {
  FW_ASSIGN_OR_RETURN(auto per, Info(timeout));
  std::vector<RemoteTableInfo> merged;
  for (size_t s = 0; s < per.size(); ++s) {
    for (const RemoteTableInfo& t : per[s]) {
      auto it = std::find_if(merged.begin(), merged.end(),
                             [&](const RemoteTableInfo& m) { return m.info.name == t.info.name; });
      const std::string explain = absl::StrCat("[", addresses_[s], "] ", t.explain);
      if (it == merged.end()) {
        merged.push_back(t);
        merged.back().explain = explain;
        continue;
      }
      TableInfo& m = it->info;
      m.size += t.info.size;
      m.max_size += t.info.max_size;
      m.limiter.inserts += t.info.limiter.inserts;
      m.limiter.deletes += t.info.limiter.deletes;
      m.limiter.samples += t.info.limiter.samples;
      m.blocked_inserts += t.info.blocked_inserts;
      m.blocked_samples += t.info.blocked_samples;
      m.num_episodes_evicted += t.info.num_episodes_evicted;
      m.num_deleted += t.info.num_deleted;
      it->explain = absl::StrCat(it->explain, "\n", explain);
    }
  }
  return merged;
}

Status ShardedClient::Broadcast(const std::function<Status(Client&)>& call) {
  Status first;
  for (int s = 0; s < num_shards(); ++s) {
    Status r = call(*clients_[s]);
    if (first.ok() && !r.ok()) first = Annotate(r, absl::StrCat("server ", addresses_[s]));
  }
  return first;
}

Status ShardedClient::Reset(const std::string& table) {
  return Broadcast([&](Client& c) { return c.Reset(table); });
}

Status ShardedClient::Close(const std::string& table) {
  return Broadcast([&](Client& c) { return c.Close(table); });
}

Result<std::vector<RemoteCheckpoint>> ShardedClient::Checkpoint() {
  std::vector<RemoteCheckpoint> out;
  for (int s = 0; s < num_shards(); ++s) {
    FW_ASSIGN_OR_RETURN_CTX(RemoteCheckpoint c, clients_[s]->Checkpoint(), "server ", addresses_[s]);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace flywheel::replay
