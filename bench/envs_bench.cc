// EnvPool throughput on CartPole-v1 (the EnvPool section of the RL issue's
// benchmarks), with a plain Python loop over the same dynamics measured in
// the same run.
//
// Workloads, for each batch size in --envs (default 256 and 2048 envs)
// (env steps/s: one env stepping once; random actions, Gymnasium's
// 500-step limit and NEXT_STEP autoreset):
//   raw/<t>t     plain C++ loops calling Env::Step on their envs one after
//                another, resetting ended episodes, on t independent
//                threads (--envs / t envs each): the envs' own cost and what
//                this machine's cores give, the limit of a pool on t threads.
//   barrier/<t>t a hand-written t-thread loop (t > 1): each thread owns a
//                fixed share of the envs, one store starts a batch and a spin
//                barrier ends it, actions are read in place: the best a sync
//                pool could do with the same batches on this machine.
//   sync/<t>t    EnvPool::Step in sync mode with --threads t (the caller
//                plus t - 1 workers).
//   async/<t>t   async mode, num_envs = --envs, batch_size = --envs / 2, t
//                workers: recv a batch, send it back (EnvPool's loop).
//   python_loop  bench/envs_reference_bench.py: a Python for-loop over the
//                reference CartPole (tests/python/envs_reference.py), the
//                baseline of every figure (run once per round, between the
//                C++ runs).
//   python_api   the same script stepping flywheel.envs.make(...) from
//                Python (the C++ pool plus the binding's per-call cost).
// Every figure is the best of --repeats runs of about --seconds; the runs of
// the configurations alternate. Per-step cost in ns = 1e9 / (steps/s).
// Results: bench/results/envs.json (docs/benchmarks.md, "Environments").
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench_util.h"
#include "flywheel/base/rng.h"
#include "flywheel/envs/env_pool.h"
#include "flywheel/envs/registry.h"

