// MountainCar-v0 and MountainCarContinuous-v0: Moore's mountain car, as
// Gymnasium's mountain_car.py and continuous_mountain_car.py. Inelastic
// wall at the left end; the continuous version keeps its state in float32
// (Gymnasium stores it as np.float32 after every step) and pays
// -0.1 * action^2 per step plus 100 on reaching the goal.
#include <algorithm>
#include <cmath>

#include "flywheel/envs/classic_control/classic_control.h"

namespace flywheel::envs {
namespace {

constexpr double kMinPosition = -1.2;
constexpr double kMaxPosition = 0.6;
constexpr double kMaxSpeed = 0.07;

// Spaces are shared by every instance (and kept out of the envs' cache lines).
const Space& CarObservationSpace() {
  static const Space* space =
      new Space(Space::Box({static_cast<float>(kMinPosition), -static_cast<float>(kMaxSpeed)},
                           {static_cast<float>(kMaxPosition), static_cast<float>(kMaxSpeed)}, {2}));
  return *space;
}

void Observe(const double* s, void* obs) {
  auto* o = static_cast<float*>(obs);
  o[0] = static_cast<float>(s[0]);
  o[1] = static_cast<float>(s[1]);
}

// alignas(64): envs of a pool are stepped by different threads; whole cache
// lines keep one env's writes from evicting a neighbour's.
class alignas(64) MountainCar final : public Env {
 public:
  explicit MountainCar(KwargReader& kw)
      : goal_velocity_(kw.Get("goal_velocity", 0.0)),
        force_(kw.Get("force", 0.001)),
        gravity_(kw.Get("gravity", 0.0025)) {}

  const Space& observation_space() const override { return CarObservationSpace(); }
  const Space& action_space() const override {
    static const Space* space = new Space(Space::Discrete(3));
    return *space;
  }
  int state_size() const override { return 2; }
  void Seed(uint64_t seed) override { rng_.Seed(seed); }

  Status Reset(std::span<const double> state, void* obs) override {
    s_[0] = state.empty() ? rng_.Uniform(-0.6, -0.4) : state[0];
    s_[1] = state.empty() ? 0.0 : state[1];
    Observe(s_, obs);
    return absl::OkStatus();
  }

  Status Step(const void* action, void* obs, StepResult* result) override {
    const auto a = static_cast<double>(*static_cast<const int64_t*>(action));
    double position = s_[0], velocity = s_[1];
    velocity += (a - 1) * force_ + std::cos(3 * position) * (-gravity_);
    velocity = Clip(velocity, -kMaxSpeed, kMaxSpeed);
    position += velocity;
    position = Clip(position, kMinPosition, kMaxPosition);
    if (position == kMinPosition && velocity < 0) velocity = 0;
    result->terminated = position >= kGoalPosition && velocity >= goal_velocity_;
    result->reward = -1.0;
    s_[0] = position, s_[1] = velocity;
    Observe(s_, obs);
    return absl::OkStatus();
  }

  void GetState(double* state) const override { state[0] = s_[0], state[1] = s_[1]; }

 private:
  static constexpr double kGoalPosition = 0.5;
  // np.clip(x, lo, hi) on a scalar (NaN stays NaN).
  static double Clip(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

  const double goal_velocity_, force_, gravity_;
  EnvRng rng_;
  double s_[2] = {0, 0};
};

// alignas(64): envs of a pool are stepped by different threads; whole cache
// lines keep one env's writes from evicting a neighbour's.
class alignas(64) MountainCarContinuous final : public Env {
 public:
  explicit MountainCarContinuous(KwargReader& kw)
      : goal_velocity_(kw.Get("goal_velocity", 0.0)), power_(kw.Get("power", 0.0015)) {}

  const Space& observation_space() const override { return CarObservationSpace(); }
  const Space& action_space() const override {
    static const Space* space = new Space(Space::UniformBox(kMinAction, kMaxAction, {1}));
    return *space;
  }
  int state_size() const override { return 2; }
  void Seed(uint64_t seed) override { rng_.Seed(seed); }

  Status Reset(std::span<const double> state, void* obs) override {
    s_[0] = state.empty() ? rng_.Uniform(-0.6, -0.4) : state[0];
    s_[1] = state.empty() ? 0.0 : state[1];
    Observe(s_, obs);
    return absl::OkStatus();
  }

  Status Step(const void* action, void* obs, StepResult* result) override {
    const double a = *static_cast<const float*>(action);
    double position = s_[0], velocity = s_[1];
    const double force = std::min(std::max(a, kMinAction), kMaxAction);
    velocity += force * power_ - 0.0025 * std::cos(3 * position);
    if (velocity > kMaxSpeed) velocity = kMaxSpeed;
    if (velocity < -kMaxSpeed) velocity = -kMaxSpeed;
    position += velocity;
    if (position > kMaxPosition) position = kMaxPosition;
    if (position < kMinPosition) position = kMinPosition;
    if (position == kMinPosition && velocity < 0) velocity = 0;
    result->terminated = position >= kGoalPosition && velocity >= goal_velocity_;
    double reward = 0;
    if (result->terminated) reward = 100.0;
    reward -= a * a * 0.1;  // the unclipped action, as Gymnasium
    result->reward = reward;
    // Gymnasium keeps the state as np.float32 from here on.
    s_[0] = static_cast<float>(position);
    s_[1] = static_cast<float>(velocity);
    Observe(s_, obs);
    return absl::OkStatus();
  }

  void GetState(double* state) const override { state[0] = s_[0], state[1] = s_[1]; }

 private:
  static constexpr double kMinAction = -1.0;
  static constexpr double kMaxAction = 1.0;
  static constexpr double kGoalPosition = 0.45;

  const double goal_velocity_, power_;
  EnvRng rng_;
  double s_[2] = {0, 0};
};

}  // namespace

Result<std::unique_ptr<Env>> NewMountainCar(const EnvKwargs& kwargs) {
  KwargReader kw(kwargs, "MountainCar-v0");
  auto env = std::make_unique<MountainCar>(kw);
  FW_RETURN_IF_ERROR(kw.Finish());
  return env;
}

Result<std::unique_ptr<Env>> NewMountainCarContinuous(const EnvKwargs& kwargs) {
  KwargReader kw(kwargs, "MountainCarContinuous-v0");
  auto env = std::make_unique<MountainCarContinuous>(kw);
  FW_RETURN_IF_ERROR(kw.Finish());
  return env;
}

}  // namespace flywheel::envs
