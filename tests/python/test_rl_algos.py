"""Tests of flywheel.rl: the actor-critic model, GAE, V-trace, PPO and IMPALA.

Reference values come from plain-Python loops written here from the
definitions (GAE as a forward sum of discounted TD errors, V-trace as the
paper's explicit sum), never from the code under test.
"""

import math
import os
import time

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flywheel  # noqa: E402

# The build tree's package (PYTHONPATH=<build>/python) may not carry the
# rl subpackage yet; then test the source tree's.
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python",
                    "flywheel")
if not os.path.isdir(os.path.join(flywheel.__path__[0], "rl")) and _SRC not in flywheel.__path__:
    flywheel.__path__.append(_SRC)

from flywheel.rl.impala import Impala, vtrace  # noqa: E402
from flywheel.rl.models import ActorCritic, prepare_batch  # noqa: E402
from flywheel.rl.ppo import PPO, gae  # noqa: E402

torch.set_num_threads(1)


# --------------------------------------------------------------------------- helpers


def make_batch(rng, b=2, t=6, e=3, obs_dim=4, action_dim=2, discrete=True, done_prob=0.15):
    """A random batch in the learner format, with episode ends sprinkled in."""
    terminated = rng.random((b, t, e)) < done_prob
    truncated = (rng.random((b, t, e)) < done_prob) & ~terminated
    final_obs = np.zeros((b, t, e, obs_dim), np.float32)
    ended = terminated | truncated
    final_obs[ended] = rng.standard_normal((int(ended.sum()), obs_dim))
    if discrete:
        action = rng.integers(0, action_dim, (b, t, e))
        logprob = np.log(rng.uniform(0.2, 0.8, (b, t, e)))
    else:
        action = rng.standard_normal((b, t, e, action_dim))
        logprob = rng.normal(-2.0, 0.5, (b, t, e))
    return {
        "obs": rng.standard_normal((b, t + 1, e, obs_dim)).astype(np.float32),
        "action": action.astype(np.int64 if discrete else np.float32),
        "logprob": logprob.astype(np.float32),
        "reward": rng.standard_normal((b, t, e)).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
        "final_obs": final_obs,
        "version": np.zeros((b, t), np.int64),
        "weight": np.ones(b, np.float32),
    }


def v_of(model, x):
    with torch.no_grad():
        return float(model.value(torch.as_tensor(np.asarray(x, np.float32))))


def numpy_logits(tensors, obs):
    n = sum(1 for k in tensors if k.endswith(".weight"))
    x = obs.astype(np.float64)
    for i in range(n):
        x = x @ tensors[f"layers.{i}.weight"].astype(np.float64).T + tensors[f"layers.{i}.bias"]
        if i < n - 1:
            x = np.tanh(x)
    return x


def all_params(model):
    return [p.detach().clone() for p in model.parameters()]


# --------------------------------------------------------------------------- GAE and the bootstrap rule


def test_bootstrap_rule_uses_final_obs_after_truncation_and_zero_after_termination():
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    model = ActorCritic(4, 2, True)
    b, t, e = 2, 5, 3
    batch = make_batch(rng, b, t, e, done_prob=0.0)
    batch["terminated"][0, 1, 0] = True
    batch["truncated"][0, 2, 1] = True
    batch["terminated"][1, 4, 2] = True   # ends at the last step: no V(obs[T])
    batch["truncated"][1, 4, 0] = True    # truncated at the last step: V(final_obs), not V(obs[T])
    batch["terminated"][1, 3, 1] = batch["truncated"][1, 3, 1] = True  # both: terminated wins
    ended = batch["terminated"] | batch["truncated"]
    batch["final_obs"][ended] = rng.standard_normal((int(ended.sum()), 4))

    u = prepare_batch(model, batch)
    for bi in range(b):
        for ti in range(t):
            for ei in range(e):
                n = bi * e + ei
                if batch["terminated"][bi, ti, ei]:
                    want = 0.0
                elif batch["truncated"][bi, ti, ei]:
                    want = v_of(model, batch["final_obs"][bi, ti, ei])
                else:
                    want = v_of(model, batch["obs"][bi, ti + 1, ei])
                assert float(u.next_value[ti, n]) == pytest.approx(want, abs=1e-6), (bi, ti, ei)
                assert float(u.value[ti, n]) == pytest.approx(v_of(model, batch["obs"][bi, ti, ei]), abs=1e-6)
                assert float(u.done[ti, n]) == float(ended[bi, ti, ei])


