"""Adam and RMSprop for the RL learners, in plain tensor operations.

The same updates as ``torch.optim.Adam`` and ``torch.optim.RMSprop`` (no
weight decay, no momentum, not centred), with the parts of their interface
the learners use: ``param_groups`` (for the learning-rate schedule),
``zero_grad``, ``step`` and ``state_dict`` / ``load_state_dict``. Why not
torch.optim: in torch 2.x constructing any of its optimizers imports
``torch._dynamo`` (about 3.5 s on the 2-vCPU development VM, more than a
whole CartPole training), and every learner process pays it at start.

Adam (Kingma & Ba), for each parameter p with gradient g at step t:

    m_t = b1 m_{t-1} + (1 - b1) g
    v_t = b2 v_{t-1} + (1 - b2) g^2
    p  <- p - (lr / (1 - b1^t)) * m_t / (sqrt(v_t) / sqrt(1 - b2^t) + eps)

RMSprop (Tieleman & Hinton; IMPALA's optimizer):

    v_t = a v_{t-1} + (1 - a) g^2
    p  <- p - lr * g / (sqrt(v_t) + eps)
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping

import torch

__all__ = ["Adam", "RMSprop"]


class _Optimizer:
    """One parameter group; state per parameter in order."""

    def __init__(self, params: Iterable[torch.nn.Parameter], defaults: Dict[str, float]):
        params = list(params)
        if not params:
            raise ValueError("optimizer got no parameters")
        self.param_groups: List[Dict[str, Any]] = [dict(defaults, params=params)]
        self.state: List[Dict[str, Any]] = [{} for _ in params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def state_dict(self) -> Dict[str, Any]:
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        # As torch.optim lays it out: "state" maps a parameter's index to its state.
        return {"kind": type(self).__name__, "group": group,
                "state": {i: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
                          for i, s in enumerate(self.state) if s}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != type(self).__name__:
            raise ValueError(f"optimizer state of {state.get('kind')!r} given to {type(self).__name__}")
        saved = state["state"]
        if any(not 0 <= int(i) < len(self.state) for i in saved):
            raise ValueError(f"optimizer state for parameters {sorted(saved)}, this model has {len(self.state)}")
        self.param_groups[0].update(state["group"])
        self.state = [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in saved[i].items()} if i in saved else {}
                      for i in range(len(self.state))]


class Adam(_Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps})

    @torch.no_grad()
    def step(self) -> None:
        g0 = self.param_groups[0]
        b1, b2 = g0["betas"]
        for p, s in zip(g0["params"], self.state):
            if p.grad is None:
                continue
            if not s:
                s["step"] = 0
                s["exp_avg"] = torch.zeros_like(p)
                s["exp_avg_sq"] = torch.zeros_like(p)
            s["step"] += 1
            t = s["step"]
            m, v = s["exp_avg"], s["exp_avg_sq"]
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2 ** t)).add_(g0["eps"])
            p.addcdiv_(m, denom, value=-g0["lr"] / (1 - b1 ** t))


class RMSprop(_Optimizer):
    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self) -> None:
        g0 = self.param_groups[0]
        a = g0["alpha"]
        for p, s in zip(g0["params"], self.state):
            if p.grad is None:
                continue
            if not s:
                s["step"] = 0
                s["square_avg"] = torch.zeros_like(p)
            s["step"] += 1
            v = s["square_avg"]
            v.mul_(a).addcmul_(p.grad, p.grad, value=1 - a)
            p.addcdiv_(p.grad, v.sqrt().add_(g0["eps"]), value=-g0["lr"])
