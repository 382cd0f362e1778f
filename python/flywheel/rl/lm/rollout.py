"""Generation for the language-model job, shared by the job's in-process
engine and the rollout worker processes (:mod:`.rollout_worker`): sampling
parameters from ``[rollout]``, and multi-turn episodes with a text
environment (docs/rl.md, "Multi-turn episodes")."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from . import config as lmconfig

FINISH_CODES = {"stop": 0, "length": 1, "aborted": 2, "error": 3}
FINISH_NAMES = {v: k for k, v in FINISH_CODES.items()}


def sample_params(rollout: Dict[str, Any], eos: int) -> Dict[str, Any]:
    return dict(max_new_tokens=rollout["max_new_tokens"], temperature=rollout["temperature"],
                top_p=rollout["top_p"], stop_ids=[eos])


def decode(tok, eos: int, ids: Sequence[int]) -> str:
    return tok.decode([i for i in ids if i != eos], skip_special_tokens=True)


def turns(engine, tok, rollout: Dict[str, Any], eos: int, prompts: Sequence[Sequence[int]], texts: Sequence[str],
          answers: Sequence[Any], n: int, seed: int, temperature: float) -> List[Dict[str, Any]]:
    """Multi-turn episodes with the text environment ``rollout["tool"]``: the
    policy writes until EOS or the environment's stop text; the
    environment's reply is appended (loss mask 0, behaviour log-prob 0, the
    engine's weight version) and the policy goes on, up to ``max_turns``
    turns and ``max_new_tokens`` tokens in all. ``n`` episodes per prompt,
    prompt-major."""
    from . import textenv
    r = rollout
    mnt = r["max_new_tokens"]
    stop = tok.encode(textenv.ENVS[r["tool"]].stop)
    if len(stop) != 1:
        raise lmconfig.ConfigError(f"[rollout] tool = {r['tool']!r}: its stop text is not one token")
    params = dict(temperature=temperature, top_p=r["top_p"] if temperature > 0 else 1.0, stop_ids=[eos, stop[0]])
    first = engine.generate(list(prompts), n=n, seed=seed, max_new_tokens=mnt, **params)
    samples = []
    for i, o in enumerate(first):
        k = i // n
        env = textenv.make(r["tool"])
        env.reset(texts[k], answers[k])
        samples.append({"prompt_ids": list(prompts[k]), "tokens": list(o["tokens"]), "logprobs": list(o["logprobs"]),
                        "versions": list(o["versions"]), "loss_mask": [True] * len(o["tokens"]),
                        "finish_reason": o["finish_reason"], "tool_calls": 0, "_env": env, "_done": False})
    for turn in range(1, r["max_turns"]):
        cont = []
        for s in samples:
            if s["_done"] or not s["tokens"] or s["tokens"][-1] != stop[0]:
                s["_done"] = True
                continue
            reply, done = s["_env"].step(tok.decode(s["tokens"], skip_special_tokens=True))
            ids = tok.encode(reply) if reply else []
            if done or not ids or len(s["tokens"]) + len(ids) >= mnt:
                s["_done"] = True
                continue
            s["tokens"] += ids
            s["logprobs"] += [0.0] * len(ids)
            s["versions"] += [engine.weight_version] * len(ids)
            s["loss_mask"] += [False] * len(ids)
            s["tool_calls"] += 1
            cont.append(s)
        by_room: Dict[int, List[Dict[str, Any]]] = {}
        for s in cont:
            by_room.setdefault(mnt - len(s["tokens"]), []).append(s)
        for room, group in sorted(by_room.items()):
            out = engine.generate([s["prompt_ids"] + s["tokens"] for s in group], n=1,
                                  seed=seed + 104729 * turn + room, max_new_tokens=room, **params)
            for s, o in zip(group, out):
                s["tokens"] += o["tokens"]
                s["logprobs"] += o["logprobs"]
                s["versions"] += o["versions"]
                s["loss_mask"] += [True] * len(o["tokens"])
                s["finish_reason"] = o["finish_reason"]
    for s in samples:
        del s["_env"], s["_done"]
    return samples
