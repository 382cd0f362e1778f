"""Reference implementations of Gymnasium's classic control environments, in
plain Python, written from Gymnasium's documentation of each environment
(constants, equations of motion, integrators, termination, rewards, reset
ranges; gymnasium/envs/classic_control/, Gymnasium 1.x).

They are the independent side of the dynamics tests in test_envs.py: the
C++ envs (src/flywheel/envs/classic_control/) must reproduce these
trajectories from the same initial states and actions. They also serve as the
"plain Python loop" peer in bench/envs_bench.cc and as user-style envs for
flywheel.envs.from_python.

Conventions shared with the C++ envs (docs/envs.md#exactness):
  * the internal state is float64 (Python floats) and evolves with the
    documented double-precision formulas, ``x**2`` written ``x * x``;
  * observations are float32; Acrobot's random start and
    MountainCarContinuous's state after every step are rounded to float32, as
    Gymnasium stores them;
  * ``reset(options={"state": s})`` starts from internal state ``s``;
    otherwise the start state is uniform in the documented range, drawn from
    ``random.Random(seed)`` (not numpy's PCG64 stream; neither is the C++ one).

Only numpy is needed (for the float32 observations).
"""

import math
import random

import numpy as np


def _f32(x):
    """x rounded to float32, as a Python float."""
    return float(np.float32(x))


class Box:
    """Just enough of a Box space for flywheel.envs.from_python."""

    def __init__(self, low, high, shape, dtype=np.float32):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.low = np.broadcast_to(np.asarray(low, self.dtype), self.shape)
        self.high = np.broadcast_to(np.asarray(high, self.dtype), self.shape)


class Discrete:
    def __init__(self, n):
        self.n = n
        self.start = 0
        self.shape = ()
        self.dtype = np.dtype(np.int64)


class _Env:
    state_size = 0

    def __init__(self):
        self._rng = random.Random(0)
        self.state = None

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = random.Random(seed)
        if options and "state" in options:
            state = [float(v) for v in np.asarray(options["state"], dtype=np.float64).reshape(-1)]
            assert len(state) == self.state_size, f"state needs {self.state_size} values"
            self.state = state
        else:
            self.state = self._random_state()
        return self._obs(), {}

    def _uniform(self, low, high):
        return low + (high - low) * self._rng.random()


