"""Weights over gRPC from Python, and the two actors (C++ `flywheel run
--role actor`, Python PythonActor) writing the same unroll format that the
learner reads — with the C++ actor's behaviour log-probs checked against
PyTorch's for the weights the learner published."""

import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from flywheel import _core, envs, replay  # noqa: E402

pytestmark = pytest.mark.skipif(not getattr(_core, "replay_service_available", False),
                                reason="built without gRPC")

BIN = os.environ.get("FLYWHEEL_BIN", "flywheel")
COLUMNS = ("obs", "action", "logprob", "reward", "terminated", "truncated", "next_obs", "episode_return", "version")


def server(queue=4):
    return replay.Server([replay.Table.queue("unrolls", queue)], weights=True)


def test_weight_client_publish_fetch_wait_and_errors():
    from flywheel.rl.weights import WeightClient
    with server() as s:
        wc = WeightClient(s.address)
        assert wc.fetch("policy") is None  # never published: nothing newer
        w = {"layers.0.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
             "layers.0.bias": np.zeros(2, np.float32), "step": np.int64(7)}
        assert wc.publish("policy", w) == 1
        version, got = wc.fetch("policy")
        assert version == 1 and set(got) == set(w)
        for k in w:
            assert got[k].dtype == np.asarray(w[k]).dtype and np.array_equal(got[k], w[k])
        assert wc.fetch("policy", newer_than=1, wait=0.2) is None
        assert wc.publish("policy", w, version=10) == 10
        with pytest.raises(Exception, match="does not exceed the current version 10"):
            wc.publish("policy", w, version=5)
        with pytest.raises(TypeError, match="tensor 's'"):
            wc.publish("policy", {"s": np.array(["a"])})
        assert wc.list() == [("policy", 10)]


def test_cpp_actor_and_python_actor_write_the_same_items(tmp_path):
    from flywheel.rl.models import ActorCritic
    from flywheel.rl.weights import WeightClient
    from flywheel.rl.actor import PythonActor
    from flywheel.rl.learner import to_learner_batch

    torch.manual_seed(0)
    model = ActorCritic(4, 2, discrete=True, hidden=(16,))
    cfg = tmp_path / "run.toml"
    cfg.write_text('[env]\nid = "CartPole-v1"\nnum_envs = 3\n[actor]\nunroll_length = 20\n[policy]\nhidden = [16]\n')
    with server() as s:
        wc = WeightClient(s.address)
        version = wc.publish("policy", model.policy_tensors())
        actor = subprocess.Popen([BIN, "run", str(cfg), "--role", "actor", "--address", s.address,
                                  "--run-dir", str(tmp_path / "run")], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        cpp = replay.Client(s.address).sample("unrolls", 1, timeout=60)
        # As the learner ends a run: close the table, publish once more to
        # wake the on-policy actor; it sees the table closed and stops.
        s.tables["unrolls"].close()
        wc.publish("policy", model.policy_tensors())
        out, _ = actor.communicate(timeout=60)
        assert actor.returncode == 0, out
        assert "actor 0: stopped" in out

    with server() as s:
        def policy(obs):
            with torch.no_grad():
                d = model.distribution(torch.from_numpy(obs))
                a = d.sample()
                return a.numpy(), d.log_prob(a).numpy()
        pool = envs.make("CartPole-v1", num_envs=3, autoreset_mode="same_step", seed=5)
        py_actor = PythonActor(s.address, pool, policy, unroll_length=20, version=version)
        assert py_actor.run(max_unrolls=1) == 1
        py = replay.Client(s.address).sample("unrolls", 1, timeout=10)
        py_actor.close()

    for c in COLUMNS:
        assert cpp.data[c].dtype == py.data[c].dtype, c
        assert cpp.data[c].shape == py.data[c].shape, c
    assert cpp.data["obs"].shape == (1, 20, 3, 4) and cpp.data["action"].shape == (1, 20, 3)
    assert (cpp.data["version"] == version).all() and (py.data["version"] == version).all()
    for d in (cpp.data, py.data):
        # next_obs is the following obs except where an episode ended.
        done = d["terminated"][0] | d["truncated"][0]
        same = np.all(d["next_obs"][0, :-1] == d["obs"][0, 1:], axis=-1)
        assert same[~done[:-1]].all()
        assert np.isnan(d["episode_return"][0][~done]).all() and not np.isnan(d["episode_return"][0][done]).any()

    # The C++ actor's behaviour log-probs are the published policy's (as
    # PyTorch computes them), so importance ratios start at exactly ~1.
    with torch.no_grad():
        d = model.distribution(torch.from_numpy(cpp.data["obs"][0]))
        lp = d.log_prob(torch.from_numpy(cpp.data["action"][0])).numpy()
    np.testing.assert_allclose(cpp.data["logprob"][0], lp, atol=1e-5)

    batch = to_learner_batch(cpp.data, np.ones(1, np.float32))
    assert batch["obs"].shape == (1, 21, 3, 4) and batch["final_obs"].shape == (1, 20, 3, 4)
