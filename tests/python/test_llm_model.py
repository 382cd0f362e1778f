"""flywheel.llm: the transformer definition against Hugging Face
transformers' LlamaForCausalLM on the same checkpoint (both directions),
config.json validation, sharded safetensors checkpoints."""

import json
import os

import numpy as np
import pytest
import torch

from flywheel import llm

transformers = pytest.importorskip("transformers")


def tiny(**kw):
    base = dict(vocab_size=97, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
                num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                bos_token_id=1, eos_token_id=2)
    base.update(kw)
    return llm.LlamaConfig(**base)


def random_model(config, seed=0):
    torch.manual_seed(seed)
    m = llm.Transformer(config)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m.eval()


def hf_logits(directory, ids, mask=None):
    hf = transformers.LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=mask).logits


@pytest.mark.parametrize("tied", [False, True])
def test_flywheel_checkpoint_loads_in_transformers_with_equal_logits(tmp_path, tied):
    m = random_model(tiny(tie_word_embeddings=tied, rope_theta=300.0))  # not the default: it must travel
    llm.save(m, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    ids = torch.randint(0, 97, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = m(ids)
    theirs = hf_logits(str(tmp_path), ids)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_transformers_checkpoint_loads_in_flywheel_with_equal_logits(tmp_path):
    hf_config = transformers.LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=6, num_key_value_heads=3, max_position_embeddings=64,
                                         rms_norm_eps=1e-6, rope_theta=500.0)
    torch.manual_seed(3)
    hf = transformers.LlamaForCausalLM(hf_config).eval()
    hf.save_pretrained(str(tmp_path))
    m = llm.load(str(tmp_path))
    assert m.config.num_key_value_heads == 3 and m.config.rope_theta == 500.0
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(m(ids), hf(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_left_padded_batch_matches_each_prompt_alone(tmp_path):
    """Mixed-length prompts, left-padded with an attention mask: each row's
    logits at its real tokens equal those of the prompt run alone, and equal
    transformers' on the same padded batch."""
    m = random_model(tiny())
    llm.save(m, str(tmp_path))
    rng = np.random.default_rng(4)
    prompts = [rng.integers(3, 97, n).tolist() for n in (5, 11, 8)]
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.no_grad():
        batch = m(ids, attention_mask=mask)
        for i, p in enumerate(prompts):
            alone = m(torch.tensor([p]))
            torch.testing.assert_close(batch[i, width - len(p):], alone[0], rtol=1e-5, atol=1e-5)
    theirs = hf_logits(str(tmp_path), ids, mask)
    real = mask.bool()
    torch.testing.assert_close(batch[real], theirs[real], rtol=1e-5, atol=1e-5)


def test_sharded_checkpoint_round_trips_and_loads_in_transformers(tmp_path):
    m = random_model(tiny(), seed=5)
    where = llm.save(m, str(tmp_path), max_shard_bytes=40_000)
    files = sorted(os.listdir(tmp_path))
    assert "model.safetensors.index.json" in files and len(set(where.values())) > 2
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(m.state_dict())
    back = llm.load(str(tmp_path))
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(back(ids), m(ids), rtol=0, atol=0)
    torch.testing.assert_close(hf_logits(str(tmp_path), ids), m(ids).detach(), rtol=1e-5, atol=1e-5)


def test_config_json_round_trip_and_errors_name_the_field(tmp_path):
    c = tiny()
    c.save(str(tmp_path))
    d = json.loads((tmp_path / "config.json").read_text())
    assert d["model_type"] == "llama" and d["architectures"] == ["LlamaForCausalLM"]
    assert transformers.LlamaConfig.from_pretrained(str(tmp_path)).num_key_value_heads == 2
    assert llm.LlamaConfig.load(str(tmp_path)) == c
    for field, value, words in [("num_key_value_heads", 4, "must divide num_attention_heads"),
                                ("hidden_size", 0, "positive integer"),
                                ("hidden_act", "gelu", "only silu"),
                                ("eos_token_id", 500, "below vocab_size"),
                                ("rope_scaling", {"type": "linear", "factor": 2.0}, "not supported"),
                                ("rope_parameters", {"rope_type": "yarn", "factor": 2.0}, "only plain rotary")]:
        bad = dict(d, **{field: value})
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=words) as e:
            llm.LlamaConfig.load(str(tmp_path))
        assert field in str(e.value) and "config.json" in str(e.value)
    (tmp_path / "config.json").write_text(json.dumps(dict(d, model_type="gpt2")))
    with pytest.raises(ValueError, match="model_type"):
        llm.LlamaConfig.load(str(tmp_path))


def test_weights_that_do_not_match_the_config_are_refused_naming_them(tmp_path):
    m = random_model(tiny())
    llm.save(m, str(tmp_path))
    d = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(d, intermediate_size=64)))
    with pytest.raises(ValueError, match=r"mlp\.(down|gate|up)_proj\.weight has shape"):
        llm.load(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(dict(d, num_hidden_layers=3)))
    with pytest.raises(ValueError, match=r"missing \['model\.layers\.2\."):
        llm.load(str(tmp_path))


def test_bad_input_ids_are_refused():
    m = random_model(tiny())
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 97\)"):
        m(torch.tensor([[1, 97]]))
    with pytest.raises(ValueError, match="exceeds max_position_embeddings"):
        m(torch.zeros(1, 65, dtype=torch.long))