namespace flywheel::bench {
namespace {

using envs::EnvPool;
using envs::EnvPoolOptions;

// Random actions, drawn up front: a ring of ActionRows(num_envs) rows of
// num_envs actions, ~256 KiB, so reading it costs every workload the same
// (and little) memory traffic.
int ActionRows(int num_envs) { return std::max(16, 32768 / std::max(1, num_envs)); }
std::vector<int64_t> Actions(int rows, int num_envs, uint64_t seed) {
  std::vector<int64_t> a(static_cast<size_t>(rows) * num_envs);
  SplitMix64 rng(seed);
  for (auto& x : a) x = static_cast<int64_t>(rng.Next() & 1);
  return a;
}

// One thread's raw loop; returns the steps it made.
int64_t RawLoop(int num_envs, double seconds, uint64_t seed) {
  std::vector<std::unique_ptr<envs::Env>> env;
  std::vector<int64_t> elapsed(num_envs, 0);
  for (int i = 0; i < num_envs; ++i) {
    env.push_back(CheckResult(envs::MakeEnv("CartPole-v1"), "make env"));
    env.back()->Seed(seed + static_cast<uint64_t>(i));
  }
  std::vector<float> obs(static_cast<size_t>(num_envs) * 4);
  for (int i = 0; i < num_envs; ++i) Check(env[i]->Reset({}, &obs[i * 4]), "reset");
  const int rows = ActionRows(num_envs);
  const auto actions = Actions(rows, num_envs, seed + 1);
  int64_t steps = 0;
  const double start = Now();
  double now = start;
  for (int64_t t = 0; now - start < seconds; ++t) {
    const int64_t* row = &actions[(t % rows) * num_envs];
    for (int i = 0; i < num_envs; ++i) {
      envs::StepResult r;
      Check(env[i]->Step(&row[i], &obs[i * 4], &r), "step");
      if (r.terminated || ++elapsed[i] >= 500) {
        Check(env[i]->Reset({}, &obs[i * 4]), "reset");
        elapsed[i] = 0;
      }
    }
    steps += num_envs;
    if (t % 16 == 0) now = Now();
  }
  return steps;
}

// `threads` independent raw loops over num_envs / threads envs each, at the
// same time: what this machine's cores give without any pool.
double RunRaw(int num_envs, int threads, double seconds) {
  std::vector<int64_t> steps(threads, 0);
  std::vector<std::thread> pool;
  const double start = Now();
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back(
        [&, i] { steps[i] = RawLoop(std::max(1, num_envs / threads), seconds, 1000 * i); });
  }
  for (auto& t : pool) t.join();
  const double elapsed = Now() - start;
  int64_t total = 0;
  for (int64_t s : steps) total += s;
  return static_cast<double>(total) / elapsed;
}

// Spins until pred(): pauses for ~3 us, then yields now and then (a pure
// spin starves the thread it waits for when the machine's other core is
// busy; EnvPool's Doorbell does the same).
template <typename Pred>
void SpinUntil(Pred pred) {
  for (unsigned i = 1; !pred(); ++i) {
    __builtin_ia32_pause();
    if (i > 128 && i % 8 == 0) std::this_thread::yield();
  }
}

// The best a sync pool could do on `threads` threads: a hand-written loop in
// which thread i owns envs [i n / t, (i + 1) n / t) (allocated by itself),
// the caller starts each batch with one store and waits for the others with
// a spin barrier, and actions are read in place (no hand-off).
double RunBarrier(int num_envs, int threads, double seconds) {
  struct alignas(64) Part {
    std::vector<std::unique_ptr<envs::Env>> env;
    std::vector<float> obs;
    std::vector<int64_t> elapsed;
    std::atomic<int64_t> done{0};
  };
  std::vector<Part> parts(threads);
  alignas(64) std::atomic<int64_t> go{0};
  alignas(64) std::atomic<bool> stop{false};
  const int rows = ActionRows(num_envs);
  const auto actions = Actions(rows, num_envs, 4);
  auto init = [&](int i) {
    Part& p = parts[i];
    const int lo = num_envs * i / threads, hi = num_envs * (i + 1) / threads;
    for (int e = lo; e < hi; ++e) {
      p.env.push_back(CheckResult(envs::MakeEnv("CartPole-v1"), "make env"));
      p.env.back()->Seed(static_cast<uint64_t>(e));
    }
    p.obs.resize(p.env.size() * 4);
    p.elapsed.assign(p.env.size(), 0);
    for (size_t k = 0; k < p.env.size(); ++k) Check(p.env[k]->Reset({}, &p.obs[k * 4]), "reset");
  };
  auto work = [&](int i, int64_t t) {
    Part& p = parts[i];
    const int lo = num_envs * i / threads;
    const int64_t* row = &actions[(t % rows) * num_envs + lo];
    for (size_t k = 0; k < p.env.size(); ++k) {
      envs::StepResult r;
      Check(p.env[k]->Step(&row[k], &p.obs[k * 4], &r), "step");
      if (r.terminated || ++p.elapsed[k] >= 500) {
        Check(p.env[k]->Reset({}, &p.obs[k * 4]), "reset");
        p.elapsed[k] = 0;
      }
    }
  };
  std::atomic<int> ready{0};
  std::vector<std::thread> helpers;
  for (int i = 1; i < threads; ++i) {
    helpers.emplace_back([&, i] {
      init(i);
      ready.fetch_add(1);
      for (int64_t t = 1;; ++t) {
        SpinUntil([&] {
          return go.load(std::memory_order_acquire) >= t || stop.load(std::memory_order_relaxed);
        });
        if (go.load(std::memory_order_acquire) < t) return;
        work(i, t);
        parts[i].done.store(t, std::memory_order_release);
      }
    });
  }
  init(0);
  while (ready.load() < threads - 1) std::this_thread::yield();
  int64_t steps = 0;
  const double start = Now();
  double now = start;
  for (int64_t t = 1; now - start < seconds; ++t) {
    go.store(t, std::memory_order_release);
    work(0, t);
    for (int i = 1; i < threads; ++i) {
      SpinUntil([&] { return parts[i].done.load(std::memory_order_acquire) >= t; });
    }
    steps += num_envs;
    if (t % 16 == 0) now = Now();
  }
  const double rate = static_cast<double>(steps) / (Now() - start);
  stop.store(true);
  for (auto& h : helpers) h.join();
  return rate;
}

std::unique_ptr<EnvPool> MakePool(int num_envs, int batch_size, int threads, double spin_us) {
  EnvPoolOptions o;
  o.num_envs = num_envs;
  o.batch_size = batch_size;
  o.num_threads = threads;
  o.spin = absl::Microseconds(spin_us);
  auto pool = CheckResult(EnvPool::Make("CartPole-v1", o), "make pool");
  CheckResult(pool->Reset(), "reset");
  return pool;
}

double RunSync(int num_envs, int threads, double seconds, double spin_us) {
  auto pool = MakePool(num_envs, 0, threads, spin_us);
  const int rows = ActionRows(num_envs);
  const auto actions = Actions(rows, num_envs, 2);
  for (int t = 0; t < 16; ++t)
    CheckResult(pool->Step(&actions[(t % rows) * num_envs]), "step");  // warm up
  int64_t steps = 0;
  const double start = Now();
  double now = start;
  for (int64_t t = 0; now - start < seconds; ++t) {
    CheckResult(pool->Step(&actions[(t % rows) * num_envs]), "step");
    steps += num_envs;
    if (t % 16 == 0) now = Now();
  }
  return static_cast<double>(steps) / (Now() - start);
}

double RunAsync(int num_envs, int threads, double seconds, double spin_us) {
  const int batch = std::max(1, num_envs / 2);
  auto pool = MakePool(num_envs, batch, threads, spin_us);
  const int rows = ActionRows(batch);
  const auto actions = Actions(rows, batch, 3);
  std::vector<int64_t> all(num_envs, 0);
  Check(pool->Send(all.data()), "send");
  std::vector<int32_t> ids(batch);
  int64_t steps = 0;
  const double start = Now();
  double now = start;
  for (int64_t t = 0; now - start < seconds; ++t) {
    const envs::Batch b = CheckResult(pool->Recv(), "recv");
    ids.assign(b.view.env_id, b.view.env_id + batch);
    Check(pool->Send(&actions[(t % rows) * batch], ids), "send");
    steps += batch;
    if (t % 16 == 0) now = Now();
  }
  return static_cast<double>(steps) / (Now() - start);
}

// Runs the Python side once (--repeats=1) for batches of n envs; null JSON
// when it fails.
nlohmann::json RunPython(const Flags& flags, int n) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string pythonpath = flags.Str("pythonpath").empty() && !ec
                                     ? (exe.parent_path().parent_path() / "python").string()
                                     : flags.Str("pythonpath");
  const std::string cmd = absl::StrCat(
      "PYTHONPATH='", pythonpath, "' '", flags.Str("python"), "' '", SourceDir(),
      "/bench/envs_reference_bench.py' --envs=", n, " --seconds=", flags.Double("seconds"),
      " --repeats=1 --threads=", flags.Str("threads"));
  std::fprintf(stderr, "envs_bench: %s\n", cmd.c_str());
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return nullptr;
  std::string out;
  char buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
  const int rc = ::pclose(p);
  if (rc != 0) {
    std::fprintf(stderr, "envs_bench: the Python side failed (status %d)\n", rc);
    return nullptr;
  }
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

std::string Ns(double steps_per_s) {
  return absl::StrCat(static_cast<int64_t>(1e9 / steps_per_s + 0.5), " ns");
}

}  // namespace
}  // namespace flywheel::bench

