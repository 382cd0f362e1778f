// Acrobot-v1: Sutton's two-link acrobot with the book's dynamics, as
// Gymnasium's acrobot.py: one RK4 step of dt = 0.2 per action, angles
// wrapped to [-pi, pi], speeds bounded to 4*pi and 9*pi, reward -1 per step
// and 0 on the terminal step, observation (cos t1, sin t1, cos t2, sin t2,
// dt1, dt2).
#include <cmath>
#include <numbers>

#include "flywheel/envs/classic_control/classic_control.h"

namespace flywheel::envs {
namespace {

constexpr double kPi = std::numbers::pi;

// alignas(64): envs of a pool are stepped by different threads; whole cache
// lines keep one env's writes from evicting a neighbour's.
class alignas(64) Acrobot final : public Env {
 public:
  // Spaces are shared by every instance (and kept out of the env's cache lines).
  const Space& observation_space() const override {
    static const Space* space = [] {
      const double high[6] = {1.0, 1.0, 1.0, 1.0, kMaxVel1, kMaxVel2};
      std::vector<double> lo, hi;
      for (double h : high) {
        hi.push_back(static_cast<float>(h));
        lo.push_back(-static_cast<float>(h));
      }
      return new Space(Space::Box(std::move(lo), std::move(hi), {6}));
    }();
    return *space;
  }
  const Space& action_space() const override {
    static const Space* space = new Space(Space::Discrete(3));
    return *space;
  }
  int state_size() const override { return 4; }
  void Seed(uint64_t seed) override { rng_.Seed(seed); }

  Status Reset(std::span<const double> state, void* obs) override {
    for (int i = 0; i < 4; ++i) {
      // Gymnasium draws the start state as float32 (.astype(np.float32));
      // from there on the state is float64.
      s_[i] = state.empty() ? static_cast<float>(rng_.Uniform(-0.1, 0.1)) : state[i];
    }
    Observe(obs);
    return absl::OkStatus();
  }

  Status Step(const void* action, void* obs, StepResult* result) override {
    static constexpr double kTorque[3] = {-1.0, 0.0, 1.0};
    const double torque = kTorque[*static_cast<const int64_t*>(action)];
    // rk4(_dsdt, [s, torque], [0, dt]): the torque's derivative is 0, so it
    // stays a constant of the four-dimensional system.
    const double dt = kDt - 0.0;
    const double dt2 = dt / 2.0;
    double k1[4], k2[4], k3[4], k4[4], y[4];
    Derivs(s_, torque, k1);
    for (int i = 0; i < 4; ++i) y[i] = s_[i] + dt2 * k1[i];
    Derivs(y, torque, k2);
    for (int i = 0; i < 4; ++i) y[i] = s_[i] + dt2 * k2[i];
    Derivs(y, torque, k3);
    for (int i = 0; i < 4; ++i) y[i] = s_[i] + dt * k3[i];
    Derivs(y, torque, k4);
    const double dt6 = dt / 6.0;
    double ns[4];
    for (int i = 0; i < 4; ++i) ns[i] = s_[i] + dt6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    s_[0] = Wrap(ns[0], -kPi, kPi);
    s_[1] = Wrap(ns[1], -kPi, kPi);
    s_[2] = Bound(ns[2], -kMaxVel1, kMaxVel1);
    s_[3] = Bound(ns[3], -kMaxVel2, kMaxVel2);
    result->terminated = -std::cos(s_[0]) - std::cos(s_[1] + s_[0]) > 1.0;
    result->reward = result->terminated ? 0.0 : -1.0;
    Observe(obs);
    return absl::OkStatus();
  }

  void GetState(double* state) const override {
    for (int i = 0; i < 4; ++i) state[i] = s_[i];
  }

 private:
  static constexpr double kDt = 0.2;
  static constexpr double kMaxVel1 = 4 * kPi;
  static constexpr double kMaxVel2 = 9 * kPi;

  // _dsdt with the book's equation for ddtheta2, operation for operation
  // (x**2 is x * x; m1 = m2 = l1 = I1 = I2 = 1, lc1 = lc2 = 0.5, g = 9.8).
  static void Derivs(const double* s, double a, double* out) {
    constexpr double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0,
                     g = 9.8;
    const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    const double d1 =
        m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * std::cos(theta2)) + I1 + I2;
    const double d2 = m2 * (lc2 * lc2 + l1 * lc2 * std::cos(theta2)) + I2;
    const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - kPi / 2.0);
    const double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * std::sin(theta2) -
                        2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                        (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - kPi / 2) + phi2;
    const double ddtheta2 =
        (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * std::sin(theta2) - phi2) /
        (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    out[0] = dtheta1;
    out[1] = dtheta2;
    out[2] = ddtheta1;
    out[3] = ddtheta2;
  }

  // Gymnasium's wrap(): subtracts or adds the range until x is inside.
  static double Wrap(double x, double m, double M) {
    const double diff = M - m;
    while (x > M) x = x - diff;
    while (x < m) x = x + diff;
    return x;
  }
  // min(max(x, m), M) with Python's builtins' comparisons.
  static double Bound(double x, double m, double M) {
    const double lo = m > x ? m : x;
    return M < lo ? M : lo;
  }

  void Observe(void* obs) const {
    auto* o = static_cast<float*>(obs);
    o[0] = static_cast<float>(std::cos(s_[0]));
    o[1] = static_cast<float>(std::sin(s_[0]));
    o[2] = static_cast<float>(std::cos(s_[1]));
    o[3] = static_cast<float>(std::sin(s_[1]));
    o[4] = static_cast<float>(s_[2]);
    o[5] = static_cast<float>(s_[3]);
  }

  EnvRng rng_;
  double s_[4] = {0, 0, 0, 0};
};

}  // namespace

Result<std::unique_ptr<Env>> NewAcrobot(const EnvKwargs& kwargs) {
  KwargReader kw(kwargs, "Acrobot-v1");
  FW_RETURN_IF_ERROR(kw.Finish());
  return std::make_unique<Acrobot>();
}

}  // namespace flywheel::envs
