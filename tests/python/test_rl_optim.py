"""flywheel.rl.optim: the learners' Adam and RMSprop give torch.optim's
parameters bit for bit, resume exactly from their state, and do not import
torch._dynamo (which torch.optim's constructors do, ~3.5 s per learner start)."""

import subprocess
import sys

import torch

from flywheel.rl.optim import Adam, RMSprop


def _train(make, steps=40, resume_at=None):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
    opt = make(m.parameters())
    x, y = torch.randn(64, 4), torch.randn(64, 2)
    for i in range(steps):
        if i == resume_at:
            saved = (opt.state_dict(), {k: v.clone() for k, v in m.state_dict().items()})
            opt = make(m.parameters())
            opt.load_state_dict(saved[0])
        opt.zero_grad(set_to_none=True)
        ((m(x) - y) ** 2).mean().backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_adam_and_rmsprop_match_torch_optim_exactly():
    ours = _train(lambda p: Adam(p, lr=1e-2, eps=1e-5))
    ref = _train(lambda p: torch.optim.Adam(p, lr=1e-2, eps=1e-5, foreach=False))
    assert torch.equal(ours, ref)
    ours = _train(lambda p: RMSprop(p, lr=1e-3, alpha=0.99, eps=0.01))
    ref = _train(lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.99, eps=0.01, foreach=False))
    assert torch.equal(ours, ref)


def test_state_dict_resumes_exactly_and_lr_schedule_applies():
    assert torch.equal(_train(lambda p: Adam(p, lr=1e-2), resume_at=17), _train(lambda p: Adam(p, lr=1e-2)))
    opt = Adam([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    opt.param_groups[0]["lr"] = 0.0
    opt.param_groups[0]["params"][0].grad = torch.ones(2)
    opt.step()
    assert torch.equal(opt.param_groups[0]["params"][0].detach(), torch.ones(2))


def test_no_dynamo_import():
    code = ("import sys, torch; from flywheel.rl.optim import Adam; "
            "Adam(torch.nn.Linear(2, 2).parameters()); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