def reference_gae(reward, value, next_value, terminated, done, gamma, lam):
    """A_t = sum over k >= t up to the episode end of (gamma lam)^(k-t) delta_k."""
    t_len, n = len(reward), len(reward[0])
    adv = [[0.0] * n for _ in range(t_len)]
    for j in range(n):
        for t in range(t_len):
            total, scale = 0.0, 1.0
            for k in range(t, t_len):
                boot = 0.0 if terminated[k][j] else next_value[k][j]
                total += scale * (reward[k][j] + gamma * boot - value[k][j])
                if done[k][j]:
                    break
                scale *= gamma * lam
            adv[t][j] = total
    return adv


def test_gae_matches_forward_sum_with_terminated_truncated_and_last_step_done():
    rng = np.random.default_rng(2)
    torch.manual_seed(2)
    model = ActorCritic(4, 2, True)
    batch = make_batch(rng, b=2, t=7, e=2, done_prob=0.0)
    batch["terminated"][0, 2, 0] = True
    batch["truncated"][0, 4, 1] = True
    batch["truncated"][1, 1, 0] = True
    batch["terminated"][1, 6, 1] = True   # done at the last step
    batch["truncated"][0, 6, 0] = True    # truncated at the last step
    ended = batch["terminated"] | batch["truncated"]
    batch["final_obs"][ended] = rng.standard_normal((int(ended.sum()), 4))
    u = prepare_batch(model, batch)
    gamma, lam = 0.97, 0.9
    adv, ret = gae(u.reward, u.value, u.next_value, u.terminated, u.done, gamma, lam)

    # The reference computes its own bootstraps from the model.
    t_len, e = 7, 2
    n = 2 * e
    reward = [[float(batch["reward"][j // e, t, j % e]) for j in range(n)] for t in range(t_len)]
    value = [[v_of(model, batch["obs"][j // e, t, j % e]) for j in range(n)] for t in range(t_len)]
    term = [[bool(batch["terminated"][j // e, t, j % e]) for j in range(n)] for t in range(t_len)]
    done = [[bool(ended[j // e, t, j % e]) for j in range(n)] for t in range(t_len)]
    next_value = [[v_of(model, batch["final_obs"][j // e, t, j % e]) if batch["truncated"][j // e, t, j % e]
                   else v_of(model, batch["obs"][j // e, t + 1, j % e]) for j in range(n)] for t in range(t_len)]
    want = reference_gae(reward, value, next_value, term, done, gamma, lam)
    np.testing.assert_allclose(adv.numpy(), np.array(want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret.numpy(), np.array(want) + np.array(value), rtol=1e-5, atol=1e-5)


def test_gae_with_lambda_one_and_no_ends_is_discounted_return_minus_value():
    torch.manual_seed(3)
    t_len, n, gamma = 5, 3, 0.9
    reward, value, boot = torch.randn(t_len, n), torch.randn(t_len, n), torch.randn(n)
    next_value = torch.cat([value[1:], boot[None]])
    zeros = torch.zeros(t_len, n)
    adv, _ = gae(reward, value, next_value, zeros, zeros, gamma, 1.0)
    for j in range(n):
        for t in range(t_len):
            g = sum(gamma ** (k - t) * float(reward[k, j]) for k in range(t, t_len)) + gamma ** (t_len - t) * float(
                boot[j])
            assert float(adv[t, j]) == pytest.approx(g - float(value[t, j]), abs=1e-5)


# --------------------------------------------------------------------------- V-trace


def test_vtrace_on_policy_equals_n_step_returns():
    torch.manual_seed(4)
    t_len, n, gamma = 8, 4, 0.95
    reward = torch.randn(t_len, n)
    value = torch.randn(t_len, n)
    next_value = torch.cat([value[1:], torch.randn(1, n)])
    terminated = torch.zeros(t_len, n)
    truncated = torch.zeros(t_len, n)
    terminated[3, 0] = 1
    truncated[5, 1] = 1
    terminated[t_len - 1, 2] = 1
    done = torch.clamp(terminated + truncated, max=1)
    next_value[5, 1] = 2.5          # V(final_obs) of the truncated episode
    next_value[3, 0] = 123.0        # must be ignored: terminated
    logp = torch.randn(t_len, n)
    vs, pg_adv = vtrace(logp, logp, reward, value, next_value, terminated, done, gamma)

    for j in range(n):
        for s in range(t_len):
            g, k = 0.0, s
            while True:
                g += gamma ** (k - s) * float(reward[k, j])
                if done[k, j] or k == t_len - 1:
                    boot = 0.0 if terminated[k, j] else float(next_value[k, j])
                    g += gamma ** (k - s + 1) * boot
                    break
                k += 1
            assert float(vs[s, j]) == pytest.approx(g, abs=1e-5), (s, j)
            # On-policy, the policy-gradient advantage is the one-step TD error to vs_{s+1}.
            if done[s, j] or s == t_len - 1:
                nxt = 0.0 if terminated[s, j] else float(next_value[s, j])
            else:
                nxt = float(vs[s + 1, j])
            assert float(pg_adv[s, j]) == pytest.approx(float(reward[s, j]) + gamma * nxt - float(value[s, j]),
                                                        abs=1e-5)


def reference_vtrace(mu, pi, reward, value, next_value, terminated, done, gamma, rho_bar, c_bar):
    """The paper's definition as an explicit sum:
    v_s = V(x_s) + sum_{t=s}^{end} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t,
    delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)), with the sum stopping at
    the episode end or the unroll end."""
    t_len, n = len(reward), len(reward[0])
    vs = [[0.0] * n for _ in range(t_len)]
    adv = [[0.0] * n for _ in range(t_len)]
    for j in range(n):
        ratio = [math.exp(pi[t][j] - mu[t][j]) for t in range(t_len)]
        rho = [min(rho_bar, r) for r in ratio]
        c = [min(c_bar, r) for r in ratio]
        boot = [0.0 if terminated[t][j] else next_value[t][j] for t in range(t_len)]
        delta = [rho[t] * (reward[t][j] + gamma * boot[t] - value[t][j]) for t in range(t_len)]
        for s in range(t_len):
            total, prod = 0.0, 1.0
            for t in range(s, t_len):
                total += gamma ** (t - s) * prod * delta[t]
                if done[t][j]:
                    break
                prod *= c[t]
            vs[s][j] = value[s][j] + total
        for s in range(t_len):
            nxt = boot[s] if (done[s][j] or s == t_len - 1) else vs[s + 1][j]
            adv[s][j] = rho[s] * (reward[s][j] + gamma * nxt - value[s][j])
    return vs, adv


def test_vtrace_matches_paper_definition_with_clipping_and_cuts():
    rng = np.random.default_rng(5)
    t_len, n, gamma, rho_bar, c_bar = 10, 6, 0.9, 1.2, 0.8
    mu = rng.normal(-1.0, 0.3, (t_len, n))
    pi = mu + rng.normal(0.0, 0.7, (t_len, n))     # ratios well above and below both clips
    reward = rng.standard_normal((t_len, n))
    value = rng.standard_normal((t_len, n))
    next_value = np.concatenate([value[1:], rng.standard_normal((1, n))])
    terminated = rng.random((t_len, n)) < 0.1
    truncated = (rng.random((t_len, n)) < 0.1) & ~terminated
    next_value[truncated] = rng.standard_normal(int(truncated.sum()))   # V(final_obs)
    done = terminated | truncated
    assert terminated.any() and truncated.any()
    ratio = np.exp(pi - mu)
    assert (ratio > rho_bar).any() and (ratio < c_bar).any() and ((ratio > c_bar) & (ratio < rho_bar)).any()

    f = lambda x: torch.as_tensor(x, dtype=torch.float32)  # noqa: E731
    vs, pg_adv = vtrace(f(mu), f(pi), f(reward), f(value), f(next_value), f(terminated), f(done), gamma,
                        rho_bar, c_bar)
    want_vs, want_adv = reference_vtrace(mu.tolist(), pi.tolist(), reward.tolist(), value.tolist(),
                                         next_value.tolist(), terminated.tolist(), done.tolist(), gamma, rho_bar,
                                         c_bar)
    np.testing.assert_allclose(vs.numpy(), np.array(want_vs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pg_adv.numpy(), np.array(want_adv), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("discrete", [True, False])
def test_policy_tensors_names_shapes_and_dtypes(discrete):
    model = ActorCritic(5, 3, discrete, hidden=(16, 8))
    tensors = model.policy_tensors()
    want = {"layers.0.weight": (16, 5), "layers.0.bias": (16,), "layers.1.weight": (8, 16), "layers.1.bias": (8,),
            "layers.2.weight": (3, 8), "layers.2.bias": (3,)}
    if not discrete:
        want["log_std"] = (3,)
    assert {k: v.shape for k, v in tensors.items()} == want
    for name, x in tensors.items():
        assert x.dtype == np.float32 and x.flags["C_CONTIGUOUS"], name
    if not discrete:
        np.testing.assert_array_equal(tensors["log_std"], np.zeros(3, np.float32))
    # Copies: changing them leaves the model alone.
    tensors["layers.0.weight"][:] = 7.0
    assert not torch.any(model.layers[0].weight == 7.0)


@pytest.mark.parametrize("discrete", [True, False])
def test_numpy_forward_over_exported_tensors_reproduces_policy(discrete):
    torch.manual_seed(6)
    model = ActorCritic(4, 3, discrete, hidden=(32, 32))
    with torch.no_grad():   # move off the near-zero init so the check has signal
        for p in model.layers.parameters():
            p.add_(0.3 * torch.randn_like(p))
    obs = np.random.default_rng(6).standard_normal((50, 4)).astype(np.float32)
    with torch.no_grad():
        dist = model.distribution(torch.from_numpy(obs))
        out = (dist.logits if discrete else dist.mean).numpy()
    mine = numpy_logits(model.policy_tensors(), obs)
    if discrete:   # Categorical normalises logits; compare log-softmax
        mine = mine - np.log(np.exp(mine - mine.max(1, keepdims=True)).sum(1, keepdims=True)) - mine.max(1,
                                                                                                          keepdims=True)
    np.testing.assert_allclose(out, mine, atol=1e-5)
    assert np.abs(out).max() > 0.1


def test_continuous_log_prob_sums_over_action_dims():
    torch.manual_seed(7)
    model = ActorCritic(3, 2, False, hidden=(8,))
    with torch.no_grad():
        model.log_std.copy_(torch.tensor([-0.5, 0.3]))
    obs = torch.randn(4, 3)
    action = torch.randn(4, 2)
    with torch.no_grad():
        mean = model.policy_output(obs)
        logp = model.distribution(obs).log_prob(action)
    std = np.exp([-0.5, 0.3])
    z = (action.numpy() - mean.numpy()) / std
    want = (-0.5 * z ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(1)
    np.testing.assert_allclose(logp.numpy(), want, rtol=1e-5, atol=1e-5)


def test_from_config_and_bad_config():
    m = ActorCritic.from_config(4, 2, True, {"hidden": [32], "activation": "relu"})
    assert [tuple(l.weight.shape) for l in m.layers] == [(32, 4), (2, 32)]
    assert [tuple(l.weight.shape) for l in m.value_layers] == [(32, 4), (1, 32)]
    with pytest.raises(ValueError, match="hiden"):
        ActorCritic.from_config(4, 2, True, {"hiden": [32]})
    with pytest.raises(ValueError, match="activation"):
        ActorCritic(4, 2, True, activation="gelu")
    with pytest.raises(ValueError, match="epoch"):
        PPO(m, {"epoch": 3})
    with pytest.raises(ValueError, match="optimizer"):
        Impala(m, {"optimizer": "sgd"})


def test_bad_batch_names_the_field():
    model = ActorCritic(4, 2, True)
    batch = make_batch(np.random.default_rng(8))
    batch["reward"] = batch["reward"][:, :-1]
    with pytest.raises(ValueError, match="reward"):
        PPO(model).update(batch)
    batch = make_batch(np.random.default_rng(8))
    del batch["final_obs"]
    with pytest.raises(ValueError, match="final_obs"):
        Impala(model).update(batch)


# --------------------------------------------------------------------------- updates


LEARNERS = [
    ("ppo", True), ("ppo", False), ("impala", True), ("impala", False),
]


def build(algo, discrete, cfg=None):
    model = ActorCritic(4, 2, discrete, hidden=(16, 16))
    learner = (PPO if algo == "ppo" else Impala)(model, cfg or {"lr": 1e-2})
    return model, learner


@pytest.mark.parametrize("algo,discrete", LEARNERS)
def test_update_returns_finite_stats_and_changes_parameters(algo, discrete):
    torch.manual_seed(9)
    model, learner = build(algo, discrete)
    before = all_params(model)
    stats = learner.update(make_batch(np.random.default_rng(9), discrete=discrete))
    want = ({"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance"}
            if algo == "ppo" else {"policy_loss", "value_loss", "entropy", "mean_rho", "clipped_rho_fraction"})
    assert want | {"grad_steps"} <= set(stats)
    for k in want:
        assert math.isfinite(stats[k]), (k, stats[k])
    assert stats["grad_steps"] == (16 if algo == "ppo" else 1)
    for p0, p1 in zip(before, model.parameters()):
        assert not torch.equal(p0, p1.detach())


@pytest.mark.parametrize("algo,discrete", LEARNERS)
def test_zero_weight_batch_leaves_model_and_optimizer_unchanged(algo, discrete):
    torch.manual_seed(10)
    model, learner = build(algo, discrete)
    rng = np.random.default_rng(10)
    learner.update(make_batch(rng, discrete=discrete))     # optimizer now has momentum
    before = all_params(model)
    opt_before = learner.state_dict()["optimizer"]["state"]
    batch = make_batch(rng, discrete=discrete)
    batch["weight"][:] = 0.0
    stats = learner.update(batch)
    assert stats["grad_steps"] == 0
    for p0, p1 in zip(before, model.parameters()):
        assert torch.equal(p0, p1.detach())
    opt_after = learner.state_dict()["optimizer"]["state"]
    for k in opt_before:
        for name, x in opt_before[k].items():
            assert torch.equal(torch.as_tensor(x), torch.as_tensor(opt_after[k][name])), (k, name)


@pytest.mark.parametrize("algo", ["ppo", "impala"])
def test_zero_weight_item_contributes_no_gradient(algo):
    """An item with weight 0 leaves the result exactly as if its data were anything else."""
    rng = np.random.default_rng(11)
    batch_a = make_batch(rng, b=2)
    batch_a["weight"][:] = [1.0, 0.0]
    batch_b = {k: v.copy() for k, v in batch_a.items()}
    batch_b["reward"][1] = 100.0 * rng.standard_normal(batch_b["reward"][1].shape)
    batch_b["action"][1] = 1 - batch_b["action"][1]
    cfg = {"lr": 1e-2}
    results = []
    for batch in (batch_a, batch_b):
        torch.manual_seed(11)
        model, learner = build(algo, True, cfg)
        learner.update(batch)
        results.append(all_params(model))
    for p0, p1 in zip(*results):
        torch.testing.assert_close(p0, p1, rtol=0, atol=1e-7)


@pytest.mark.parametrize("algo", ["ppo", "impala"])
def test_update_is_deterministic_and_state_dict_round_trips(algo):
    rng = np.random.default_rng(12)
    batches = [make_batch(rng) for _ in range(3)]
    cfg = {"lr": 1e-2, "minibatches": 2, "epochs": 2}

    torch.manual_seed(12)
    model_a, learner_a = build(algo, True, cfg)
    for batch in batches:
        learner_a.update(batch)

    torch.manual_seed(12)
    model_b, learner_b = build(algo, True, cfg)
    learner_b.update(batches[0])
    saved_model = {k: v.clone() for k, v in model_b.state_dict().items()}
    saved = learner_b.state_dict()
    rng_state = torch.get_rng_state()
    model_c = ActorCritic(4, 2, True, hidden=(16, 16))
    model_c.load_state_dict(saved_model)
    learner_c = (PPO if algo == "ppo" else Impala)(model_c, cfg)
    learner_c.load_state_dict(saved)
    torch.set_rng_state(rng_state)
    for batch in batches[1:]:
        learner_c.update(batch)
    for p0, p1 in zip(model_a.parameters(), model_c.parameters()):
        assert torch.equal(p0, p1)


def test_ppo_anneal_lr_follows_progress():
    model, learner = build("ppo", True, {"lr": 1e-3, "anneal_lr": True})
    batch = make_batch(np.random.default_rng(13))
    assert learner.update(batch, progress=0.25)["lr"] == pytest.approx(7.5e-4)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(7.5e-4)


# --------------------------------------------------------------------------- learning


def test_ppo_learns_cartpole():
    """PPO with flywheel's envs (same-step autoreset) gets CartPole-v1 to a
    mean return of 150 over the last 20 episodes within 30k env steps and
    of 450 within 100k (about 10k and 40k steps on any seed tried, ~1 s)."""
    from flywheel import envs

    torch.manual_seed(0)
    e, t_len, max_steps = 8, 128, 100_000
    pool = envs.make("CartPole-v1", num_envs=e, num_threads=1, seed=0, autoreset_mode="same_step")
    # The configuration bench/rl_tune.py found fastest on CartPole-v1.
    model = ActorCritic(4, 2, True, hidden=(64,))
    ppo = PPO(model, {"lr": 1e-2, "anneal_lr": True, "epochs": 2, "minibatches": 4, "clip_value": False})
    obs, _ = pool.reset(seed=0)
    ep_return = np.zeros(e)
    finished = []
    steps = 0
    steps_to_150 = None
    start = time.perf_counter()
    while steps < max_steps and not (len(finished) >= 20 and np.mean(finished[-20:]) >= 450):
        batch = {k: [] for k in ("obs", "action", "logprob", "reward", "terminated", "truncated", "final_obs")}
        for _ in range(t_len):
            with torch.no_grad():
                dist = model.distribution(torch.as_tensor(obs, dtype=torch.float32))
                action = dist.sample()
                logprob = dist.log_prob(action)
            batch["obs"].append(np.array(obs, np.float32))
            obs, reward, terminated, truncated, info = pool.step(action.numpy())
            done = terminated | truncated
            batch["action"].append(action.numpy())
            batch["logprob"].append(logprob.numpy())
            batch["reward"].append(reward.astype(np.float32))
            batch["terminated"].append(terminated.copy())
            batch["truncated"].append(truncated.copy())
            batch["final_obs"].append(np.where(info["_final_obs"][:, None], info["final_obs"], 0).astype(np.float32))
            ep_return += reward
            finished.extend(ep_return[done].tolist())
            ep_return[done] = 0.0
        batch["obs"].append(np.array(obs, np.float32))
        batch = {k: np.stack(v)[None] for k, v in batch.items()}
        batch["version"] = np.zeros((1, t_len), np.int64)
        batch["weight"] = np.ones(1, np.float32)
        steps += t_len * e
        stats = ppo.update(batch, progress=steps / max_steps)
        assert math.isfinite(stats["policy_loss"])
        if steps_to_150 is None and len(finished) >= 20 and np.mean(finished[-20:]) >= 150:
            steps_to_150 = steps
    pool.close()
    elapsed = time.perf_counter() - start
    assert steps_to_150 is not None and steps_to_150 <= 30_000, (steps_to_150, finished[-20:])
    assert len(finished) >= 20 and np.mean(finished[-20:]) >= 450, (steps, elapsed, finished[-20:])


def test_staleness_drops_or_downweights_items_beyond_the_lag_bound_and_counts_them():
    from flywheel.rl.learner import Staleness
    lags = np.array([0, 1, 3, 4, 7])
    s = Staleness()
    keep, weight = s.apply(lags, max_lag=3, mode="drop", stale_weight=0.1)
    assert keep.tolist() == [True, True, True, False, False]
    assert weight.tolist() == [1, 1, 1, 1, 1]
    assert (s.seen, s.used, s.dropped, s.downweighted) == (5, 3, 2, 0)
    keep, weight = s.apply(lags, max_lag=3, mode="downweight", stale_weight=0.25)
    assert keep.all() and weight.tolist() == [1, 1, 1, 0.25, 0.25]
    assert (s.seen, s.used, s.dropped, s.downweighted) == (10, 8, 2, 2)
    assert s.lags == {0: 2, 1: 2, 3: 2, 4: 2, 7: 2}
    assert s.percentile(0.5) == 3 and s.percentile(1.0) == 7
    # the counters survive a checkpoint (they are saved as this dict)
    again = Staleness.from_dict(json.loads(json.dumps(s.to_dict())))
    assert again.to_dict() == s.to_dict()
