#include "flywheel/rl/run_config.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "flywheel/base/toml.h"
#include "flywheel/envs/registry.h"
#include "flywheel/io/file_system.h"

namespace flywheel::rl {
namespace {

// The table `key` of the root (an empty one when absent); an error when the
// key holds something else.
Result<const toml::Value*> Section(const toml::Value& root, std::string_view key) {
  static const toml::Value* const kEmpty = new toml::Value();
  const toml::Value* v = root.Find(key);
  if (v == nullptr) return kEmpty;
  if (!v->is_table()) return v->Error(absl::StrCat("[", AsAbsl(key), "] must be a table"));
  return v;
}

// An integer in [lo, hi] (or the default when absent).
Result<int64_t> IntIn(const toml::Value& t, std::string_view key, int64_t def, int64_t lo, int64_t hi) {
  FW_ASSIGN_OR_RETURN(int64_t v, toml::GetInt(t, key, def));
  if (v < lo || v > hi) {
    const toml::Value* where = t.Find(key) != nullptr ? t.Find(key) : &t;
    return where->Error(absl::StrCat(AsAbsl(key), " = ", v, " must be in [", lo, ", ", hi, "]"));
  }
  return v;
}

}  // namespace

int64_t RunConfig::resolved_queue_size() const {
  return queue_size > 0 ? queue_size : 2 * std::max<int64_t>(actors, batch_unrolls);
}

std::string RunConfig::resolved_run_dir() const { return run_dir.empty() ? "runs/" + name : run_dir; }

Result<RunConfig> ParseRunConfig(std::string_view text, const std::string& source) {
  FW_ASSIGN_OR_RETURN(toml::Value root, toml::Parse(text, source));
  FW_RETURN_IF_ERROR(toml::CheckKeys(root, {"run", "env", "actor", "policy", "learner", "replay"}));
  RunConfig c;
  c.path = source;

  FW_ASSIGN_OR_RETURN(const toml::Value* run, Section(root, "run"));
  // The learner reads the stop conditions; they are listed so that a
  // misspelt one is caught here, before anything starts.
  FW_RETURN_IF_ERROR(toml::CheckKeys(*run, {"name", "run_dir", "seed", "host", "port", "progress_interval_s",
                                            "stop_mean_return", "max_env_steps", "max_updates", "max_seconds",
                                            "checkpoint_interval"}));
  const std::string stem = std::filesystem::path(source).stem().string();
  FW_ASSIGN_OR_RETURN(c.name, toml::GetString(*run, "name", stem.empty() ? "run" : stem));
  FW_ASSIGN_OR_RETURN(c.run_dir, toml::GetString(*run, "run_dir", ""));
  FW_ASSIGN_OR_RETURN(int64_t seed, IntIn(*run, "seed", 0, 0, std::numeric_limits<int64_t>::max()));
  c.seed = static_cast<uint64_t>(seed);
  FW_ASSIGN_OR_RETURN(c.host, toml::GetString(*run, "host", "127.0.0.1"));
  FW_ASSIGN_OR_RETURN(int64_t port, IntIn(*run, "port", 0, 0, 65535));
  c.port = static_cast<int>(port);
  FW_ASSIGN_OR_RETURN(double progress_s, toml::GetDouble(*run, "progress_interval_s", 5.0));
  if (!(progress_s > 0) || progress_s > 3600) {
    return run->Find("progress_interval_s")->Error("progress_interval_s must be in (0, 3600]");
  }
  c.progress_interval_ms = static_cast<int64_t>(progress_s * 1000);

  FW_ASSIGN_OR_RETURN(const toml::Value* env, Section(root, "env"));
  FW_RETURN_IF_ERROR(toml::CheckKeys(*env, {"id", "num_envs", "num_threads", "max_episode_steps"}));
  FW_ASSIGN_OR_RETURN(c.env_id, toml::GetString(*env, "id"));
  if (auto spec = envs::FindEnv(c.env_id); !spec.ok()) return env->Find("id")->Error(std::string(spec.status().message()));
  FW_ASSIGN_OR_RETURN(int64_t num_envs, IntIn(*env, "num_envs", 8, 1, 65536));
  c.num_envs = static_cast<int>(num_envs);
  FW_ASSIGN_OR_RETURN(int64_t threads, IntIn(*env, "num_threads", 1, 1, 1024));
  c.num_threads = static_cast<int>(threads);
  FW_ASSIGN_OR_RETURN(c.max_episode_steps, IntIn(*env, "max_episode_steps", -1, -1, int64_t{1} << 40));

  FW_ASSIGN_OR_RETURN(const toml::Value* actor, Section(root, "actor"));
  FW_RETURN_IF_ERROR(toml::CheckKeys(*actor, {"count", "unroll_length", "mode"}));
  FW_ASSIGN_OR_RETURN(int64_t actors, IntIn(*actor, "count", 1, 1, 4096));
  c.actors = static_cast<int>(actors);
  FW_ASSIGN_OR_RETURN(c.unroll_length, IntIn(*actor, "unroll_length", 128, 1, 1 << 20));

  FW_ASSIGN_OR_RETURN(const toml::Value* policy, Section(root, "policy"));
  FW_RETURN_IF_ERROR(toml::CheckKeys(*policy, {"hidden", "activation"}));
  if (const toml::Value* h = policy->Find("hidden"); h != nullptr) {
    if (!h->is_array()) return h->Error("hidden must be an array of layer sizes, e.g. [64, 64]");
    c.hidden.clear();
    for (const toml::Value& v : h->as_array()) {
      if (!v.is_int() || v.as_int() < 1 || v.as_int() > 65536) {
        return v.Error("hidden: each layer size must be an integer in [1, 65536]");
      }
      c.hidden.push_back(v.as_int());
    }
  }
  FW_ASSIGN_OR_RETURN(std::string act, toml::GetString(*policy, "activation", "tanh"));
  if (act == "tanh") {
    c.activation = Activation::kTanh;
  } else if (act == "relu") {
    c.activation = Activation::kRelu;
  } else {
    return policy->Find("activation")->Error(absl::StrCat("activation \"", act, "\": expected \"tanh\" or \"relu\""));
  }

  FW_ASSIGN_OR_RETURN(const toml::Value* learner, Section(root, "learner"));
  FW_ASSIGN_OR_RETURN(c.algorithm, toml::GetString(*learner, "algorithm", "ppo"));
  if (c.algorithm != "ppo" && c.algorithm != "impala") {
    const toml::Value* where = learner->Find("algorithm");
    return where->Error(absl::StrCat("algorithm \"", c.algorithm, "\": expected \"ppo\" or \"impala\""));
  }
  FW_ASSIGN_OR_RETURN(c.batch_unrolls, IntIn(*learner, "batch_unrolls", c.actors, 1, 1 << 20));
  FW_ASSIGN_OR_RETURN(std::string mode,
                      toml::GetString(*actor, "mode", c.algorithm == "ppo" ? "on_policy" : "async"));
  if (mode != "on_policy" && mode != "async") {
    return actor->Find("mode")->Error(absl::StrCat("mode \"", mode, "\": expected \"on_policy\" or \"async\""));
  }
  c.on_policy = mode == "on_policy";
  if (c.on_policy && c.batch_unrolls > c.actors) {
    // Each on-policy actor sends one unroll per version and waits: a larger
    // batch would never fill.
    const toml::Value* where = learner->Find("batch_unrolls") != nullptr ? learner->Find("batch_unrolls") : learner;
    return where->Error(absl::StrCat("batch_unrolls = ", c.batch_unrolls, " exceeds actor count = ", c.actors,
                                     ": on-policy actors send one unroll per policy version, so the batch "
                                     "would never fill"));
  }

  FW_ASSIGN_OR_RETURN(const toml::Value* rep, Section(root, "replay"));
  FW_RETURN_IF_ERROR(toml::CheckKeys(*rep, {"table", "queue_size"}));
  FW_ASSIGN_OR_RETURN(c.table, toml::GetString(*rep, "table", "unrolls"));
  if (c.table.empty()) return rep->Find("table")->Error("table name must not be empty");
  FW_ASSIGN_OR_RETURN(c.queue_size, IntIn(*rep, "queue_size", 0, 0, int64_t{1} << 30));
  if (c.queue_size > 0 && c.queue_size < c.batch_unrolls) {
    return rep->Find("queue_size")->Error(absl::StrCat("queue_size = ", c.queue_size, " is below batch_unrolls = ",
                                                       c.batch_unrolls, ": a batch could never fill"));
  }
  return c;
}

Result<RunConfig> LoadRunConfig(const std::string& path) {
  FW_ASSIGN_OR_RETURN(std::string text, io::PosixFileSystem()->ReadFile(path));
  return ParseRunConfig(text, path);
}

}  // namespace flywheel::rl
