"""flywheel.rl: learner algorithms for flywheel's RL loop (PyTorch).

* :mod:`flywheel.rl.models` -- :class:`~flywheel.rl.models.ActorCritic`, the
  MLP policy/value network whose policy weights the C++ actors run.
* :mod:`flywheel.rl.ppo` -- PPO (clipped surrogate, GAE).
* :mod:`flywheel.rl.impala` -- IMPALA (V-trace off-policy correction).

The learners consume batches of actor unrolls; the batch format and the
value-bootstrap rule at episode ends are described in :mod:`flywheel.rl.models`.
"""

from .weights import WeightClient  # noqa: E402  (versioned weights over gRPC; docs/rl.md "Weights")

__all__ = ["WeightClient"]
