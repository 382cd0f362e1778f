"""flywheel.envs: the C++ classic control envs against an independent Python
implementation of Gymnasium's equations (envs_reference.py), and EnvPool's
sync/async, autoreset, seeding and error semantics (docs/envs.md)."""

import os
import sys
import threading

import numpy as np
import pytest

from flywheel import envs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import envs_reference as ref  # noqa: E402

TIMEOUT = 60  # seconds; bounds every wait so a bug fails instead of hanging
ENV_IDS = list(ref.ENVS)


def _states(env_id, k, rng):
    """k internal states spread over (and beyond) each env's usual range."""
    if env_id == "CartPole-v1":
        return rng.uniform(-0.2, 0.2, (k, 4))
    if env_id == "Acrobot-v1":  # half near rest (long episodes), half anywhere and fast
        return np.concatenate([rng.uniform(-0.1, 0.1, (k // 2, 4)),
                               rng.uniform(-np.pi, np.pi, (k - k // 2, 4)) * [1, 1, 3, 5]])
    if env_id == "MountainCar-v0":
        return np.stack([rng.uniform(-1.2, 0.5, k), rng.uniform(-0.07, 0.07, k)], 1)
    if env_id == "MountainCarContinuous-v0":
        return np.stack([rng.uniform(-1.2, 0.45, k), rng.uniform(-0.07, 0.07, k)], 1)
    return np.stack([rng.uniform(-10, 10, k), rng.uniform(-9, 9, k)], 1)  # Pendulum


def _actions(space, k, steps, rng):
    if isinstance(space, envs.Discrete):
        return rng.integers(space.n, size=(k, steps))
    return rng.uniform(-3, 3, size=(k, steps) + space.shape).astype(np.float32)  # beyond the bounds: clipping


def _run_pool(pool, states, actions):
    """Steps `pool` (one env per state) from `states` with actions[:, t];
    returns copies: obs (T+1, k, ...), reward, terminated, truncated (T, k)."""
    obs0, _ = pool.reset(options={"state": states})
    obs, rew, term, trunc = [obs0.copy()], [], [], []
    for t in range(actions.shape[1]):
        o, r, te, tr, _ = pool.step(actions[:, t])
        obs.append(o.copy())
        rew.append(r.copy())
        term.append(te.copy())
        trunc.append(tr.copy())
    return np.array(obs), np.array(rew), np.array(term), np.array(trunc)


def _compare(env_id, states, actions, pool=None, **kwargs):
    """C++ vs reference, env by env, up to each env's first episode end.
    Observations within float32 tolerance, rewards and flags exactly.
    Returns (steps compared, largest observation difference)."""
    pool = pool or envs.make(env_id, num_envs=len(states), **kwargs)
    obs, rew, term, trunc = _run_pool(pool, states, actions)
    steps, worst = 0, 0.0
    for i in range(len(states)):
        env_kwargs = {k: (v[i] if isinstance(v, list) else v) for k, v in kwargs.items()}
        r_obs, r_rew, r_term, r_trunc = ref.trajectory(env_id, states[i], actions[i], **env_kwargs)
        n = len(r_rew)
        where = f"{env_id} env {i} from {states[i]}"
        np.testing.assert_allclose(obs[:n + 1, i], r_obs, rtol=1e-6, atol=1e-6, err_msg=where)
        np.testing.assert_array_equal(rew[:n, i], r_rew, err_msg=where)
        np.testing.assert_array_equal(term[:n, i], r_term, err_msg=where)
        np.testing.assert_array_equal(trunc[:n, i], r_trunc, err_msg=where)
        steps += n
        worst = max(worst, float(np.abs(obs[:n + 1, i] - r_obs).max()))
    return steps, worst


# --------------------------------------------------------------------------- dynamics


def test_registry_lists_gymnasium_ids_with_their_time_limits():
    reg = envs.registry()
    assert {k: v["max_episode_steps"] for k, v in reg.items()} == {
        "CartPole-v1": 500, "Acrobot-v1": 500, "MountainCar-v0": 200, "MountainCarContinuous-v0": 999,
        "Pendulum-v1": 200}
    assert reg["Pendulum-v1"]["kwargs"] == "g=10.0, m=1.0, l=1.0"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spaces_match_the_reference(env_id):
    pool = envs.make(env_id, num_envs=3)
    r = ref.make(env_id)
    obs_space, act_space = pool.single_observation_space, pool.single_action_space
    assert obs_space.dtype == np.float32 and obs_space.shape == r.observation_space.shape
    np.testing.assert_array_equal(obs_space.low, r.observation_space.low)
    np.testing.assert_array_equal(obs_space.high, r.observation_space.high)
    if isinstance(act_space, envs.Discrete):
        assert act_space.n == r.action_space.n
        assert pool.action_space == envs.MultiDiscrete([act_space.n] * 3)
    else:
        assert act_space == envs.Box(-r.action_space.high, r.action_space.high, (1,), np.float32)
        assert pool.action_space.shape == (3, 1)
    assert pool.observation_space.shape == (3,) + obs_space.shape
    obs, _ = pool.reset()
    assert obs.dtype == np.float32 and all(obs_space.contains(o) for o in obs)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_dynamics_match_the_reference(env_id):
    rng = np.random.default_rng(ENV_IDS.index(env_id))
    limit = ref.ENVS[env_id][1]
    k = 12
    states = _states(env_id, k, rng)
    pool = envs.make(env_id, num_envs=k)
    actions = _actions(pool.single_action_space, k, limit + 1, rng)
    steps, worst = _compare(env_id, states, actions, pool=pool)
    assert steps >= 100
    print(f"{env_id}: {steps} steps, largest obs difference {worst}")


def _balance(obs):
    """A CartPole controller that keeps the pole up for whole episodes."""
    return int(obs[2] + 0.5 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0)


def test_cartpole_long_episodes_truncate_at_500():
    rng = np.random.default_rng(3)
    states = rng.uniform(-0.05, 0.05, (4, 4))
    actions = np.zeros((4, 520), np.int64)
    for i in range(4):  # the controller's actions on the reference, replayed on the pool
        env = ref.make("CartPole-v1")
        obs, _ = env.reset(options={"state": states[i]})
        for t in range(520):
            actions[i, t] = _balance(obs)
            obs = env.step(actions[i, t])[0]
    pool = envs.make("CartPole-v1", num_envs=4)
    obs, rew, term, trunc = _run_pool(pool, states, actions)
    assert not term[:500].any()
    assert not trunc[:499].any() and trunc[499].all()  # the 500th step
    np.testing.assert_array_equal(rew[:500], 1.0)
    assert (rew[500] == 0).all() and not trunc[500].any()  # NEXT_STEP: the reset step
    _compare("CartPole-v1", states, actions, pool=envs.make("CartPole-v1", num_envs=4))


@pytest.mark.parametrize("env_id,action", [("Acrobot-v1", 1), ("MountainCar-v0", 1),
                                           ("MountainCarContinuous-v0", 0.0), ("Pendulum-v1", 0.0)])
def test_truncation_at_the_registered_limit_not_termination(env_id, action):
    limit = ref.ENVS[env_id][1]
    pool = envs.make(env_id, num_envs=2)
    # Hanging still / resting in the valley never reaches a terminal state.
    start = {"Acrobot-v1": [0, 0, 0, 0], "Pendulum-v1": [np.pi, 0]}.get(env_id, [-0.5236, 0.0])
    pool.reset(options={"state": np.array(start, np.float64)})
    shape = (2,) + pool.single_action_space.shape
    a = np.full(shape, action, pool.single_action_space.dtype)
    for t in range(1, limit + 2):
        _, r, term, trunc, _ = pool.step(a)
        assert not term.any()
        assert trunc.all() == (t == limit) and trunc.any() == (t == limit), (t, trunc)
        if t == limit + 1:
            assert (r == 0).all()


def test_per_env_kwargs_match_the_reference():
    rng = np.random.default_rng(5)
    states = _states("Pendulum-v1", 4, rng)
    actions = _actions(envs.Box(-2, 2, (1,)), 4, 60, rng)
    _compare("Pendulum-v1", states, actions, g=[9.81, 1.62, 24.79, 10.0], m=2.0)
    states = _states("CartPole-v1", 3, rng)
    actions = _actions(envs.Discrete(2), 3, 60, rng)
    _compare("CartPole-v1", states, actions, gravity=[9.8, 3.7, 1.62], length=[0.5, 1.0, 0.25])
    states = _states("MountainCar-v0", 2, rng)
    _compare("MountainCar-v0", states, _actions(envs.Discrete(3), 2, 60, rng), goal_velocity=[0.0, 0.02])


def test_reset_draws_from_the_documented_ranges():
    for env_id, lo, hi in [("CartPole-v1", [-0.05] * 4, [0.05] * 4),
                           ("MountainCar-v0", [-0.6, 0], [-0.4, 0]),
                           ("Pendulum-v1", [-1, -1, -1], [1, 1, 1])]:
        pool = envs.make(env_id, num_envs=500, seed=1)
        obs, _ = pool.reset()
        assert (obs >= np.array(lo, np.float32)).all() and (obs <= np.array(hi, np.float32)).all(), env_id
    pool = envs.make("Acrobot-v1", num_envs=500, seed=1)
    obs, _ = pool.reset()
    assert (np.abs(obs[:, 4:]) <= np.float32(0.1)).all() and (obs[:, [0, 2]] >= np.cos(0.1) - 1e-6).all()


# --------------------------------------------------------------------------- pool semantics


def _trace(pool, steps, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        o, r, te, tr, info = pool.step(rng.integers(2, size=pool.num_envs))
        assert (info["env_id"] == np.arange(pool.num_envs)).all()
        out.append((o.copy(), r.copy(), te.copy(), tr.copy()))
    return out


def test_sync_results_are_identical_for_any_thread_count():
    traces = []
    for threads in (1, 2, 4):
        pool = envs.make("CartPole-v1", num_envs=64, num_threads=threads, seed=7)
        first, _ = pool.reset()
        traces.append([(first.copy(),)] + _trace(pool, 200))
    for other in traces[1:]:
        for a, b in zip(traces[0], other):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


def test_env_i_uses_seed_plus_i():
    pool = envs.make("Pendulum-v1", num_envs=4, seed=100)
    obs = pool.reset()[0].copy()  # reset's arrays are reused by the next reset
    for i in range(4):
        single = envs.make("Pendulum-v1", num_envs=1, seed=100 + i)
        np.testing.assert_array_equal(single.reset()[0][0], obs[i])
    again, _ = pool.reset(seed=100)  # reseeding: the same starts
    np.testing.assert_array_equal(again, obs)
    cont, _ = pool.reset()  # no seed: the streams continue
    assert not np.array_equal(cont, obs)
    per_env, _ = pool.reset(seed=[103, 102, 101, 100])
    np.testing.assert_array_equal(per_env, obs[::-1])


def test_async_recv_returns_batch_size_results_each_env_in_order():
    n, batch, per_env = 8, 3, 40
    pool = envs.make("CartPole-v1", num_envs=n, batch_size=batch, num_threads=2, seed=11)
    assert pool.is_async
    pool.reset()
    rng = np.random.default_rng(1)
    plan = rng.integers(2, size=(n, per_env + 10))  # env e's t-th action
    t = np.zeros(n, np.int64)
    got = {e: [] for e in range(n)}
    pool.send(plan[:, 0])
    while (t < per_env).any():
        obs, rew, term, trunc, info = pool.recv(timeout=TIMEOUT)
        ids = info["env_id"]
        assert len(ids) == batch == len(obs) == len(rew) and len(set(ids.tolist())) == batch
        assert pool.pending == n - batch
        for row, e in enumerate(ids):
            got[e].append((obs[row].copy(), rew[row], term[row], trunc[row]))
            t[e] += 1
        pool.send(plan[ids, t[ids]], ids)
    for e in range(n):  # each env's results are those of stepping it alone, in order
        single = envs.make("CartPole-v1", num_envs=1, seed=11 + e)
        single.reset()
        for k, (o, r, te, tr) in enumerate(got[e]):
            so, sr, ste, str_, _ = single.step(plan[e, k:k + 1])
            np.testing.assert_array_equal(o, so[0])
            assert (r, te, tr) == (sr[0], ste[0], str_[0])


def test_next_step_autoreset():
    pool = envs.make("CartPole-v1", num_envs=2, max_episode_steps=[5, 3], seed=9)
    assert pool.max_episode_steps == [5, 3]
    pool.reset()
    twin = envs.make("CartPole-v1", num_envs=1, seed=10)  # env 1's stream
    twin.reset()
    second_start = twin.reset()[0][0].copy()
    rows = [tuple(x.copy() for x in pool.step(np.array([0, 1]))[:4]) for _ in range(5)]
    obs, rew, term, trunc = (np.array([r[j] for r in rows]) for j in range(4))
    assert trunc[:, 0].tolist() == [False, False, False, False, True]
    assert trunc[:, 1].tolist() == [False, False, True, False, False]
    assert rew[3, 1] == 0 and not term[3, 1]  # the reset step
    np.testing.assert_array_equal(obs[3, 1], second_start)


def test_same_step_autoreset_puts_the_terminal_observation_in_info():
    kw = dict(num_envs=3, seed=21, max_episode_steps=30)
    nxt = envs.make("CartPole-v1", **kw)
    same = envs.make("CartPole-v1", autoreset_mode="same_step", **kw)
    nxt.reset()
    same.reset()
    for t in range(100):
        a = np.array([1, 1, t % 2])
        no, nr, nte, ntr, _ = (x.copy() if isinstance(x, np.ndarray) else x for x in nxt.step(a))
        so, sr, ste, str_, info = same.step(a)
        np.testing.assert_array_equal(sr, nr)
        np.testing.assert_array_equal(ste, nte)
        np.testing.assert_array_equal(str_, ntr)
        ended = nte | ntr
        np.testing.assert_array_equal(info["_final_obs"], ended)
        np.testing.assert_array_equal(info["final_obs"][ended], no[ended])
        assert (info["final_obs"][~ended] == 0).all()
        if ended.any():
            # NEXT_STEP's reset step shows what SAME_STEP already returned.
            after = nxt.step(a)[0]
            np.testing.assert_array_equal(after[ended], so[ended])
            return
    pytest.fail("no episode ended")


def test_terminated_and_truncated_together():
    pool = envs.make("CartPole-v1", max_episode_steps=1)
    pool.reset(options={"state": [2.39, 1.0, 0, 0]})
    _, _, term, trunc, _ = pool.step([1])
    assert term[0] and trunc[0]


def test_results_are_views_and_the_previous_batch_stays_valid():
    pool = envs.make("CartPole-v1", num_envs=12, batch_size=4, num_threads=2, seed=3)
    pool.reset()
    pool.send(np.zeros(12, np.int64))
    prev = pool.recv(timeout=TIMEOUT)
    assert not prev[0].flags.owndata and prev[0].base is not None
    assert not prev[4]["env_id"].flags.writeable
    prev_copy = [x.copy() for x in prev[:4]]
    for _ in range(30):
        pool.send(np.ones(4, np.int64), prev[4]["env_id"])
        cur = pool.recv(timeout=TIMEOUT)
        for x, y in zip(prev[:4], prev_copy):
            np.testing.assert_array_equal(x, y)
        prev, prev_copy = cur, [x.copy() for x in cur[:4]]
    # Arrays outlive the pool.
    obs = prev[0]
    pool.close()
    del pool
    np.testing.assert_array_equal(obs, prev_copy[0])


def test_reset_while_steps_are_in_flight():
    pool = envs.make("Acrobot-v1", num_envs=6, batch_size=2, num_threads=2)
    pool.reset()
    pool.send(np.ones(6, np.int64))
    obs, _ = pool.reset()  # waits for the 6 steps and drops them
    assert pool.pending == 0 and obs.shape == (6, 6)
    pool.send(np.ones(6, np.int64))


def test_gil_is_released_while_stepping():
    pool = envs.make("Acrobot-v1", num_envs=2000, num_threads=1)
    pool.reset()
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)

    th = threading.Thread(target=tick)
    th.start()
    try:
        for _ in range(20):
            pool.step(np.ones(2000, np.int64))
    finally:
        stop.set()
        th.join(TIMEOUT)
    assert len(ticks) > 20


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown environment 'CartPole-v0'"):
        envs.make("CartPole-v0")
    with pytest.raises(ValueError, match=r"batch_size must be in \[1, num_envs = 4\]"):
        envs.make("CartPole-v1", num_envs=4, batch_size=5)
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        envs.make("CartPole-v1", num_envs=0)
    with pytest.raises(ValueError, match="unknown argument 'gravity'.*known: g, m, l"):
        envs.make("Pendulum-v1", gravity=9.8)
    with pytest.raises(TypeError, match="env argument 'g' must be a number"):
        envs.make("Pendulum-v1", g="strong")
    with pytest.raises(ValueError, match="env argument 'g' has 2 values; need a number or num_envs = 3"):
        envs.make("Pendulum-v1", num_envs=3, g=[1.0, 2.0])
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        envs.make("CartPole-v1", autoreset_mode="disabled")
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        envs.make("CartPole-v1", seed=-1)
    with pytest.raises(ValueError, match="seed must be None, an int >= 0"):
        envs.make("CartPole-v1").reset(seed=-1)

    pool = envs.make("CartPole-v1", num_envs=4, batch_size=2)
    with pytest.raises(RuntimeError, match=r"call reset\(\) first"):
        pool.send(np.zeros(4, np.int64))
    pool.reset()
    with pytest.raises(RuntimeError, match="0 steps are pending, fewer than batch_size = 2"):
        pool.recv()
    with pytest.raises(TypeError, match=r"actions for Discrete\(2\) must be integers, got dtype float64"):
        pool.send(np.zeros(4))
    with pytest.raises(ValueError, match=r"actions have shape \(3,\); need \(4,\)"):
        pool.send(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"action 2 for env 1 is outside Discrete\(2\)"):
        pool.send(np.array([0, 2]), [0, 1])
    with pytest.raises(ValueError, match="action -1 for env 0"):
        pool.send(np.array([-1]), [0])
    with pytest.raises(ValueError, match=r"env_ids\[1\] = 7 is out of range \[0, 4\)"):
        pool.send(np.array([0, 1]), [0, 7])
    with pytest.raises(ValueError, match="env 1 appears twice"):
        pool.send(np.array([0, 1]), [1, 1])
    with pytest.raises(TypeError, match="env_ids must be integers"):
        pool.send(np.array([0, 1]), [0.0, 1.0])
    assert pool.pending == 0  # nothing was queued by the failed sends
    pool.send(np.array([1]), [2])
    with pytest.raises(RuntimeError, match="env 2 is still stepping"):
        pool.send(np.array([1]), [2])
    with pytest.raises(ValueError, match="timeout must be None or a number of seconds >= 0"):
        pool.recv(timeout=-1)
    with pytest.raises(ValueError, match=r"reset: unknown options \['low'\]"):
        pool.reset(options={"low": -1})
    with pytest.raises(ValueError, match=r"options\['state'\] has shape \(3,\); need \(4,\)"):
        pool.reset(options={"state": [1, 2, 3]})
    pool.close()
    with pytest.raises(RuntimeError, match="the pool is closed"):
        pool.reset()

    sync = envs.make("CartPole-v1", num_envs=4)
    sync.reset()
    with pytest.raises(ValueError, match="in sync mode"):
        sync.send(np.zeros(2, np.int64), [0, 1])
    box = envs.make("Pendulum-v1", num_envs=2)
    box.reset()
    with pytest.raises(ValueError, match=r"actions have shape \(2,\); need \(2, 1\)"):
        box.step(np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="must be numbers, got dtype bool"):
        box.step(np.zeros((2, 1), bool))
    box.step(np.zeros((2, 1)))  # float64 and ints are converted to float32
    box.step(np.zeros((2, 1), np.int32))


# --------------------------------------------------------------------------- Python envs


def test_from_python_runs_reference_envs_like_the_cpp_pool():
    rng = np.random.default_rng(8)
    states = _states("Pendulum-v1", 3, rng)
    actions = _actions(envs.Box(-2, 2, (1,)), 3, 201, rng)  # 200 steps, then the reset step
    py_pool = envs.from_python(lambda: ref.Pendulum(), num_envs=3, max_episode_steps=200)
    assert py_pool.single_action_space == envs.Box(-2, 2, (1,))
    cpp = _run_pool(envs.make("Pendulum-v1", num_envs=3), states, actions)
    py = _run_pool(py_pool, states, actions)
    np.testing.assert_array_equal(cpp[0][:201], py[0][:201])  # the last obs is a random reset (other RNGs)
    for x, y in zip(cpp[1:], py[1:]):
        np.testing.assert_array_equal(x, y)
    assert py[3][199].all() and (py[1][200] == 0).all()  # truncated at 200, then the reset step


def test_from_python_async_autoreset_and_errors():
    pool = envs.from_python([lambda: ref.CartPole() for _ in range(4)], batch_size=2,
                            autoreset_mode="same_step", max_episode_steps=5)
    with pytest.raises(RuntimeError, match=r"call reset\(\) first"):
        pool.send(np.zeros(4, np.int64))
    obs, info = pool.reset(seed=3)
    assert obs.shape == (4, 4) and (info["env_id"] == np.arange(4)).all()
    with pytest.raises(RuntimeError, match="0 steps are pending"):
        pool.recv()
    pool.send(np.zeros(4, np.int64))
    with pytest.raises(RuntimeError, match="env 0 is still stepping"):
        pool.send(np.zeros(1, np.int64), [0])
    ends = 0
    for _ in range(20):
        o, r, te, tr, info = pool.recv()
        assert len(info["env_id"]) == 2
        ends += int(info["_final_obs"].sum())
        assert (info["_final_obs"] == (te | tr)).all()
        pool.send(np.zeros(2, np.int64), info["env_id"])
    assert ends >= 4  # each env truncates (or falls) every <= 5 steps
    with pytest.raises(ValueError, match=r"action 5 for env 0 is outside Discrete\(2\)"):
        p = envs.from_python(ref.CartPole, num_envs=2)
        p.reset()
        p.step(np.array([5, 0]))
    with pytest.raises(TypeError, match=r"env 0 \(object\) has no reset"):
        envs.from_python(object, num_envs=1)
    with pytest.raises(ValueError, match="same spaces"):
        envs.from_python([ref.CartPole, ref.Acrobot])


def test_spaces_sample_and_contains():
    b = envs.Box(-1.0, 1.0, (3,), seed=0)
    for _ in range(20):
        assert b.contains(b.sample())
    assert not b.contains(np.array([2.0, 0, 0], np.float32))
    assert not b.contains(np.zeros(2, np.float32))
    d = envs.Discrete(3, start=-1, seed=0)
    assert all(d.contains(d.sample()) for _ in range(20))
    assert d.contains(1) and not d.contains(2) and not d.contains(0.5) and not d.contains(True)
    m = envs.batch_space(envs.Discrete(2), 4)
    assert m.contains(np.array([0, 1, 1, 0])) and not m.contains(np.array([0, 2, 1, 0]))
    unbounded = envs.Box(-np.inf, np.inf, (2,), seed=1)
    assert np.isfinite(unbounded.sample()).all()
    assert repr(envs.Box(-2, 2, (1,))) == "Box(-2.0, 2.0, (1,), float32)"
