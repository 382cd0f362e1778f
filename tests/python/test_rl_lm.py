"""RL for language models, the learner's building blocks against hand-computed
values: advantages, KL estimators, the clipped surrogate and its variants,
aggregation, overlong shaping, dynamic sampling, mismatch, packing, rewards."""

import math
import time

import numpy as np
import pytest
import torch

from flywheel import llm
from flywheel.rl.lm import losses as L
from flywheel.rl.lm import packing, rewards


def close(a, b, tol=1e-6):
    a = a.detach() if isinstance(a, torch.Tensor) else a
    return abs(float(a) - float(b)) <= tol


def test_grpo_advantages_by_hand_and_a_group_whose_rewards_are_all_equal():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5])
    a = L.grpo_advantages(r, group_size=2, eps=0.0)
    s = 1 / math.sqrt(2)  # sample std of {1, 0}: sqrt(0.5)
    assert close(a[0], 0.5 / s) and close(a[1], -0.5 / s)
    assert a[2] == 0 and a[3] == 0  # all equal: no signal
    dr = L.grpo_advantages(r, group_size=2, scale=False)
    assert dr.tolist() == [0.5, -0.5, 0.0, 0.0]
    with pytest.raises(ValueError, match="groups of 3"):
        L.grpo_advantages(r, group_size=3)


def test_rloo_uses_the_mean_of_the_other_answers():
    a = L.rloo_advantages(torch.tensor([1.0, 0.0, 0.0]), group_size=3)
    assert a.tolist() == [1.0, -0.5, -0.5]
    with pytest.raises(ValueError, match="group_size >= 2"):
        L.rloo_advantages(torch.tensor([1.0]), group_size=1)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # log r = -1
    assert close(L.kl_estimate(logp, ref, "k1"), 1.0)
    assert close(L.kl_estimate(logp, ref, "k2"), 0.5)
    assert close(L.kl_estimate(logp, ref, "k3"), math.exp(-1) - 1 + 1)
    assert L.kl_estimate(ref, ref, "k3").item() == 0
    with pytest.raises(ValueError, match="k4"):
        L.kl_estimate(logp, ref, "k4")


def test_aggregations_by_hand():
    per = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert close(L.aggregate(per, mask, "token-mean"), 2.5)
    assert close(L.aggregate(per, mask, "seq-mean-token-mean"), 3.0)
    assert close(L.aggregate(per, mask, "seq-mean-token-sum"), (6 / 3 + 4 / 3) / 2)
    assert close(L.aggregate(per, mask, "seq-mean-token-sum", max_tokens=10), (0.6 + 0.4) / 2)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        L.aggregate(per, mask, "mean")


def test_clipped_surrogate_clip_higher_and_metrics():
    old = torch.zeros(2, 1)
    logp = torch.log(torch.tensor([[1.5], [0.5]]))
    mask = torch.ones(2, 1)
    # Response 0: A = +1, ratio 1.5 -> clipped at 1.2 (or 1.28 with clip-higher).
    # Response 1: A = -1, ratio 0.5 -> min(-0.5, -0.8) = -0.8, loss +0.8.
    adv = torch.tensor([1.0, -1.0])
    loss, m = L.policy_loss(logp, old, adv, mask, clip_low=0.2)
    assert close(loss, (-1.2 + 0.8) / 2)
    assert m["clip_frac_high"] == 0.5 and m["clip_frac_low"] == 0.5
    assert close(m["ratio_max"], 1.5, 1e-6)
    loss_hi, _ = L.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert close(loss_hi, (-1.28 + 0.8) / 2)
    with pytest.raises(ValueError, match="clip_low"):
        L.policy_loss(logp, old, adv, mask, clip_low=1.5)
    with pytest.raises(ValueError, match="one advantage per response"):
        L.policy_loss(logp, old, torch.ones(3), mask)


def test_on_policy_gradient_is_minus_the_advantage_per_token_and_a_single_token_answer_works():
    # On-policy (ratio 1): d loss / d logp_t = -A_i / (number of masked tokens), token-mean.
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])  # response 1 is a single token
    adv = torch.tensor([2.0, -1.0])
    loss, _ = L.policy_loss(logp, logp.detach(), adv, mask)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2 / 3, -2 / 3, 0.0], [1 / 3, 0.0, 0.0]]))
    assert close(loss, -(2 + 2 - 1) / 3)


