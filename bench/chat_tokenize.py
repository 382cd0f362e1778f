#!/usr/bin/env python3
"""Chat template + tokenise + loss mask + pack, in the Loader, against the same
work done in a Python loop over rows, same run, same table, same tokenizer
(SmolLM2-135M-Instruct's, `make model`).

  loader  flywheel.Loader over a `messages: list<struct<role, content>>`
          table with transforms=[ChatTokenize(tok, seq_len=2048, eos)]: the
          template rendered per conversation (compiled once), one
          encode_batch per batch (Hugging Face tokenizers, in parallel),
          numpy masks, C++ packing
  loop    the rows as Python objects (Table.to_pylist), then per row: the
          same compiled template, tokenizer.encode with offsets, the mask
          from the offsets in Python, and greedy packing into 2048-token
          blocks with EOS (list slicing)

Both count the real tokens packed (EOS included) and the tokens masked in;
the counts must agree. Best of --repeats.

    PYTHONPATH=build/python $(make -s python-path) bench/chat_tokenize.py [--rows 20000] [--out bench/results/chat_tokenize.json]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import flywheel
from flywheel import llm
from flywheel.transforms import ChatTokenize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nested_scan import best  # noqa: E402  (best and median of repeats)
from take_peers import loadavg, machine  # noqa: E402

WORDS = ("the model learns to answer questions about numbers and words with short clear replies "
         "while the user asks follow up questions in several turns").split()


def conversations(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        turns = int(rng.integers(1, 4)) * 2
        msgs = []
        for t in range(turns):
            k = int(rng.integers(5, 60))
            msgs.append({"role": "user" if t % 2 == 0 else "assistant",
                         "content": " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), k))})
        out.append({"messages": msgs})
    return out


def loop(table, chat, tok, seq_len, eos):
    """The baseline: a Python loop over rows."""
    real = learned = 0
    block, blocks = [], 0
    for row in table.to_pylist():
        messages = row["messages"]
        text = chat.render(messages)
        spans = chat._spans(text, messages)
        enc = tok._tok.encode(text, add_special_tokens=False)
        mask = [1 if any(s <= o[0] < e for s, e in spans) else 0 for o in enc.offsets]
        doc = list(enc.ids) + [eos]
        learned += sum(mask)
        real += len(doc)
        block.extend(doc)
        while len(block) >= seq_len:
            block = block[seq_len:]
            blocks += 1
    return real, learned


def in_loader(path, chat):
    real = learned = 0
    for b in flywheel.Loader(path, batch_size=256, shuffle=False, transforms=[chat]):
        real += int(b["mask"].sum())
        learned += int(b["loss_mask"].sum())
    return real, learned


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    model = llm.smollm2_path()
    if model is None:
        sys.exit("SmolLM2-135M-Instruct is not imported (run `make model`)")
    tok = llm.Tokenizer.from_pretrained(model)
    eos = tok.eos_token_id
    work = tempfile.mkdtemp(prefix="fw_chat_bench_")
    try:
        path = os.path.join(work, "t")
        table = flywheel.Table.from_pylist(path, conversations(args.rows),
                                           {"messages": "list<struct<role: string, content: string>>"})
        chat = ChatTokenize(tok, "messages", seq_len=args.seq_len, eos_token=eos)
        fw = best(lambda: in_loader(path, chat), args.repeats)
        py = best(lambda: loop(table, chat, tok, args.seq_len, eos), args.repeats)
        # The loader pads the last block; both count real tokens only.
        assert fw[2] == py[2], (fw[2], py[2])
        tokens = fw[2][0]
        res = {
            "bench": "chat_tokenize",
            "machine": machine(),
            "loadavg": loadavg(),
            "rows": args.rows,
            "seq_len": args.seq_len,
            "tokens": tokens,
            "learned_tokens": fw[2][1],
            "seconds": {"loader": fw[:2], "python_loop": py[:2]},
            "tokens_per_s": {"loader": round(tokens / fw[0]), "python_loop": round(tokens / py[0])},
            "speedup": round(py[0] / fw[0], 2),
        }
        print(f"{args.rows} conversations, {tokens} tokens ({fw[2][1]} learned), seq_len {args.seq_len}")
        print(f"loader       {fw[0]:.3f} s  {res['tokens_per_s']['loader']:>10} tokens/s")
        print(f"python loop  {py[0]:.3f} s  {res['tokens_per_s']['python_loop']:>10} tokens/s")
        print(f"speedup {res['speedup']}x")
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
                f.write("\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
