// The environment interface EnvPool steps: one simulator instance with
// Gymnasium's reset/step contract, minus time limits (EnvPool applies
// max_episode_steps, as Gymnasium's TimeLimit wrapper does) and minus
// autoreset (EnvPool's too). docs/envs.md describes the semantics.
//
// Thread-safety: an Env is used by one thread at a time; EnvPool hands each
// env from thread to thread with the needed memory ordering, so an
// implementation needs no locks. Envs must not share mutable state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "flywheel/base/rng.h"
#include "flywheel/base/status.h"
#include "flywheel/envs/space.h"

namespace flywheel::envs {

struct StepResult {
  double reward = 0;
  bool terminated = false;  // a terminal state of the MDP was reached
};

class Env {
 public:
  virtual ~Env() = default;

  virtual const Space& observation_space() const = 0;
  virtual const Space& action_space() const = 0;
  // Number of doubles in the internal state that Reset() accepts and
  // GetState() writes (e.g. 4 for CartPole: x, x_dot, theta, theta_dot).
  virtual int state_size() const = 0;

  // Reseeds the env's random stream (Gymnasium's reset(seed=...)). Later
  // resets continue the stream.
  virtual void Seed(uint64_t seed) = 0;

  // Starts an episode and writes its first observation to `obs`
  // (observation_space().row_bytes() bytes). With `state` empty the initial
  // state is drawn from the env's random stream; otherwise it is exactly
  // `state`. REQUIRES: state is empty or has state_size() values.
  virtual Status Reset(std::span<const double> state, void* obs) = 0;

  // Advances one step and writes the next observation. `action` is one row of
  // action_space(): an int64 within a Discrete space's range (EnvPool checks),
  // or num_elements() values of a Box's dtype (any values; envs clip as
  // Gymnasium's do). REQUIRES: Reset() was called, and no step since then
  // returned terminated.
  virtual Status Step(const void* action, void* obs, StepResult* result) = 0;

  // Writes the current internal state (state_size() doubles).
  virtual void GetState(double* state) const = 0;
};

// Numeric constructor arguments of one env (e.g. {"g": 9.81} for
// Pendulum-v1); each env documents the names it takes.
using EnvKwargs = std::map<std::string, double>;

// Reads EnvKwargs in an env's constructor and rejects names it did not ask
// for: Get() each known argument, then Finish().
class KwargReader {
 public:
  KwargReader(const EnvKwargs& kwargs, std::string_view env_id)
      : kwargs_(kwargs), env_id_(env_id) {}
  // The value of `name`, or `default_value` when absent. The value must be
  // finite, and positive when `positive` is set (else an error at Finish()).
  double Get(const std::string& name, double default_value, bool positive = false);
  // InvalidArgument naming the env, the bad or unknown argument and the
  // known ones.
  Status Finish() const;

 private:
  const EnvKwargs& kwargs_;
  std::string env_id_;
  std::string known_;
  std::string error_;
  size_t used_ = 0;
};

// The random stream of one env: SplitMix64 over the seed, with numpy's
// Generator.uniform formula (low + (high - low) * u, u uniform in [0, 1) with
// 53 random bits). Not numpy's PCG64 stream: the same seed gives different
// numbers than Gymnasium, from the same distributions.
class EnvRng {
 public:
  explicit EnvRng(uint64_t seed = 0) : gen_(Mix64(seed)) {}
  void Seed(uint64_t seed) { gen_ = SplitMix64(Mix64(seed)); }
  double Uniform(double low, double high) { return low + (high - low) * gen_.UniformDouble(); }

 private:
  SplitMix64 gen_;
};

}  // namespace flywheel::envs
