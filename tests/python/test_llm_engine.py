"""flywheel.llm.Engine (the C++ rollout engine) against flywheel's PyTorch
model and transformers: logits at every position of mixed-length prompts,
greedy tokens against transformers' generate(), returned log-probs against a
PyTorch recomputation, sampled frequencies against the softmax, determinism
across thread counts and batch compositions; on a random model and on
SmolLM2-135M-Instruct."""

import math

import numpy as np
import pytest
import torch

from flywheel import llm

transformers = pytest.importorskip("transformers")

SMOL = llm.smollm2_path()
needs_smol = pytest.mark.skipif(SMOL is None, reason="SmolLM2-135M-Instruct is not imported here (run `make model`)")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    cfg = llm.LlamaConfig(vocab_size=53, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                          num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                          rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    m = llm.Transformer(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.25)
    d = str(tmp_path_factory.mktemp("tiny"))
    llm.save(m, d)
    return d


def torch_logits(model, prompt):
    with torch.no_grad():
        return model(torch.tensor([prompt]))[0].numpy()


def prompts_for(vocab, lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=n).tolist() for n in lengths]


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_engine_logits_equal_pytorch_on_a_random_model(tiny_dir):
    model = llm.load(tiny_dir).eval()
    prompts = prompts_for(53, [1, 7, 30, 64, 13])
    for kw in ({}, {"threads": 1, "block_tokens": 4}):
        eng = llm.Engine(tiny_dir, **kw)
        for p, got in zip(prompts, eng.prompt_logits(prompts)):
            assert got.shape == (len(p), 53)
            assert rel_err(got, torch_logits(model, p)) <= 1e-4


def test_greedy_equals_transformers_generate_on_a_random_model(tiny_dir):
    hf = transformers.LlamaForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    eng = llm.Engine(tiny_dir)
    prompts = prompts_for(53, [5, 9, 17])
    outs = eng.generate(prompts, max_new_tokens=24, temperature=0, ignore_eos=True)
    for p, o in zip(prompts, outs):
        want = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                           max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(p):]
        assert o["tokens"] == want.tolist()


def test_logprobs_equal_pytorch_recomputation(tiny_dir):
    model = llm.load(tiny_dir).eval()
    eng = llm.Engine(tiny_dir)
    prompts = prompts_for(53, [6, 11])
    for temperature in (1.0, 0.7):
        outs = eng.generate(prompts, max_new_tokens=20, temperature=temperature, top_k=30, seed=3, ignore_eos=True)
        for p, o in zip(prompts, outs):
            full = p + o["tokens"]
            logits = torch.tensor(torch_logits(model, full)) / temperature
            lp = torch.log_softmax(logits.double(), dim=-1)
            want = [lp[len(p) - 1 + i, t].item() for i, t in enumerate(o["tokens"])]
            assert np.abs(np.array(o["logprobs"]) - np.array(want)).max() <= 1e-5


def chi_square_ok(counts, probs, total):
    expected = probs * total
    keep = expected >= 5
    stat = (((counts[keep] - expected[keep]) ** 2) / expected[keep]).sum()
    rest_e, rest_c = expected[~keep].sum(), counts[~keep].sum()
    bins = int(keep.sum())
    if rest_e > 0:
        stat += (rest_c - rest_e) ** 2 / max(rest_e, 1e-9)
        bins += 1
    df = bins - 1
    return stat, df, stat < df + 4.5 * math.sqrt(2 * df)  # far in the tail (p < 1e-5)


@pytest.mark.parametrize("top_k", [0, 8])
def test_sampled_frequencies_match_the_softmax(tiny_dir, top_k):
    eng = llm.Engine(tiny_dir)
    prompt = prompts_for(53, [4], seed=5)[0]
    logits = eng.prompt_logits([prompt])[0][-1].astype(np.float64) / 1.3
    probs = np.exp(logits - logits.max())
    if top_k:
        cut = np.sort(probs)[-top_k]
        probs[probs < cut] = 0
    probs /= probs.sum()
    total = 6000
    outs = eng.generate([prompt] * total, max_new_tokens=1, temperature=1.3, top_k=top_k, seed=11)
    counts = np.bincount([o["tokens"][0] for o in outs], minlength=53).astype(np.float64)
    if top_k:
        assert counts[probs == 0].sum() == 0
    stat, df, ok = chi_square_ok(counts, probs, total)
    assert ok, (stat, df)