namespace flywheel::bench {
namespace {

// All figures for batches of n envs, into `report` (rows "cartpole/n<n>/...").
void RunSize(const Flags& flags, int n, const std::vector<int>& threads, Report& report,
             nlohmann::json& extra) {
  const double seconds = flags.Double("seconds");
  const double spin = flags.Double("spin_us");
  // Alternate the configurations' runs so load bursts hit all of them. The
  // Python side runs once per round too, so its baseline sees the same load
  // as the C++ figures.
  std::map<int, std::vector<double>> raw, barrier, sync, async, api;
  std::vector<double> python_loop;
  nlohmann::json py_runs = nlohmann::json::array();
  for (int64_t r = 0; r < flags.Int("repeats"); ++r) {
    for (int t : threads) {
      raw[t].push_back(RunRaw(n, t, seconds));
      if (t > 1) barrier[t].push_back(RunBarrier(n, t, seconds));
      sync[t].push_back(RunSync(n, t, seconds, spin));
      async[t].push_back(RunAsync(n, t, seconds, spin));
    }
    const nlohmann::json py = RunPython(flags, n);
    if (!py.is_object() || !py["python_loop"].is_object()) continue;
    py_runs.push_back(py);
    python_loop.push_back(py["python_loop"]["steps_per_s"].get<double>());
    if (py["flywheel_api"].is_object()) {
      for (int t : threads) {
        const auto& f = py["flywheel_api"][std::to_string(t)];
        if (f.is_object()) api[t].push_back(f["steps_per_s"].get<double>());
      }
    }
  }
  const double loop = Best(python_loop);
  const std::string base =
      loop > 0 ? "plain Python loop, same dynamics" : "plain Python loop (not run)";
  const std::string prefix = absl::StrCat("cartpole/n", n, "/");

  // Every figure against the Python loop; the note says how close it comes
  // to the raw C++ loops on as many threads (the machine's limit).
  auto add = [&](const std::string& name, const std::vector<double>& v, int t,
                 const std::string& what) {
    const double best = Best(v);
    const double limit = raw.count(t) ? Best(raw[t]) : 0;
    std::string note = absl::StrCat(what, "; ", Ns(best), " per env step");
    if (limit > 0 && !absl::StartsWith(name, "raw")) {
      absl::StrAppend(&note, "; ", static_cast<int>(100 * best / limit + 0.5),
                      "% of the raw C++ loops on ", t, " thread(s)");
    }
    report.Add({prefix + name,
                "steps/s",
                best,
                base,
                loop,
                0,
                note,
                {{"samples", v}, {"ns_per_step", 1e9 / best}, {"envs", n}, {"threads", t}}});
  };
  for (int t : threads) {
    add(absl::StrCat("raw-cpp-loop-", t, "t"), raw[t], t,
        absl::StrCat(n, " envs, Env::Step in plain C++ loops on ", t,
                     " independent thread(s), no pool"));
  }
  for (int t : threads) {
    if (barrier[t].empty()) continue;
    add(absl::StrCat("barrier-cpp-", t, "t"), barrier[t], t,
        absl::StrCat(n, " envs, hand-written loop: ", t,
                     " threads own fixed envs, spin barrier per batch "
                     "(what a sync pool could reach)"));
  }
  for (int t : threads) {
    std::string what = absl::StrCat(n, " envs, sync, ", t, " thread(s)");
    if (!barrier[t].empty()) {
      absl::StrAppend(&what, "; ", static_cast<int>(100 * Best(sync[t]) / Best(barrier[t]) + 0.5),
                      "% of the hand-written barrier loop");
    }
    add(absl::StrCat("sync-", t, "t"), sync[t], t, what);
  }
  for (int t : threads) {
    add(absl::StrCat("async-", t, "t"), async[t], t,
        absl::StrCat(n, " envs, async batch_size ", std::max(1, n / 2), ", ", t,
                     " worker thread(s)"));
  }
  for (int t : threads) {
    if (api[t].empty()) continue;
    add(absl::StrCat("python-api-sync-", t, "t"), api[t], t,
        absl::StrCat(n, " envs, flywheel.envs step() from Python, ", t, " thread(s)"));
  }
  // Pool overhead per env step on one thread: the pool against the raw loop.
  if (sync.count(1) && raw.count(1)) {
    const double pool_ns = 1e9 / Best(sync[1]), raw_ns = 1e9 / Best(raw[1]);
    report.Add(
        {prefix + "ns-per-step-sync-1t",
         "ns",
         pool_ns,
         "raw C++ loop, ns per env step",
         raw_ns,
         0,
         absl::StrCat("per env step, pool (sync, 1 thread) vs the envs alone (lower is better): ",
                      static_cast<int>(pool_ns - raw_ns + 0.5), " ns of pool overhead"),
         {{"pool_overhead_ns", pool_ns - raw_ns}}});
  }
  extra[std::to_string(n)] = {{"python_runs", py_runs}, {"python_loop_samples", python_loop}};
}

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  Flags flags(
      argc, argv,
      {{"envs", "256,2048"},
       {"threads", "1,2"},
       {"seconds", "0.4"},
       {"repeats", "3"},
       {"spin_us", "20"},
       {"python", "/usr/bin/python3"},
       {"pythonpath", ""},
       {"out", SourceDir() + "/bench/results"}},
      "envs_bench [--envs=256,2048] [--threads=1,2] [--seconds=0.4] [--repeats=3] [--spin_us=20] "
      "[--python=/usr/bin/python3] [--pythonpath=BUILD/python] [--out=DIR]");
  std::vector<int> threads;
  for (const auto& t : flags.List("threads")) threads.push_back(std::stoi(t));
  Report report("envs", "EnvPool: CartPole-v1 env steps/s vs a plain Python loop");
  nlohmann::json python = nlohmann::json::object();
  for (const auto& n : flags.List("envs")) RunSize(flags, std::stoi(n), threads, report, python);
  report.extra()["python"] = python;
  TempDir tmp;
  report.Write(flags.Str("out"), MachineInfo(tmp.path()), flags.ToJson());
  return 0;
}