def test_gspo_uses_one_length_normalised_ratio_per_response():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[math.log(2.0), 0.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    loss, m = L.policy_loss(logp, old, torch.tensor([1.0]), mask, clip_low=0.5, sequence_ratio=True)
    s = math.sqrt(2.0)  # exp(mean(log 2, 0))
    assert close(loss, -s, 1e-6) and close(m["ratio_mean"], s, 1e-6)
    loss.backward()
    # d(-s)/d logp_t = -s / |y| for both tokens.
    assert torch.allclose(logp.grad, torch.full((1, 2), -s / 2), atol=1e-6)


def test_kl_penalty_adds_beta_times_k3():
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
    loss, m = L.policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), ref_logp=ref, kl_coef=0.1)
    assert close(loss, 0.1 * math.exp(-1)) and close(m["kl"], math.exp(-1))
    with pytest.raises(ValueError, match="ref_logp"):
        L.policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), kl_coef=0.1)


def test_overlong_penalty_for_a_sequence_cut_at_max_length():
    p = L.overlong_penalty(torch.tensor([6, 8, 10, 12]), max_tokens=10, buffer=4)
    assert p.tolist() == [0.0, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="buffer"):
        L.overlong_penalty(torch.tensor([1]), max_tokens=10, buffer=0)


def test_dynamic_sampling_keeps_groups_with_different_rewards():
    keep = L.informative_groups(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), group_size=2)
    assert keep.tolist() == [False, True, False]


def test_mismatch_is_zero_for_identical_log_probs_and_is_weights_are_capped():
    lp = torch.tensor([[-0.5, -1.0]])
    mm = L.mismatch(lp, lp, torch.ones(1, 2))
    assert mm["mismatch_kl"] == 0 and mm["mismatch_ratio_max"] == 1
    w = L.truncated_is_weights(torch.tensor([[-3.0, -1.0]]), torch.tensor([[-1.0, -1.0]]), cap=2.0)
    assert w.tolist() == [[2.0, 1.0]]


