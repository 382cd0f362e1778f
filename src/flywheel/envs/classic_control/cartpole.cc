// CartPole-v1: Barto, Sutton & Anderson's cart-pole, as Gymnasium's
// cartpole.py (explicit Euler integrator, reward 1 on every step including
// the terminal one, termination at |x| > 2.4 or |theta| > 12 degrees).
#include <cfloat>
#include <cmath>
#include <numbers>

#include "flywheel/envs/classic_control/classic_control.h"

namespace flywheel::envs {
namespace {

// alignas(64): envs of a pool are stepped by different threads; whole cache
// lines keep one env's writes from evicting a neighbour's.
class alignas(64) CartPole final : public Env {
 public:
  explicit CartPole(KwargReader& kw)
      : gravity_(kw.Get("gravity", 9.8)),
        masscart_(kw.Get("masscart", 1.0, true)),
        masspole_(kw.Get("masspole", 0.1, true)),
        length_(kw.Get("length", 0.5, true)),
        force_mag_(kw.Get("force_mag", 10.0)),
        tau_(kw.Get("tau", 0.02, true)),
        total_mass_(masspole_ + masscart_),
        polemass_length_(masspole_ * length_) {}

  // Spaces are shared by every instance (and kept out of the env's cache lines).
  const Space& observation_space() const override {
    // Twice the termination limits, so a failing observation is still
    // inside the space (as Gymnasium's).
    static const Space* space = [] {
      const double high[4] = {kXThreshold * 2, FLT_MAX, kThetaThreshold * 2, FLT_MAX};
      std::vector<double> lo, hi;
      for (double h : high) {
        hi.push_back(static_cast<float>(h));
        lo.push_back(-static_cast<float>(h));
      }
      return new Space(Space::Box(std::move(lo), std::move(hi), {4}));
    }();
    return *space;
  }
  const Space& action_space() const override {
    static const Space* space = new Space(Space::Discrete(2));
    return *space;
  }
  int state_size() const override { return 4; }
  void Seed(uint64_t seed) override { rng_.Seed(seed); }

  Status Reset(std::span<const double> state, void* obs) override {
    for (int i = 0; i < 4; ++i) s_[i] = state.empty() ? rng_.Uniform(-0.05, 0.05) : state[i];
    Observe(obs);
    return absl::OkStatus();
  }

  Status Step(const void* action, void* obs, StepResult* result) override {
    double x = s_[0], x_dot = s_[1], theta = s_[2], theta_dot = s_[3];
    const double force = *static_cast<const int64_t*>(action) == 1 ? force_mag_ : -force_mag_;
    const double costheta = std::cos(theta);
    const double sintheta = std::sin(theta);
    // Gymnasium's expressions, operation for operation (x**2 is x * x).
    const double temp =
        (force + polemass_length_ * (theta_dot * theta_dot) * sintheta) / total_mass_;
    const double thetaacc =
        (gravity_ * sintheta - costheta * temp) /
        (length_ * (4.0 / 3.0 - masspole_ * (costheta * costheta) / total_mass_));
    const double xacc = temp - polemass_length_ * thetaacc * costheta / total_mass_;
    x = x + tau_ * x_dot;
    x_dot = x_dot + tau_ * xacc;
    theta = theta + tau_ * theta_dot;
    theta_dot = theta_dot + tau_ * thetaacc;
    s_[0] = x, s_[1] = x_dot, s_[2] = theta, s_[3] = theta_dot;
    result->terminated =
        x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
    result->reward = 1.0;
    Observe(obs);
    return absl::OkStatus();
  }

  void GetState(double* state) const override {
    for (int i = 0; i < 4; ++i) state[i] = s_[i];
  }

 private:
  void Observe(void* obs) const {
    auto* o = static_cast<float*>(obs);
    for (int i = 0; i < 4; ++i) o[i] = static_cast<float>(s_[i]);
  }

  static constexpr double kThetaThreshold = 12 * 2 * std::numbers::pi / 360;
  static constexpr double kXThreshold = 2.4;

  const double gravity_, masscart_, masspole_, length_, force_mag_, tau_;
  const double total_mass_, polemass_length_;
  EnvRng rng_;
  double s_[4] = {0, 0, 0, 0};
};

}  // namespace

Result<std::unique_ptr<Env>> NewCartPole(const EnvKwargs& kwargs) {
  KwargReader kw(kwargs, "CartPole-v1");
  auto env = std::make_unique<CartPole>(kw);
  FW_RETURN_IF_ERROR(kw.Finish());
  return env;
}

}  // namespace flywheel::envs