def test_determinism_across_threads_and_batch_composition(tiny_dir):
    prompts = prompts_for(53, [8, 3, 21, 12], seed=9)
    a = llm.Engine(tiny_dir, threads=1).generate(prompts, max_new_tokens=16, temperature=0.9, seed=4, ignore_eos=True)
    b = llm.Engine(tiny_dir, threads=2, max_step_tokens=5).generate(prompts, max_new_tokens=16, temperature=0.9,
                                                                     seed=4, ignore_eos=True)
    assert [o["tokens"] for o in a] == [o["tokens"] for o in b]
    assert [o["logprobs"] for o in a] == [o["logprobs"] for o in b]  # bit-identical floats
    # Prompt 2 alone (seed 4 + 2, as it drew in the batch) gives the same.
    c = llm.Engine(tiny_dir).generate([prompts[2]], max_new_tokens=16, temperature=0.9, seed=6, ignore_eos=True)
    assert c[0]["tokens"] == a[2]["tokens"] and c[0]["logprobs"] == a[2]["logprobs"]


def test_int8_weights_stay_close_to_float_and_are_deterministic(tiny_dir):
    model = llm.load(tiny_dir).eval()
    prompts = prompts_for(53, [5, 17, 40], seed=3)
    q = llm.Engine(tiny_dir, dtype="int8")
    for p, got in zip(prompts, q.prompt_logits(prompts)):
        want = torch_logits(model, p)
        # Per-row int8: each weight within half a step (max|row| / 254) of its value.
        assert rel_err(got, want) <= 0.05
        assert float((got.argmax(-1) == want.argmax(-1)).mean()) >= 0.9
    a = llm.Engine(tiny_dir, dtype="int8", threads=1, isa="portable").generate(
        prompts, max_new_tokens=12, temperature=0.8, seed=2, ignore_eos=True)
    b = llm.Engine(tiny_dir, dtype="int8", threads=2, max_step_tokens=7).generate(
        prompts, max_new_tokens=12, temperature=0.8, seed=2, ignore_eos=True)
    assert [o["logprobs"] for o in a] == [o["logprobs"] for o in b]


def test_bad_input_is_refused_by_name(tiny_dir):
    eng = llm.Engine(tiny_dir)
    with pytest.raises(Exception, match="outside the vocabulary"):
        eng.submit([1, 2, 500])
    with pytest.raises(Exception, match="exceeds the context of 128"):
        eng.submit([1] * 100, max_new_tokens=50)
    with pytest.raises(Exception, match="dtype must be f32, bf16 or int8"):
        llm.Engine(tiny_dir, dtype="int3")
    with pytest.raises(Exception, match="missing/config.json"):
        llm.Engine(tiny_dir + "/missing")
    out = eng.generate([[1, 2], [3, 999], [4]], max_new_tokens=3)
    assert [o["finish_reason"] for o in out][1] == "error" and "999" in out[1]["error"]
    assert out[0]["finish_reason"] != "error" and out[2]["finish_reason"] != "error"


@needs_smol
def test_int8_smollm2_agrees_with_float_on_the_next_token():
    tok = llm.Tokenizer.from_pretrained(SMOL)
    texts = ["The capital of France is", "def add(a, b):\n    return", "Once upon a time, in a small village,",
             "The chemical symbol for gold is", "Water boils at a temperature of"]
    prompts = [tok.encode(t) for t in texts]
    f = llm.Engine(SMOL).prompt_logits(prompts)
    q = llm.Engine(SMOL, dtype="int8").prompt_logits(prompts)
    agree = np.mean(np.concatenate([a.argmax(-1) == b.argmax(-1) for a, b in zip(f, q)]))
    assert agree >= 0.9, agree
    assert max(rel_err(b, a) for a, b in zip(f, q)) <= 0.1


@needs_smol
def test_engine_on_smollm2_equals_pytorch_and_transformers():
    model = llm.load(SMOL).eval()
    tok = llm.Tokenizer.from_pretrained(SMOL)
    eng = llm.Engine(SMOL, kv_cache_bytes=256 << 20)
    texts = ["The capital of France is", "def add(a, b):\n    return", "Once upon a time, in a small village,"]
    prompts = [tok.encode(t) for t in texts]
    for p, got in zip(prompts, eng.prompt_logits(prompts)):
        assert rel_err(got, torch_logits(model, p)) <= 1e-4
    hf = transformers.LlamaForCausalLM.from_pretrained(SMOL, dtype=torch.float32).eval()
    chats = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
             for q in ("What is the capital of France?", "Name a primary color.", "What is 12 + 7?")]
    outs = eng.generate(chats, max_new_tokens=20, temperature=0)
    for ids, o in zip(chats, outs):
        want = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                           max_new_tokens=20, do_sample=False, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        assert o["tokens"] == want[:len(o["tokens"])]
        assert o["finish_reason"] == ("stop" if len(o["tokens"]) < 20 else "length")
    assert "Paris" in tok.decode(outs[0]["tokens"])
