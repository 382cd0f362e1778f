"""Benchmarks of flywheel's language-model RL job (issue "RL for language
models"; docs/benchmarks.md), each side by side in one run on one machine:

  vs-trl  flywheel's job against TRL's GRPOTrainer
  modes   sync vs async vs async + partial rollouts

vs-trl:

Both start from the same warm-started checkpoint (a Llama-style model in
Hugging Face format, e.g. runs/arith_grpo/checkpoints/update-000000/model),
train GRPO on the same arithmetic prompts with the same reward (exact
numeric answer), group size, prompts per update, learning rate, clip range
(0.2 / 0.28), token-mean loss, no KL, temperature 1, for the same wall time
each; then the same held-out evaluation (greedy, flywheel's engine, the same
500 problems) scores both final models.

Reported per side: updates, completion tokens sampled and trained on per
second of training wall time, and held-out accuracy before and after.

    python bench/lm_rl.py vs-trl --sft runs/arith_grpo/checkpoints/update-000000/model \
        --data data/arith --seconds 180 --out bench/results/lm_rl_vs_trl.json

modes: the same job from the same checkpoint for the same wall time in
mode = "sync", "async" without partial rollouts, and "async" with them
(max_staleness 1, stale groups dropped); trained tokens/s, held-out
accuracy, the staleness histogram and the time split of each.

    python bench/lm_rl.py modes --sft ... --data data/arith --seconds 180 \
        --out bench/results/lm_rl_modes.json
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def hf_char_tokenizer(alphabet: str, directory: str):
    """A Hugging Face fast tokenizer with flywheel's character ids (<pad> 0,
    <s> 1, </s> 2, then the alphabet), saved into ``directory``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    vocab.update({ch: i + 3 for i, ch in enumerate(alphabet)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(directory)
    return fast


def evaluate(model_dir: str, prompts, answers, max_new_tokens: int) -> float:
    from flywheel import llm
    from flywheel.rl.lm.chars import CharTokenizer
    from flywheel.rl.lm.rewards import numeric_answer
    tok = CharTokenizer()
    eng = llm.Engine(model_dir, threads=2)
    out = eng.generate([tok.encode(p, add_special_tokens=True) for p in prompts], max_new_tokens=max_new_tokens,
                       temperature=0.0, stop_ids=[tok.eos_token_id])
    texts = [tok.decode([t for t in o["tokens"] if t != tok.eos_token_id]) for o in out]
    return sum(numeric_answer(t, a) for t, a in zip(texts, answers)) / len(texts)


def run_trl(sft: str, train_rows, seconds: float, args, work: str):
    import torch
    from datasets import Dataset
    from transformers import LlamaForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from flywheel.rl.lm.chars import CharTokenizer
    from flywheel.rl.lm.rewards import numeric_answer
    torch.set_num_threads(args.threads)
    model_dir = os.path.join(work, "trl-start")
    shutil.copytree(sft, model_dir)
    tok = hf_char_tokenizer(CharTokenizer().alphabet, model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    # "<s>" in the text is the BOS id: the same prompt ids as flywheel's.
    ds = Dataset.from_dict({"prompt": ["<s>" + p for p, _ in train_rows], "answer": [a for _, a in train_rows]})

    def reward(prompts, completions, answer, **_):
        return [numeric_answer(c, a) for c, a in zip(completions, answer)]

    class Stop(TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            self.t0 = time.monotonic()

        def on_step_end(self, a, state, control, **kw):
            if time.monotonic() - self.t0 >= seconds:
                control.should_training_stop = True

    stop = Stop()
    cfg = GRPOConfig(output_dir=os.path.join(work, "trl-out"), per_device_train_batch_size=args.prompts * args.group,
                     num_generations=args.group, max_completion_length=args.max_new_tokens, learning_rate=args.lr,
                     beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group",
                     temperature=1.0, num_iterations=1, max_steps=1_000_000, logging_steps=1, report_to=[],
                     save_strategy="no", use_cpu=True, bf16=False, seed=args.seed, gradient_accumulation_steps=1,
                     max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                     dataloader_num_workers=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[stop])
    t0 = time.monotonic()
    trainer.train()
    wall = time.monotonic() - t0
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    tokens = sum(h["completions/mean_length"] * args.prompts * args.group for h in logs)
    end_dir = os.path.join(work, "trl-end")
    trainer.model.save_pretrained(end_dir, safe_serialization=True)
    return {"updates": trainer.state.global_step, "train_wall_s": round(wall, 1),
            "completion_tokens": int(tokens), "completion_tokens_per_s": round(tokens / wall, 1),
            "reward_mean_last10": round(sum(h.get("reward", 0) for h in logs[-10:]) / max(len(logs[-10:]), 1), 4),
            "model": end_dir}


def run_flywheel(sft: str, data: str, seconds: float, args, work: str, mode: str = "sync",
                 partial: bool = True, tag: str = "flywheel"):
    cfg = os.path.join(work, f"{tag}.toml")
    with open(cfg, "w") as f:
        f.write(f"""[run]
seed = {args.seed}
mode = "{mode}"
partial_rollouts = {str(partial).lower()}
max_staleness = 1
stale = "drop"
max_updates = 1000000
max_seconds = {seconds}
eval_interval = 1000000
checkpoint_interval = 1000000
progress_interval_s = 30
threads = {args.threads}
[data]
train = "{data}/train"
test = "{data}/test"
eval_size = 500
[model]
checkpoint = "{sft}"
[rollout]
group_size = {args.group}
prompts_per_update = {args.prompts}
max_new_tokens = {args.max_new_tokens}
[learner]
algorithm = "grpo"
lr = {args.lr}
clip_low = 0.2
clip_high = 0.28
token_budget = 256
""")
    run_dir = os.path.join(work, f"{tag}-run")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "flywheel.rl.lm.job", cfg, "--run-dir", run_dir], text=True,
                       capture_output=True)
    if r.returncode != 0:
        raise SystemExit(f"flywheel run failed:\n{r.stdout}\n{r.stderr}")
    with open(os.path.join(run_dir, "result.json")) as f:
        res = json.load(f)
    # Training wall time: the job's wall less its start-up evaluation and the end.
    wall = res["wall_s"] - res["times"]["eval"] - res["times"]["checkpoint"]
    ckpt = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    tokens = res["counters"]["tokens_generated"]
    return {"updates": res["updates"], "train_wall_s": round(wall, 1), "completion_tokens": tokens,
            "completion_tokens_per_s": round(tokens / wall, 1),
            "trained_tokens": res["counters"]["tokens_trained"],
            "trained_tokens_per_s": round(res["counters"]["tokens_trained"] / wall, 1),
            "staleness": res["staleness"], "stale_groups_dropped": res["counters"].get("groups_stale_dropped", 0),
            "time_split": res["times"], "process_wall_s": round(time.monotonic() - t0, 1),
            "model": os.path.join(run_dir, "checkpoints", ckpt, "model")}


def vs_trl(args, test, train_rows, before, work):
    fw = run_flywheel(os.path.abspath(args.sft), os.path.abspath(args.data), args.seconds, args, work)
    fw["accuracy_end"] = evaluate(fw["model"], test["prompt"], test["answer"], args.max_new_tokens)
    print(f"flywheel: {fw}", flush=True)
    trl_res = run_trl(args.sft, train_rows, args.seconds, args, work)
    trl_res["accuracy_end"] = evaluate(trl_res["model"], test["prompt"], test["answer"], args.max_new_tokens)
    print(f"TRL: {trl_res}", flush=True)
    import trl
    out = {"trl_version": trl.__version__, "flywheel": fw, "trl": trl_res,
           "completion_tokens_per_s_ratio": round(fw["completion_tokens_per_s"] / trl_res["completion_tokens_per_s"], 2),
           "updates_ratio": round(fw["updates"] / max(trl_res["updates"], 1), 2)}
    print(f"completion tokens/s: flywheel {fw['completion_tokens_per_s']:.0f} vs TRL "
          f"{trl_res['completion_tokens_per_s']:.0f} ({out['completion_tokens_per_s_ratio']:.2f}x); updates "
          f"{fw['updates']} vs {trl_res['updates']}; held-out accuracy {before:.3f} -> flywheel "
          f"{fw['accuracy_end']:.3f}, TRL {trl_res['accuracy_end']:.3f} after {args.seconds:.0f} s each")
    return out


def modes(args, test, before, work):
    out = {}
    for tag, mode, partial in (("sync", "sync", False), ("async", "async", False),
                               ("async_partial", "async", True)):
        r = run_flywheel(os.path.abspath(args.sft), os.path.abspath(args.data), args.seconds, args, work,
                         mode=mode, partial=partial, tag=tag)
        r["accuracy_end"] = evaluate(r["model"], test["prompt"], test["answer"], args.max_new_tokens)
        print(f"{tag}: {r}", flush=True)
        out[tag] = r
    base = out["sync"]["trained_tokens_per_s"]
    for tag in ("async", "async_partial"):
        out[f"{tag}_trained_tokens_per_s_ratio"] = round(out[tag]["trained_tokens_per_s"] / base, 2)
    print("trained tokens/s: " + ", ".join(f"{t} {out[t]['trained_tokens_per_s']:.0f}" for t in
                                           ("sync", "async", "async_partial"))
          + f"; held-out accuracy {before:.3f} -> " + ", ".join(f"{t} {out[t]['accuracy_end']:.3f}" for t in
                                                               ("sync", "async", "async_partial")))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("which", choices=["vs-trl", "modes"])
    ap.add_argument("--sft", required=True, help="the warm-started checkpoint every side starts from")
    ap.add_argument("--data", required=True, help="folder with the train and test tables")
    ap.add_argument("--seconds", type=float, default=180.0, help="training wall time per side")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from flywheel.rl.lm.job import read_column
    test = read_column(f"{args.data}/test", ["prompt", "answer"], 500)
    train = read_column(f"{args.data}/train", ["prompt", "answer"])
    train_rows = list(zip(train["prompt"], train["answer"]))
    work = tempfile.mkdtemp(prefix="flywheel-lm-bench-")
    before = evaluate(args.sft, test["prompt"], test["answer"], args.max_new_tokens)
    print(f"held-out accuracy of the start: {before:.3f}", flush=True)
    res = vs_trl(args, test, train_rows, before, work) if args.which == "vs-trl" else modes(args, test, before, work)
    out = {"benchmark": args.which, "machine": f"{os.cpu_count()} CPU cores", "seconds_each": args.seconds,
           "prompts_per_update": args.prompts, "group_size": args.group, "max_new_tokens": args.max_new_tokens,
           "lr": args.lr, "accuracy_start": before, **res}
    for v in out.values():
        if isinstance(v, dict):
            v.pop("model", None)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
