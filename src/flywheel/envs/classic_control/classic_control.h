// Gymnasium's classic control environments, reimplemented in C++ with the
// same constants, integrators, termination rules, rewards, observation
// dtypes (float32) and reset ranges as gymnasium/envs/classic_control/
// (Gymnasium 1.x). docs/envs.md#exactness says what "the same" covers: for
// the same internal state and actions the dynamics are the same double-
// precision operations in the same order; reset states come from our own
// seeded stream (EnvRng), uniform in the documented ranges.
//
// Internal states (Env::Reset(state) / GetState()):
//   CartPole-v1                x, x_dot, theta, theta_dot
//   Acrobot-v1                 theta1, theta2, dtheta1, dtheta2
//   MountainCar-v0             position, velocity
//   MountainCarContinuous-v0   position, velocity
//   Pendulum-v1                theta, theta_dot
//
// Constructor arguments (EnvKwargs; defaults are Gymnasium's):
//   CartPole-v1                gravity 9.8, masscart 1.0, masspole 0.1,
//                              length 0.5 (half the pole), force_mag 10.0,
//                              tau 0.02
//   Acrobot-v1                 none
//   MountainCar-v0             goal_velocity 0, force 0.001, gravity 0.0025
//   MountainCarContinuous-v0   goal_velocity 0, power 0.0015
//   Pendulum-v1                g 10.0, m 1.0, l 1.0
//
// Thread-safety: as Env.
#pragma once

#include <memory>

#include "flywheel/base/status.h"
#include "flywheel/envs/env.h"

namespace flywheel::envs {

Result<std::unique_ptr<Env>> NewCartPole(const EnvKwargs& kwargs);
Result<std::unique_ptr<Env>> NewAcrobot(const EnvKwargs& kwargs);
Result<std::unique_ptr<Env>> NewMountainCar(const EnvKwargs& kwargs);
Result<std::unique_ptr<Env>> NewMountainCarContinuous(const EnvKwargs& kwargs);
Result<std::unique_ptr<Env>> NewPendulum(const EnvKwargs& kwargs);

}  // namespace flywheel::envs