class CartPole(_Env):
    """CartPole-v1: cart-pole balancing (Barto, Sutton & Anderson 1983).

    Forces +-10 N; Euler integration with tau = 0.02 s; terminates when
    |x| > 2.4 or |theta| > 12 degrees; reward 1 on every step, the terminal
    one included; start state uniform in [-0.05, 0.05]^4."""

    state_size = 4

    def __init__(self, gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, force_mag=10.0, tau=0.02):
        super().__init__()
        self.gravity, self.masscart, self.masspole = gravity, masscart, masspole
        self.length, self.force_mag, self.tau = length, force_mag, tau
        self.total_mass = masspole + masscart
        self.polemass_length = masspole * length
        self.theta_threshold = 12 * 2 * math.pi / 360
        self.x_threshold = 2.4
        high = np.array([4.8, np.finfo(np.float32).max, self.theta_threshold * 2, np.finfo(np.float32).max],
                        np.float32)
        self.observation_space = Box(-high, high, (4,))
        self.action_space = Discrete(2)

    def _random_state(self):
        return [self._uniform(-0.05, 0.05) for _ in range(4)]

    def _obs(self):
        return np.array(self.state, dtype=np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        c, s = math.cos(theta), math.sin(theta)
        # Florian (2007), "Correct equations for the dynamics of the cart-pole
        # system", with the frictionless simplification Gymnasium uses.
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * s) / self.total_mass
        thetaacc = (self.gravity * s - c * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (c * c) / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * c / self.total_mass
        # Explicit Euler: positions move with the old velocities.
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        terminated = (x < -self.x_threshold or x > self.x_threshold
                      or theta < -self.theta_threshold or theta > self.theta_threshold)
        return self._obs(), 1.0, terminated, False, {}


class Acrobot(_Env):
    """Acrobot-v1: two-link underactuated pendulum (Sutton 1996), dynamics
    from Sutton & Barto's book.

    Torques (-1, 0, +1) on the middle joint; one 4th-order Runge-Kutta step
    of dt = 0.2 s per action; angles wrapped to [-pi, pi]; angular speeds
    bounded to 4 pi and 9 pi; terminates when -cos(t1) - cos(t1 + t2) > 1;
    reward -1 per step, 0 on the terminal step; start uniform in
    [-0.1, 0.1]^4 (float32)."""

    state_size = 4
    dt = 0.2
    m1 = m2 = 1.0       # link masses
    l1 = 1.0            # length of link 1
    lc1 = lc2 = 0.5     # centre of mass positions
    I1 = I2 = 1.0       # moments of inertia
    g = 9.8
    max_vel1 = 4 * math.pi
    max_vel2 = 9 * math.pi
    torques = (-1.0, 0.0, 1.0)

    def __init__(self):
        super().__init__()
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel1, self.max_vel2], np.float32)
        self.observation_space = Box(-high, high, (6,))
        self.action_space = Discrete(3)

    def _random_state(self):
        return [_f32(self._uniform(-0.1, 0.1)) for _ in range(4)]

    def _obs(self):
        t1, t2, d1, d2 = self.state
        return np.array([math.cos(t1), math.sin(t1), math.cos(t2), math.sin(t2), d1, d2], dtype=np.float32)

    def _derivs(self, s, a):
        m1, m2, l1, lc1, lc2, I1, I2, g = self.m1, self.m2, self.l1, self.lc1, self.lc2, self.I1, self.I2, self.g
        t1, t2, dt1, dt2 = s
        d1 = m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * math.cos(t2)) + I1 + I2
        d2 = m2 * (lc2 * lc2 + l1 * lc2 * math.cos(t2)) + I2
        phi2 = m2 * lc2 * g * math.cos(t1 + t2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * (dt2 * dt2) * math.sin(t2)
                - 2 * m2 * l1 * lc2 * dt2 * dt1 * math.sin(t2)
                + (m1 * lc1 + m2 * l1) * g * math.cos(t1 - math.pi / 2) + phi2)
        # The book's equation (with the -m2 l1 lc2 dt1^2 sin t2 term the NIPS
        # paper left out).
        ddt2 = ((a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dt1 * dt1) * math.sin(t2) - phi2)
                / (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1))
        ddt1 = -(d2 * ddt2 + phi1) / d1
        return [dt1, dt2, ddt1, ddt2]

    @staticmethod
    def _wrap(x, lo, hi):
        span = hi - lo
        while x > hi:
            x = x - span
        while x < lo:
            x = x + span
        return x

    def step(self, action):
        torque = self.torques[action]
        s0 = self.state
        h = self.dt - 0.0
        h2 = h / 2.0
        k1 = self._derivs(s0, torque)
        k2 = self._derivs([s0[i] + h2 * k1[i] for i in range(4)], torque)
        k3 = self._derivs([s0[i] + h2 * k2[i] for i in range(4)], torque)
        k4 = self._derivs([s0[i] + h * k3[i] for i in range(4)], torque)
        h6 = h / 6.0
        ns = [s0[i] + h6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]) for i in range(4)]
        ns[0] = self._wrap(ns[0], -math.pi, math.pi)
        ns[1] = self._wrap(ns[1], -math.pi, math.pi)
        ns[2] = min(max(ns[2], -self.max_vel1), self.max_vel1)
        ns[3] = min(max(ns[3], -self.max_vel2), self.max_vel2)
        self.state = ns
        terminated = -math.cos(ns[0]) - math.cos(ns[1] + ns[0]) > 1.0
        return self._obs(), 0.0 if terminated else -1.0, terminated, False, {}


class MountainCar(_Env):
    """MountainCar-v0 (Moore 1990): v += (a - 1) force - cos(3 p) gravity,
    clipped to +-0.07; p += v, clipped to [-1.2, 0.6], the left wall stops
    the car; terminates at p >= 0.5 with v >= goal_velocity; reward -1 per
    step; start p uniform in [-0.6, -0.4], v = 0."""

    state_size = 2

    def __init__(self, goal_velocity=0.0, force=0.001, gravity=0.0025):
        super().__init__()
        self.goal_velocity, self.force, self.gravity = goal_velocity, force, gravity
        self.observation_space = Box(np.array([-1.2, -0.07], np.float32), np.array([0.6, 0.07], np.float32), (2,))
        self.action_space = Discrete(3)

    def _random_state(self):
        return [self._uniform(-0.6, -0.4), 0.0]

    def _obs(self):
        return np.array(self.state, dtype=np.float32)

    def step(self, action):
        p, v = self.state
        v += (action - 1) * self.force + math.cos(3 * p) * (-self.gravity)
        v = -0.07 if v < -0.07 else (0.07 if v > 0.07 else v)
        p += v
        p = -1.2 if p < -1.2 else (0.6 if p > 0.6 else p)
        if p == -1.2 and v < 0:
            v = 0.0
        self.state = [p, v]
        terminated = p >= 0.5 and v >= self.goal_velocity
        return self._obs(), -1.0, terminated, False, {}


