"""flywheel's rollout engine (C++, src/flywheel/llm/engine.h): batched
generation over a paged KV cache with continuous batching, deterministic and
batch-invariant, with hot-swapped weights and a version on every token.

    eng = llm.Engine("ckpt/", kv_cache_bytes=256 << 20)
    out = eng.generate([[1, 2, 3], [4, 5]], max_new_tokens=32, temperature=0.7, seed=1)
    out[0]["tokens"], out[0]["logprobs"], out[0]["versions"], out[0]["finish_reason"]

Constructor options: dtype ("f32", "bf16" or "int8": weight-only int8 with a
scale per output row), kv_cache_bytes,
block_tokens, max_step_tokens (tokens per step: decodes plus prefill chunks),
max_running, threads (0 = all cores), isa ("" = best, "avx512", "avx2",
"portable"), recompute_on_swap, version.

generate(prompts, max_new_tokens, temperature (0 = greedy), top_k, top_p, n,
seed, stop_ids, ignore_eos) returns one dict per sample, in prompt order
(prompt i draws with seed + i). submit()/step()/take_finished() drive it step
by step; update_weights(checkpoint, version) swaps weights between steps;
prompt_logits(prompts) returns each prompt's logits at every position.

Weights from a learner arrive through the weight service (docs/rl.md,
"Chunked transfer")::

    wc = flywheel.rl.WeightClient(server.address)
    eng.sync_weights(wc, "policy", wait=1.0)   # the new version, or None

update_weights_from_arrays({hf_name: float32/float16 array}, version) swaps in
weights given as arrays in Hugging Face names.
"""

from typing import Optional

from .._core import llm as _llm

Engine = _llm.Engine


def sync_weights(engine, client, model: str, wait: Optional[float] = 0.0) -> Optional[int]:
    """Fetches ``model`` from ``client`` (a :class:`flywheel.rl.WeightClient`)
    if the server holds a version newer than the engine's, and swaps it in
    between steps (running sequences continue; their later tokens carry the
    new version). Waits up to ``wait`` seconds for one (None: forever).
    Returns the new version, or None when nothing newer came."""
    got = client.fetch(model, newer_than=engine.weight_version, wait=wait)
    if got is None:
        return None
    version, arrays = got
    engine.update_weights_from_arrays(arrays, version)
    return version


Engine.sync_weights = sync_weights

__all__ = ["Engine", "sync_weights"]
