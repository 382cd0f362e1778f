"""Data-parallel learners: two processes under torch.distributed (gloo, CPU),
each stepping GRPOLearner on half of every batch, end with the weights one
process gets stepping on the whole batch."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

WORKER = textwrap.dedent("""
    import os, random, sys
    import numpy as np
    import torch
    from flywheel import llm
    from flywheel.rl.lm.learner import GRPOLearner, Rollout

    rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    cfg = llm.LlamaConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    for aggregation in ("token-mean", "seq-mean-token-sum"):
        torch.manual_seed(0)
        model = llm.Transformer(cfg)
        learner = GRPOLearner(model, torch.optim.AdamW(model.parameters(), lr=1e-2), group_size=4,
                              aggregation=aggregation, token_budget=64)
        rng = random.Random(7)
        for step in range(3):
            groups = []
            for g in range(4):
                prompt = [rng.randrange(3, 20) for _ in range(rng.randrange(2, 6))]
                rolls = []
                for k in range(4):
                    n = rng.randrange(1, 6)  # unequal lengths: token counts differ between ranks
                    reward = 1.0 if g == 3 else float(rng.random() < 0.5)  # group 3: uniform, dropped
                    rolls.append(Rollout(prompt=prompt, response=[rng.randrange(3, 20) for _ in range(n)],
                                         behaviour_logprobs=[-2.0 - rng.random() for _ in range(n)], reward=reward,
                                         group=g))
                groups.append(rolls)
            if rank == 0 and world == 1:
                mine = groups
            else:
                mine = groups[rank * 4 // world:(rank + 1) * 4 // world]
            learner.step([r for g in mine for r in g])
        if rank == 0:
            np.savez(out + "-" + aggregation + ".npz", **learner.weights())
""")


def _run(world, tmp_path):
    init = str(tmp_path / f"init-{world}")
    out = str(tmp_path / f"w-{world}")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(r), str(world), init, out], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    for p in procs:
        output, _ = p.communicate(timeout=300)
        assert p.returncode == 0, output
    return {agg: dict(np.load(f"{out}-{agg}.npz")) for agg in ("token-mean", "seq-mean-token-sum")}


def test_two_data_parallel_learners_take_the_step_one_learner_takes(tmp_path):
    one = _run(1, tmp_path)
    two = _run(2, tmp_path)
    start = _run_start()
    for aggregation in ("token-mean", "seq-mean-token-sum"):
        assert one[aggregation].keys() == two[aggregation].keys()
        moved = 0.0
        for k in one[aggregation]:
            np.testing.assert_allclose(two[aggregation][k], one[aggregation][k], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{aggregation} {k}")
            moved = max(moved, float(np.abs(one[aggregation][k] - start[k]).max()))
        assert moved > 1e-3, aggregation  # the steps changed the weights


def _run_start():
    from flywheel import llm
    cfg = llm.LlamaConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    m = llm.Transformer(cfg)
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}
