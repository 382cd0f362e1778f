// Pendulum-v1: the inverted pendulum swing-up, as Gymnasium's pendulum.py:
// torque clipped to [-2, 2], speed clipped to [-8, 8], semi-implicit Euler
// with dt = 0.05, cost angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2 (the
// reward is its negative), never terminates (TimeLimit truncates at 200).
#include <cmath>
#include <numbers>

#include "flywheel/envs/classic_control/classic_control.h"

namespace flywheel::envs {
namespace {

constexpr double kPi = std::numbers::pi;

// Python's float modulo (and numpy's remainder): the result has the sign of
// the divisor.
double PyMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}

double AngleNormalize(double x) { return PyMod(x + kPi, 2 * kPi) - kPi; }

// alignas(64): envs of a pool are stepped by different threads; whole cache
// lines keep one env's writes from evicting a neighbour's.
class alignas(64) Pendulum final : public Env {
 public:
  explicit Pendulum(KwargReader& kw)
      : g_(kw.Get("g", 10.0)), m_(kw.Get("m", 1.0, true)), l_(kw.Get("l", 1.0, true)) {}

  // Spaces are shared by every instance (and kept out of the env's cache lines).
  const Space& observation_space() const override {
    static const Space* space =
        new Space(Space::Box({-1.0, -1.0, -kMaxSpeed}, {1.0, 1.0, kMaxSpeed}, {3}));
    return *space;
  }
  const Space& action_space() const override {
    static const Space* space = new Space(Space::UniformBox(-kMaxTorque, kMaxTorque, {1}));
    return *space;
  }
  int state_size() const override { return 2; }
  void Seed(uint64_t seed) override { rng_.Seed(seed); }

  Status Reset(std::span<const double> state, void* obs) override {
    // uniform(low=-high, high=high) with high = (pi, 1): one draw per element.
    s_[0] = state.empty() ? rng_.Uniform(-kPi, kPi) : state[0];
    s_[1] = state.empty() ? rng_.Uniform(-1.0, 1.0) : state[1];
    Observe(obs);
    return absl::OkStatus();
  }

  Status Step(const void* action, void* obs, StepResult* result) override {
    const double th = s_[0], thdot = s_[1];
    const double a = *static_cast<const float*>(action);
    const double u = a < -kMaxTorque ? -kMaxTorque : (a > kMaxTorque ? kMaxTorque : a);
    const double an = AngleNormalize(th);
    const double costs = an * an + 0.1 * (thdot * thdot) + 0.001 * (u * u);
    double newthdot = thdot + (3 * g_ / (2 * l_) * std::sin(th) + 3.0 / (m_ * (l_ * l_)) * u) * kDt;
    newthdot = newthdot < -kMaxSpeed ? -kMaxSpeed : (newthdot > kMaxSpeed ? kMaxSpeed : newthdot);
    const double newth = th + newthdot * kDt;
    s_[0] = newth, s_[1] = newthdot;
    result->reward = -costs;
    result->terminated = false;
    Observe(obs);
    return absl::OkStatus();
  }

  void GetState(double* state) const override { state[0] = s_[0], state[1] = s_[1]; }

 private:
  static constexpr double kMaxSpeed = 8;
  static constexpr double kMaxTorque = 2.0;
  static constexpr double kDt = 0.05;

  void Observe(void* obs) const {
    auto* o = static_cast<float*>(obs);
    o[0] = static_cast<float>(std::cos(s_[0]));
    o[1] = static_cast<float>(std::sin(s_[0]));
    o[2] = static_cast<float>(s_[1]);
  }

  const double g_, m_, l_;
  EnvRng rng_;
  double s_[2] = {0, 0};
};

}  // namespace

Result<std::unique_ptr<Env>> NewPendulum(const EnvKwargs& kwargs) {
  KwargReader kw(kwargs, "Pendulum-v1");
  auto env = std::make_unique<Pendulum>(kw);
  FW_RETURN_IF_ERROR(kw.Finish());
  return env;
}

}  // namespace flywheel::envs