class MountainCarContinuous(_Env):
    """MountainCarContinuous-v0: force = clip(a, -1, 1);
    v += force power - 0.0025 cos(3 p), clipped to +-0.07; p += v clipped to
    [-1.2, 0.6], left wall stops the car; terminates at p >= 0.45 with
    v >= goal_velocity; reward 100 on reaching the goal minus 0.1 a^2 (the
    unclipped action) every step; the state is kept in float32."""

    state_size = 2

    def __init__(self, goal_velocity=0.0, power=0.0015):
        super().__init__()
        self.goal_velocity, self.power = goal_velocity, power
        self.observation_space = Box(np.array([-1.2, -0.07], np.float32), np.array([0.6, 0.07], np.float32), (2,))
        self.action_space = Box(-1.0, 1.0, (1,))

    def _random_state(self):
        return [self._uniform(-0.6, -0.4), 0.0]

    def _obs(self):
        return np.array(self.state, dtype=np.float32)

    def step(self, action):
        a = float(np.float32(np.asarray(action, np.float32).reshape(-1)[0]))
        p, v = self.state
        force = min(max(a, -1.0), 1.0)
        v += force * self.power - 0.0025 * math.cos(3 * p)
        if v > 0.07:
            v = 0.07
        if v < -0.07:
            v = -0.07
        p += v
        if p > 0.6:
            p = 0.6
        if p < -1.2:
            p = -1.2
        if p == -1.2 and v < 0:
            v = 0.0
        terminated = p >= 0.45 and v >= self.goal_velocity
        reward = (100.0 if terminated else 0.0) - a * a * 0.1
        self.state = [_f32(p), _f32(v)]
        return self._obs(), reward, terminated, False, {}


class Pendulum(_Env):
    """Pendulum-v1: u = clip(a, -2, 2);
    thdot += (3 g / (2 l) sin(th) + 3 / (m l^2) u) dt, clipped to +-8;
    th += thdot dt (dt = 0.05); reward -(norm(th)^2 + 0.1 thdot^2 + 0.001 u^2)
    with norm(th) in [-pi, pi); never terminates; start th uniform in
    [-pi, pi], thdot in [-1, 1]."""

    state_size = 2

    def __init__(self, g=10.0, m=1.0, l=1.0):  # noqa: E741 (Gymnasium's names)
        super().__init__()
        self.g, self.m, self.l = g, m, l
        self.observation_space = Box(np.array([-1, -1, -8], np.float32), np.array([1, 1, 8], np.float32), (3,))
        self.action_space = Box(-2.0, 2.0, (1,))

    def _random_state(self):
        return [self._uniform(-math.pi, math.pi), self._uniform(-1.0, 1.0)]

    def _obs(self):
        th, thdot = self.state
        return np.array([math.cos(th), math.sin(th), thdot], dtype=np.float32)

    def step(self, action):
        a = float(np.float32(np.asarray(action, np.float32).reshape(-1)[0]))
        th, thdot = self.state
        u = -2.0 if a < -2.0 else (2.0 if a > 2.0 else a)
        norm = ((th + math.pi) % (2 * math.pi)) - math.pi
        cost = norm * norm + 0.1 * (thdot * thdot) + 0.001 * (u * u)
        g, m, l = self.g, self.m, self.l  # noqa: E741
        thdot = thdot + (3 * g / (2 * l) * math.sin(th) + 3.0 / (m * (l * l)) * u) * 0.05
        thdot = -8.0 if thdot < -8 else (8.0 if thdot > 8 else thdot)
        th = th + thdot * 0.05
        self.state = [th, thdot]
        return self._obs(), -cost, False, False, {}


# Gymnasium id -> (class, registered max_episode_steps)
ENVS = {
    "CartPole-v1": (CartPole, 500),
    "Acrobot-v1": (Acrobot, 500),
    "MountainCar-v0": (MountainCar, 200),
    "MountainCarContinuous-v0": (MountainCarContinuous, 999),
    "Pendulum-v1": (Pendulum, 200),
}


class TimeLimit:
    """Gymnasium's TimeLimit: truncated once an episode has max_episode_steps steps."""

    def __init__(self, env, max_episode_steps):
        self.env = env
        self.max_episode_steps = max_episode_steps
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.elapsed = 0

    def reset(self, seed=None, options=None):
        self.elapsed = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.elapsed += 1
        return obs, reward, terminated, truncated or self.elapsed >= self.max_episode_steps, info


def make(env_id, **kwargs):
    """The reference env with its registered time limit."""
    cls, steps = ENVS[env_id]
    return TimeLimit(cls(**kwargs), steps)


def trajectory(env_id, state, actions, **kwargs):
    """Runs the reference from internal `state` with `actions`; stops after
    the first terminated or truncated step. Returns (obs (T+1, d) float32
    with the start observation first, reward (T,), terminated (T,),
    truncated (T,))."""
    env = make(env_id, **kwargs)
    obs0, _ = env.reset(options={"state": state})
    obs, rew, term, trunc = [obs0], [], [], []
    for a in actions:
        o, r, te, tr, _ = env.step(a)
        obs.append(o)
        rew.append(r)
        term.append(te)
        trunc.append(tr)
        if te or tr:
            break
    return np.array(obs), np.array(rew, np.float64), np.array(term, bool), np.array(trunc, bool)