def test_packing_first_fit_decreasing_by_hand():
    seqs = [[1] * 5, [2] * 2, [3] * 3, [4] * 4]
    masks = [[False] * 2 + [True] * 3, [True] * 2, [False, True, True], [True] * 4]
    b = packing.pack(seqs, masks, token_budget=8)
    # Decreasing: 5 (seq 0) row 0; 4 (seq 3) row 1; 3 (seq 2) fills row 0; 2 (seq 1) row 1.
    assert b.places == [(0, 0, 5), (1, 4, 2), (0, 5, 3), (1, 0, 4)]
    assert b.input_ids.shape == (2, 8)
    assert b.segment_ids[1].tolist() == [3, 3, 3, 3, 1, 1, -1, -1]
    assert b.position_ids[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert b.loss_mask[0].tolist() == [False, False, True, True, True, False, True, True]
    assert close(b.efficiency, 14 / 16)
    back = packing.unpack(b.input_ids, b)
    assert [t.tolist() for t in back] == seqs
    with pytest.raises(ValueError, match="sequence 0 has 5 tokens, more than the token budget 4"):
        packing.pack(seqs, masks, token_budget=4)


def test_packed_sequences_compute_exactly_what_they_compute_alone():
    cfg = llm.LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = llm.Transformer(cfg).eval()
    seqs = [[3, 7, 9, 1, 4], [5, 6], [8, 2, 2]]
    b = packing.pack(seqs, [[True] * len(s) for s in seqs], token_budget=8)
    with torch.no_grad():
        packed = model(b.input_ids, segment_ids=b.segment_ids)
        for s, got in zip(seqs, packing.unpack(packed, b)):
            alone = model(torch.tensor([s]))[0]
            assert torch.allclose(got, alone, atol=1e-5), (s, (got - alone).abs().max())


def test_numeric_answer_and_format_rewards():
    assert rewards.numeric_answer("12 + 30 = 42. The answer is 42.", 42) == 1.0
    assert rewards.numeric_answer("so \\boxed{1,234}", 1234) == 1.0
    assert rewards.numeric_answer("answer: 3/4", 0.75) == 1.0
    assert rewards.numeric_answer("answer: 42.0", "42") == 1.0
    assert rewards.numeric_answer("I think 41, no wait, 43", 42) == 0.0
    assert rewards.numeric_answer("no idea", 42) == 0.0
    assert rewards.numeric_answer("the answer is -7", -7) == 1.0
    with pytest.raises(ValueError, match="not a number"):
        rewards.numeric_answer("1", "forty-two")
    assert rewards.format_reward("<think>x</think> answer: 5", r"<think>.*</think>\s*answer: -?\d+") == 1.0
    assert rewards.format_reward("answer: 5", r"<think>.*</think>\s*answer: -?\d+") == 0.0


def test_arith_task_tables_have_disjoint_splits_and_right_answers(tmp_path):
    import flywheel
    from flywheel.rl.lm import tasks
    paths = tasks.make_arith(str(tmp_path / "arith"), train=300, test=100, seed=5)
    train = flywheel.Table.open(paths["train"]).to_arrow().to_pylist()
    test = flywheel.Table.open(paths["test"]).to_arrow().to_pylist()
    assert len(train) == 300 and len(test) == 100
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for r in train + test:
        a, op, b, _ = r["prompt"].split()
        assert r["answer"] == eval(f"{a} {op} {b}")  # noqa: S307 (our own generated text)
    assert tasks.arith_problems(10, seed=1) == tasks.arith_problems(10, seed=1)
    with pytest.raises(FileExistsError):
        tasks.make_arith(str(tmp_path / "arith"), train=1, test=1)
    with pytest.raises(ValueError, match="more digits"):
        tasks.arith_problems(10_000, digits=1)


def _trl_loss(loss_type, logp, old, ref, adv, mask, eps_low, eps_high, beta, level):
    """TRL's GRPOTrainer._compute_loss on the same tensors, with the trainer's
    state reduced to what the loss reads (one process, no accumulation)."""
    from collections import defaultdict
    from types import SimpleNamespace

    from trl.trainer.grpo_trainer import GRPOTrainer

    class OneProcess:
        num_processes, sync_gradients = 1, True

        def gather(self, x):
            return x

        gather_for_metrics = gather

        def reduce(self, x, reduction="sum"):
            return x

    b, t = logp.shape
    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level=level, beta=beta, loss_type=loss_type, epsilon_low=eps_low,
        epsilon_high=eps_high, use_vllm=False, vllm_importance_sampling_correction=False,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None), model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=t, _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)), accelerator=OneProcess())
    inputs = {"prompt_ids": torch.zeros(b, 2, dtype=torch.long), "prompt_mask": torch.ones(b, 2, dtype=torch.long),
              "completion_ids": torch.zeros(b, t, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref}
    return GRPOTrainer._compute_loss(fake, None, inputs)


@pytest.mark.parametrize("trl_type,ours,level,beta,eps_high", [
    ("grpo", "seq-mean-token-mean", "token", 0.0, 0.2),
    ("grpo", "seq-mean-token-mean", "token", 0.04, 0.28),   # KL (k3) and clip-higher
    ("bnpo", "token-mean", "token", 0.0, 0.2),
    ("dr_grpo", "seq-mean-token-sum", "token", 0.0, 0.2),
    ("grpo", "seq-mean-token-mean", "sequence", 0.0, 0.2),  # GSPO
])
def test_grpo_loss_equals_trls_on_the_same_batch(trl_type, ours, level, beta, eps_high):
    pytest.importorskip("trl")
    g = torch.Generator().manual_seed(3)
    b, t = 6, 7
    old = -torch.rand(b, t, generator=g) * 3
    logp = (old + torch.randn(b, t, generator=g) * 0.3).requires_grad_()
    ref = old + torch.randn(b, t, generator=g) * 0.2
    mask = (torch.arange(t)[None] < torch.tensor([7, 5, 1, 3, 7, 2])[:, None]).float()  # a 1-token answer too
    adv = L.grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.5]), group_size=3)
    theirs = _trl_loss(trl_type, logp, old, ref, adv, mask, 0.2, eps_high, beta, level)
    mine, _ = L.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=eps_high, aggregation=ours,
                            ref_logp=ref if beta else None, kl_coef=beta, sequence_ratio=(level == "sequence"))
    assert torch.allclose(mine, theirs, rtol=1e-6, atol=1e-7), (float(mine), float(theirs))
    (g_mine,) = torch.autograd.grad(mine, logp)
    (g_theirs,) = torch.autograd.grad(theirs, logp)
    assert torch.allclose(g_mine, g_theirs, rtol=1e-5, atol=1e-7)


