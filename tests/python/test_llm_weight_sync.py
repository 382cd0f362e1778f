"""Weights from a learner to the rollout engine through the weight service:
chunked (past gRPC's message limit), with the engine serving the new version
between steps (docs/rl.md, "Chunked transfer"; docs/llm.md, "Hot swap")."""

import numpy as np
import pytest
import torch

from flywheel import llm, replay
from flywheel.rl.weights import WeightClient

pytestmark = pytest.mark.skipif(not hasattr(replay, "Server"), reason="built without gRPC")


def arrays_of(model):
    """The model's tensors in Hugging Face names as float32 arrays (tied output dropped)."""
    state = {k: v.detach().float().contiguous().numpy() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = llm.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                          rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(1)
    m = llm.Transformer(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    d = str(tmp_path_factory.mktemp("tiny"))
    llm.save(m, d)
    return d, m


def test_a_published_version_reaches_the_engine_between_steps(tiny):
    d, m = tiny
    eng = llm.Engine(d, version=1)
    trained = llm.load(d).eval()
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    prompt = [3, 9, 27, 5, 8]
    with replay.Server(weights=True) as server:
        learner, actor = WeightClient(server.address), WeightClient(server.address)
        assert eng.sync_weights(actor, "policy") is None  # nothing published yet
        rid = eng.submit(prompt, max_new_tokens=12, temperature=0.0, ignore_eos=True)
        for _ in range(4):
            eng.step()
        v = learner.publish("policy", arrays_of(trained), version=2)
        assert v == 2
        assert learner.last_transfer()["bytes"] == sum(a.nbytes for a in arrays_of(trained).values())
        assert eng.sync_weights(actor, "policy", wait=5.0) == 2
        assert actor.last_transfer()["bytes"] == learner.last_transfer()["bytes"]
        assert eng.weight_version == 2
        while not eng.idle():
            eng.step()
        done = [c for c in eng.take_finished() if c["request_id"] == rid][0]
        # Tokens before the swap carry version 1, after it version 2.
        assert done["versions"][0] == 1 and done["versions"][-1] == 2
        assert sorted(done["versions"]) == done["versions"]
        # The new weights are what the engine computes with now.
        got = eng.prompt_logits([prompt])[0]
        with torch.no_grad():
            want = trained(torch.tensor([prompt]))[0].numpy()
        assert float(np.abs(got - want).max() / np.abs(want).max()) <= 1e-4
        assert eng.sync_weights(actor, "policy") is None  # current


def test_weights_that_do_not_fit_the_model_are_refused_and_the_engine_keeps_serving(tiny):
    d, m = tiny
    eng = llm.Engine(d, version=1)
    bad = arrays_of(m)
    bad["model.norm.weight"] = np.ones(31, np.float32)
    with pytest.raises(ValueError, match="model.norm.weight"):
        eng.update_weights_from_arrays(bad, 2)
    missing = arrays_of(m)
    del missing["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(Exception, match="down_proj"):
        eng.update_weights_from_arrays(missing, 2)
    with pytest.raises(TypeError, match="float32 or float16"):
        eng.update_weights_from_arrays({k: v.astype(np.float64) for k, v in arrays_of(m).items()}, 2)
    assert eng.weight_version == 1
    out = eng.generate([[4, 5, 6]], max_new_tokens=3, temperature=0.0, ignore_eos=True)
    assert len(out[0]["tokens"]) == 3


@pytest.mark.skipif(llm.smollm2_path() is None, reason="SmolLM2 is not imported (make model)")
def test_smollm2_weights_travel_chunked_past_the_message_limit():
    path = llm.smollm2_path()
    model = llm.load(path).eval()
    arrays = arrays_of(model)
    total = sum(a.nbytes for a in arrays.values())
    assert total > 4 * (64 << 20)  # several times gRPC's 64 MiB message limit
    eng = llm.Engine(path, version=1)
    prompt = [1, 504, 3458, 282, 4649, 314]
    before = eng.generate([prompt], max_new_tokens=8, temperature=0.0)[0]["tokens"]
    with replay.Server(weights=True) as server:
        learner, actor = WeightClient(server.address), WeightClient(server.address)
        assert learner.publish("smollm2", arrays, version=7) == 7
        up = learner.last_transfer()
        assert up["bytes"] == total and up["chunks"] >= total // (4 << 20)
        assert eng.sync_weights(actor, "smollm2", wait=10.0) == 7
        down = actor.last_transfer()
        assert down["bytes"] == total and down["seconds"] > 0 and down["resumes"] == 0
    out = eng.generate([prompt], max_new_tokens=8, temperature=0.0)[0]
    assert out["tokens"] == before  # the same weights, now version 7
    assert set(out["versions"]) == {7}
