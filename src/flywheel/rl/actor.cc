#include "flywheel/base/trace.h"
#include "flywheel/base/waits.h"
#include "flywheel/rl/actor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/metrics.h"
#include "flywheel/envs/env_pool.h"
#include "flywheel/format/types.h"
#include "flywheel/replay/service/client.h"
#include "flywheel/rl/service/weight_service.h"

namespace flywheel::rl {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// How long one weight wait asks the server to hold the call, so that `stop`
// is seen within this much.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(500);

bool Retryable(const Status& s) { return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s); }

// One unroll's column types and the step buffers they are appended from.
struct Columns {
  format::DataType obs, action, scalar_f32, flag, version;
  std::vector<float> obs_now, obs_next, next_obs, logprob, reward, ep_return;
  std::vector<int64_t> action_ids;
  std::vector<float> action_cont;
  std::unique_ptr<bool[]> terminated, truncated;
  int64_t version_value = 0;
};

format::DataType Type(std::string_view text) {
  auto t = format::DataType::Parse(text);
  return t.ok() ? *t : format::DataType();
}

class Actor {
 public:
  Actor(const ActorOptions& o, const std::atomic<bool>& stop,
        const std::function<void(const ActorStats&)>& on_stats)
      : o_(o), stop_(stop), on_stats_(on_stats), client_(o.address), weights_(o.address) {}

  Status Run() {
    start_ = Clock::now();
    last_stats_ = start_;
    FW_RETURN_IF_ERROR(MakePool());
    FW_RETURN_IF_ERROR(OpenWriter());
    FW_RETURN_IF_ERROR(WaitForWeights(0));
    if (stop_.load()) return Finish();
    FW_ASSIGN_OR_RETURN(envs::Batch first, pool_->Reset());
    CopyObs(first.view.obs, cols_.obs_now.data());
    while (!stop_.load() && (o_.max_unrolls == 0 || stats_.unrolls < o_.max_unrolls)) {
      const int64_t acted_with = policy_->version();
      FW_ASSIGN_OR_RETURN(bool unroll_done, Unroll());
      if (!unroll_done) break;
      FW_ASSIGN_OR_RETURN(bool open, SendItem());
      if (!open) break;
      ++stats_.unrolls;
      MaybeReportStats();
      PublishMetrics();
      if (o_.max_unrolls > 0 && stats_.unrolls >= o_.max_unrolls) break;
      if (o_.on_policy) {
        FW_RETURN_IF_ERROR(WaitForWeights(acted_with));
      } else {
        FW_RETURN_IF_ERROR(PollWeights(acted_with));
      }
    }
    return Finish();
  }