def _toy_task(tmp_path):
    """A 2-layer model, its engine and the toy task: prompt [1, c, a] ->
    answer token a + 1, c noise; held-out prompts use values of c never
    trained on."""
    cfg = llm.LlamaConfig(vocab_size=24, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                          bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = llm.Transformer(cfg)
    ckpt = str(tmp_path / "init")
    llm.save(model, ckpt)
    eng = llm.Engine(ckpt, version=0)
    answers = {a: a + 1 for a in range(3, 13)}
    train = [[1, c, a] for c in range(13, 17) for a in answers]
    held_out = [[1, c, a] for c in range(17, 21) for a in answers]

    def accuracy(prompts):
        out = eng.generate(prompts, max_new_tokens=1, temperature=0.0, ignore_eos=True)
        return sum(o["tokens"][0] == answers[p[2]] for p, o in zip(prompts, out)) / len(prompts)

    return model, eng, answers, train, held_out, accuracy


def test_grpo_learner_with_the_engine_raises_held_out_accuracy(tmp_path):
    """The whole loop in small: the engine samples groups, a verifier scores
    them, the learner takes GRPO steps, new weights go back into the engine.
    Task: prompt [1, c, a] -> answer token a + 1; c is noise, and held-out
    prompts use values of c never trained on. Held-out greedy accuracy must
    rise from chance to most prompts."""
    from flywheel.rl.lm.learner import GRPOLearner, Rollout
    model, eng, answers, train, held_out, accuracy = _toy_task(tmp_path)
    before = accuracy(held_out)
    learner = GRPOLearner(model, torch.optim.Adam(model.parameters(), lr=3e-3), group_size=8)
    first = None
    for it in range(40):
        prompts = [train[(it * 10 + k) % len(train)] for k in range(10)]
        out = eng.generate(prompts, max_new_tokens=1, temperature=1.0, n=8, seed=100 * it, ignore_eos=True)
        assert len(out) == 80 and [o["sample"] for o in out[:8]] == list(range(8))
        rollouts = [Rollout(prompt=prompts[i // 8], response=o["tokens"], behaviour_logprobs=o["logprobs"],
                            reward=float(o["tokens"][0] == answers[prompts[i // 8][2]]), group=i // 8,
                            versions=o["versions"])
                    for i, o in enumerate(out)]
        assert all(r.versions == [it] for r in rollouts)  # every token carries the version that made it
        m = learner.step(rollouts)
        if first is None and m["updated"]:
            first = m
        eng.update_weights_from_arrays(learner.weights(), it + 1)
    after = accuracy(held_out)
    # The engine's behaviour log-probs are what the learner recomputes (F32 on both sides).
    assert first["mismatch_kl"] < 1e-6 and abs(first["mismatch_ratio_max"] - 1) < 1e-4, first
    print(f"held-out accuracy {before:.2f} -> {after:.2f}; mismatch kl {first['mismatch_kl']:.2e}")
    assert before <= 0.25 and after >= before + 0.5, (before, after)


def _verifier(kind, x):
    import os
    import time as _time
    if kind == "ok":
        return x * 2
    if kind == "raise":
        raise RuntimeError("verifier bug")
    if kind == "hang":
        _time.sleep(60)
    if kind == "oom":
        return len(bytearray(4 << 30))
    if kind == "exit":
        os._exit(3)
    return 0


def test_reward_pool_survives_verifiers_that_raise_hang_run_out_of_memory_or_die():
    from flywheel.rl.lm.reward_pool import RewardPool
    items = [("ok", 1), ("raise", 0), ("ok", 2), ("hang", 0), ("oom", 0), ("exit", 0), ("ok", 3)]
    start = time.monotonic()
    with RewardPool(_verifier, workers=2, timeout=1.0, memory_mb=512, failure_value=-1.0) as pool:
        got = pool.score(items)
        assert got == [2.0, -1.0, 4.0, -1.0, -1.0, -1.0, 6.0]
        # A memory error under the cap is raised in the verifier; the hang hits the timeout.
        assert pool.failures == {"raised": 2, "timeout": 1, "died": 1}, pool.last_errors
        assert any("verifier bug" in e for e in pool.last_errors)
        assert pool.score([("ok", 5)] * 6) == [10.0] * 6  # replaced workers keep serving
    assert time.monotonic() - start < 20
    with pytest.raises(ValueError, match="timeout"):
        RewardPool(_verifier, timeout=0)


def test_token_gae_and_clipped_value_loss_by_hand():
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 7.0]])
    v = torch.full((2, 3), 0.5)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # row 1 ends after two tokens; its third is padding
    adv, ret = L.token_gae(r, v, mask, gamma=1.0, lam=1.0)
    assert adv[0].tolist() == [0.5, 0.5, 0.5] and ret[0].tolist() == [1.0, 1.0, 1.0]
    assert adv[1].tolist() == [0.5, 0.5, 0.0]  # the padding's reward and value never enter
    adv, _ = L.token_gae(r[:1], v[:1], mask[:1], gamma=1.0, lam=0.5)
    assert adv[0].tolist() == [0.125, 0.25, 0.5]
    with pytest.raises(ValueError, match="gamma"):
        L.token_gae(r, v, mask, gamma=1.5)
    # Value loss: V moved from 0 to 1 with target 2 and clip 0.2 -> max((1-2)^2, (0.2-2)^2)/2.
    loss = L.value_loss(torch.tensor([[1.0]]), torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.ones(1, 1))
    assert close(loss, 0.5 * 1.8 ** 2)
    assert close(L.value_loss(torch.tensor([[1.0]]), torch.tensor([[2.0]]), torch.tensor([[0.0]]),
                              torch.ones(1, 1), clip=None), 0.5)


def test_ppo_learner_with_a_value_head_raises_held_out_accuracy(tmp_path):
    """PPO over tokens (value head, token GAE, clipped value loss) on the toy
    task of the GRPO test: held-out greedy accuracy rises and the value loss
    falls as the critic learns the reward."""
    from flywheel.rl.lm.learner import PPOLearner, Rollout
    model, eng, answers, train, held_out, accuracy = _toy_task(tmp_path)
    cfg = model.config
    before = accuracy(held_out)
    head = torch.nn.Linear(cfg.hidden_size, 1)
    opt = torch.optim.Adam([{"params": model.parameters()}, {"params": head.parameters(), "lr": 1e-2}], lr=3e-3)
    learner = PPOLearner(model, opt, head, group_size=8, epochs=2)
    value_losses = []
    for it in range(40):
        prompts = [train[(it * 10 + k) % len(train)] for k in range(10)]
        out = eng.generate(prompts, max_new_tokens=1, temperature=1.0, n=8, seed=100 * it, ignore_eos=True)
        rollouts = [Rollout(prompt=prompts[i // 8], response=o["tokens"], behaviour_logprobs=o["logprobs"],
                            reward=float(o["tokens"][0] == answers[prompts[i // 8][2]]), group=i // 8)
                    for i, o in enumerate(out)]
        m = learner.step(rollouts)
        assert m["updated"] == 1.0 and m["tokens"] == 80 * 2
        if it == 0:
            assert m["mismatch_kl"] < 1e-6
        value_losses.append(m["value_loss"])
        eng.update_weights_from_arrays(learner.weights(), it + 1)
    assert "value_head" not in " ".join(learner.weights())
    after = accuracy(held_out)
    print(f"PPO held-out accuracy {before:.2f} -> {after:.2f}; value loss {value_losses[0]:.3f} -> "
          f"{np.mean(value_losses[-5:]):.3f}")
    assert before <= 0.25 and after >= before + 0.5, (before, after)


def test_learner_scores_tokens_at_the_engines_sampling_temperature(tmp_path):
    from flywheel.rl.lm.learner import GRPOLearner, Rollout
    cfg = llm.LlamaConfig(vocab_size=24, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    torch.manual_seed(0)
    model = llm.Transformer(cfg)
    llm.save(model, str(tmp_path / "m"))
    eng = llm.Engine(str(tmp_path / "m"))
    out = eng.generate([[1, 5, 6]], max_new_tokens=4, temperature=0.7, n=4, seed=3, ignore_eos=True)
    rolls = [Rollout(prompt=[1, 5, 6], response=o["tokens"], behaviour_logprobs=o["logprobs"], reward=float(i % 2),
                     group=0) for i, o in enumerate(out)]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    assert GRPOLearner(model, opt, 4, temperature=0.7).step(rolls)["mismatch_kl"] < 1e-8
    assert GRPOLearner(model, opt, 4).step(rolls)["mismatch_kl"] > 1e-3  # scored at T = 1: not the same policy