 private:
  Status MakePool() {
    envs::EnvPoolOptions po;
    po.num_envs = o_.num_envs;
    po.num_threads = o_.num_threads;
    po.seed = o_.env_seed;
    po.autoreset_mode = envs::AutoresetMode::kSameStep;
    if (o_.max_episode_steps >= 0) po.max_episode_steps = {o_.max_episode_steps};
    FW_ASSIGN_OR_RETURN_CTX(pool_, envs::EnvPool::Make(o_.env_id, po), "actor env pool");
    const envs::Space& os = pool_->observation_space();
    const envs::Space& as = pool_->action_space();
    if (!os.is_box() || (os.dtype != envs::DType::kFloat32 && os.dtype != envs::DType::kFloat64)) {
      return absl::InvalidArgumentError(absl::StrCat("env '", o_.env_id, "': observation space ", os.ToString(),
                                                     " is not a float Box; MLP actors need float observations"));
    }
    if (as.is_box() && as.dtype != envs::DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("env '", o_.env_id, "': action space ", as.ToString(),
                                                     " is not float32"));
    }
    obs_dim_ = os.num_elements();
    discrete_ = as.is_discrete();
    act_dim_ = discrete_ ? as.n : as.num_elements();
    const int e = o_.num_envs;
    cols_.obs = Type(absl::StrCat("float32[", e, ",", obs_dim_, "]"));
    cols_.action = discrete_ ? Type(absl::StrCat("int64[", e, "]")) : Type(absl::StrCat("float32[", e, ",", act_dim_, "]"));
    cols_.scalar_f32 = Type(absl::StrCat("float32[", e, "]"));
    cols_.flag = Type(absl::StrCat("bool[", e, "]"));
    cols_.version = Type("int64");
    cols_.obs_now.assign(static_cast<size_t>(e * obs_dim_), 0.f);
    cols_.obs_next.assign(cols_.obs_now.size(), 0.f);
    cols_.next_obs.assign(cols_.obs_now.size(), 0.f);
    cols_.logprob.assign(e, 0.f);
    cols_.reward.assign(e, 0.f);
    cols_.ep_return.assign(e, 0.f);
    cols_.terminated = std::make_unique<bool[]>(e);
    cols_.truncated = std::make_unique<bool[]>(e);
    running_return_.assign(e, 0.0);
    env_actions_.assign(static_cast<size_t>(e) * as.row_bytes(), 0);
    return Status();
  }

  Status OpenWriter() {
    replay::RemoteWriterOptions wo;
    wo.writer.chunk_length = o_.unroll_length;
    wo.writer.codec = format::Codec::kNone;  // float observations barely compress
    wo.writer.max_history = 2 * o_.unroll_length;
    // One unroll in flight: a full queue blocks the actor at once instead of
    // letting it run ahead with a policy that ages while its items wait.
    wo.max_in_flight_items = 1;
    wo.reconnect_timeout = o_.connect_timeout;
    FW_ASSIGN_OR_RETURN_CTX(writer_, client_.NewWriter(wo), "actor replay writer");
    return Status();
  }

  // Waits until the store has a version newer than `have` (or `stop`),
  // retrying while the server cannot be reached.
  Status WaitForWeights(int64_t have) {
    const Clock::time_point t0 = Clock::now();
    // Listed by hang diagnosis (SIGUSR1, the watchdog) while it waits.
    obs::BlockedWait blocked("actor", absl::StrCat("actor waiting for policy weights of '", o_.model, "'"),
                             absl::StrCat("needs a version newer than ", have,
                                          "; the learner publishes one after each update (a slow or stuck "
                                          "learner, or an unreachable weight server, keeps it waiting)"));
    absl::Time give_up = absl::Now() + o_.connect_timeout;
    bool said = false;
    while (!stop_.load()) {
      Result<WeightsRef> w = weights_.Fetch(o_.model, have, kWaitSlice);
      if (w.ok() && *w != nullptr) {
        stats_.wait_weights_s += Since(t0);
        return Adopt(*w);
      }
      if (!w.ok() && !Retryable(w.status())) return Annotate(w.status(), "actor: fetching weights");
      if (w.ok()) give_up = absl::Now() + o_.connect_timeout;
      // Only an unreachable server is given up on, never a slow learner.
      if (!w.ok() && absl::Now() > give_up) {
        return Annotate(w.status(), absl::StrCat("actor: weight server unreachable for ",
                                                 absl::FormatDuration(o_.connect_timeout)));
      }
      if (!said && Since(t0) > 10) {
        FW_LOG(INFO) << "actor: waiting for policy weights newer than version " << have;
        said = true;
      }
      MaybeReportStats();
    }
    stats_.wait_weights_s += Since(t0);
    return Status();
  }

  Status PollWeights(int64_t have) {
    const Clock::time_point t0 = Clock::now();
    Result<WeightsRef> w = weights_.Fetch(o_.model, have, absl::ZeroDuration());
    stats_.wait_weights_s += Since(t0);
    if (w.ok() && *w != nullptr) return Adopt(*w);
    if (!w.ok() && !Retryable(w.status())) return Annotate(w.status(), "actor: fetching weights");
    return Status();  // keep acting with what we have; the writer rides out a restart
  }

  Status Adopt(const WeightsRef& w) {
    auto p = MlpPolicy::FromWeights(*w, o_.activation,
                                    discrete_ ? PolicyHead::kCategorical : PolicyHead::kGaussian);
    if (!p.ok()) return Annotate(p.status(), absl::StrCat("actor: policy version ", w->version));
    if (p->obs_dim() != obs_dim_ || p->out_dim() != act_dim_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "actor: policy version ", w->version, " maps ", p->obs_dim(), " inputs to ", p->out_dim(),
          " outputs, but env '", o_.env_id, "' has ", obs_dim_, " observation values and ",
          discrete_ ? absl::StrCat(act_dim_, " actions") : absl::StrCat(act_dim_, " action values")));
    }
    if (policy_ != nullptr) ++stats_.weight_updates;
    policy_ = std::make_unique<MlpPolicy>(*std::move(p));
    stats_.policy_version = policy_->version();
    return Status();
  }

  void CopyObs(const void* src, float* dst) const {
    const size_t n = static_cast<size_t>(o_.num_envs * obs_dim_);
    if (pool_->observation_space().dtype == envs::DType::kFloat32) {
      std::memcpy(dst, src, n * sizeof(float));
    } else {
      const double* d = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(d[i]);
    }
  }

  // T steps; false when stopped part-way (nothing is sent then).
  Result<bool> Unroll() {
    const int e = o_.num_envs;
    const envs::Space& as = pool_->action_space();
    cols_.version_value = policy_->version();
    for (int64_t t = 0; t < o_.unroll_length; ++t) {
      if (stop_.load()) return false;
      Clock::time_point t0 = Clock::now();
      policy_->Act(cols_.obs_now.data(), e, rng_, &out_);
      if (discrete_) {
        cols_.action_ids = out_.discrete;
        int64_t* a = reinterpret_cast<int64_t*>(env_actions_.data());
        for (int i = 0; i < e; ++i) a[i] = out_.discrete[i] + as.start;
      } else {
        cols_.action_cont = out_.continuous;
        float* a = reinterpret_cast<float*>(env_actions_.data());
        for (size_t i = 0; i < out_.continuous.size(); ++i) {
          const size_t k = i % static_cast<size_t>(act_dim_);
          a[i] = static_cast<float>(std::clamp<double>(out_.continuous[i], as.low[k], as.high[k]));
        }
      }
      std::copy(out_.log_prob.begin(), out_.log_prob.end(), cols_.logprob.begin());
      stats_.act_s += Since(t0);

      t0 = Clock::now();
      FW_TRACE_SPAN("actor", "step");  // env step and recording, to the end of the iteration
      FW_ASSIGN_OR_RETURN(envs::Batch b, pool_->Step(env_actions_.data()));
      stats_.step_s += Since(t0);

      t0 = Clock::now();
      const envs::BufferView& v = b.view;
      // next_obs: the observation the step led to (the terminal one where
      // the episode ended), obs_next: what the next step acts on.
      CopyObs(v.obs, cols_.obs_next.data());
      cols_.next_obs = cols_.obs_next;
      for (int i = 0; i < e; ++i) {
        cols_.reward[i] = static_cast<float>(v.reward[i]);
        cols_.terminated[i] = v.terminated[i];
        cols_.truncated[i] = v.truncated[i];
        running_return_[i] += v.reward[i];
        cols_.ep_return[i] = std::numeric_limits<float>::quiet_NaN();
        if (v.terminated[i] || v.truncated[i]) {
          cols_.ep_return[i] = static_cast<float>(running_return_[i]);
          stats_.last_return = running_return_[i];
          ++stats_.episodes;
          running_return_[i] = 0;
          if (v.has_final_obs != nullptr && v.has_final_obs[i]) {
            const size_t row = pool_->observation_space().row_bytes();
            CopyRow(static_cast<const char*>(v.final_obs) + i * row, &cols_.next_obs[i * obs_dim_]);
          }
        }
      }
      const void* action = discrete_ ? static_cast<const void*>(cols_.action_ids.data())
                                     : static_cast<const void*>(cols_.action_cont.data());
      FW_RETURN_IF_ERROR(writer_->Append({{"obs", cols_.obs, cols_.obs_now.data()},
                                          {"action", cols_.action, action},
                                          {"logprob", cols_.scalar_f32, cols_.logprob.data()},
                                          {"reward", cols_.scalar_f32, cols_.reward.data()},
                                          {"terminated", cols_.flag, cols_.terminated.get()},
                                          {"truncated", cols_.flag, cols_.truncated.get()},
                                          {"next_obs", cols_.obs, cols_.next_obs.data()},
                                          {"episode_return", cols_.scalar_f32, cols_.ep_return.data()},
                                          {"version", cols_.version, &cols_.version_value}}));
      cols_.obs_now.swap(cols_.obs_next);
      stats_.write_s += Since(t0);
      stats_.env_steps += e;
    }
    return true;
  }

  void CopyRow(const char* src, float* dst) const {
    if (pool_->observation_space().dtype == envs::DType::kFloat32) {
      std::memcpy(dst, src, static_cast<size_t>(obs_dim_) * sizeof(float));
    } else {
      const double* d = reinterpret_cast<const double*>(src);
      for (int64_t k = 0; k < obs_dim_; ++k) dst[k] = static_cast<float>(d[k]);
    }
  }

  // Sends the unroll as one item; false when the table was closed (the run
  // is over).
  Result<bool> SendItem() {
    const Clock::time_point t0 = Clock::now();
    const int64_t t = o_.unroll_length;
    const std::vector<std::pair<std::string, int64_t>> traj = {
        {"obs", t},        {"action", t},   {"logprob", t},        {"reward", t}, {"terminated", t},
        {"truncated", t},  {"next_obs", t}, {"episode_return", t}, {"version", t}};
    auto key = writer_->CreateItem(o_.table, 1.0, traj);
    Status s = key.status();
    if (s.ok() && o_.on_policy) {
      // In slices, so that `stop` ends a wait on a full queue.
      do {
        s = writer_->Flush(kWaitSlice * 4);
      } while (absl::IsDeadlineExceeded(s) && !stop_.load());
    }
    stats_.write_s += Since(t0);
    if (absl::IsCancelled(s)) {
      FW_LOG(INFO) << "actor: " << s.message() << "; stopping";
      closed_ = true;
      return false;
    }
    if (!s.ok() && stop_.load()) return false;
    FW_RETURN_IF_ERROR(Annotate(s, "actor: sending an unroll"));
    return true;
  }

  void MaybeReportStats(bool force = false) {
    if (!on_stats_) return;
    const Clock::time_point now = Clock::now();
    if (!force && now - last_stats_ < absl::ToChronoNanoseconds(o_.stats_interval)) return;
    last_stats_ = now;
    stats_.elapsed_s = Since(start_);
    on_stats_(stats_);
  }

  Status Finish() {
    Status s;
    if (!closed_ && !stop_.load()) s = writer_->Flush(o_.connect_timeout);
    if (absl::IsCancelled(s)) s = Status();
    writer_->Close().IgnoreError();
    pool_->Close();
    MaybeReportStats(true);
    PublishMetrics();
    return s;
  }

  // Adds what changed since the last call to the process-wide series
  // (once per unroll: nothing per step).
  void PublishMetrics() {
    struct Series {
      Counter *steps, *episodes, *unrolls;
      FloatCounter *step, *act, *write, *wait_weights;
      Gauge* version;
    };
    static const Series m = [] {
      auto stage = [](const char* name) {
        return Metrics().GetFloatCounter("flywheel_actor_stage_seconds_total",
                                  "Actor time per stage: step (EnvPool), act (policy inference), write (to replay, "
                                  "incl. back-pressure), wait_weights",
                                  {{"stage", name}});
      };
      return Series{Metrics().GetCounter("flywheel_actor_env_steps_total", "Env steps taken by actors"),
                    Metrics().GetCounter("flywheel_actor_episodes_total", "Episodes finished by actors"),
                    Metrics().GetCounter("flywheel_actor_unrolls_total", "Unrolls sent to replay by actors"),
                    stage("step"), stage("act"), stage("write"), stage("wait_weights"),
                    Metrics().GetGauge("flywheel_actor_policy_version", "Policy version the actor acts with")};
    }();
    m.steps->Increment(stats_.env_steps - published_.env_steps);
    m.episodes->Increment(stats_.episodes - published_.episodes);
    m.unrolls->Increment(stats_.unrolls - published_.unrolls);
    m.step->Add(stats_.step_s - published_.step_s);
    m.act->Add(stats_.act_s - published_.act_s);
    m.write->Add(stats_.write_s - published_.write_s);
    m.wait_weights->Add(stats_.wait_weights_s - published_.wait_weights_s);
    m.version->Set(static_cast<double>(stats_.policy_version));
    published_ = stats_;
  }

  const ActorOptions& o_;
  const std::atomic<bool>& stop_;
  std::function<void(const ActorStats&)> on_stats_;
  ActorStats published_;  // what PublishMetrics has added to the series
  replay::Client client_;
  WeightClient weights_;
  std::unique_ptr<replay::RemoteWriter> writer_;
  std::unique_ptr<envs::EnvPool> pool_;
  std::unique_ptr<MlpPolicy> policy_;
  SplitMix64 rng_{0};
  PolicyOutput out_;
  Columns cols_;
  std::vector<double> running_return_;
  std::vector<char> env_actions_;
  int64_t obs_dim_ = 0, act_dim_ = 0;
  bool discrete_ = true;
  bool closed_ = false;
  ActorStats stats_;
  Clock::time_point start_, last_stats_;

 public:
  void SeedPolicy(uint64_t seed) { rng_ = SplitMix64(seed); }
};

}  // namespace

Status RunActor(const ActorOptions& options, const std::atomic<bool>& stop,
                const std::function<void(const ActorStats&)>& on_stats) {
  if (options.address.empty()) return absl::InvalidArgumentError("actor: no server address");
  if (options.unroll_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("actor: unroll_length ", options.unroll_length, " must be >= 1"));
  }
  Actor actor(options, stop, on_stats);
  actor.SeedPolicy(options.policy_seed);
  return actor.Run();
}

}  // namespace flywheel::rl
