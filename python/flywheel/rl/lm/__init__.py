"""RL for language models: the learner's building blocks (docs/rl.md,
"Language models").

* :mod:`flywheel.rl.lm.losses` -- advantages (GRPO, Dr. GRPO, RLOO), KL
  estimators (k1, k2, k3), the clipped token-level surrogate with separate
  low/high clip (DAPO's clip-higher), GSPO's sequence-level ratio, loss
  aggregation (token-mean, sequence-mean, sequence-mean-token-sum), overlong
  shaping, dynamic-sampling filtering, and the engine/learner mismatch
  (with truncated importance sampling).
* :mod:`flywheel.rl.lm.packing` -- variable-length trajectories packed into
  micro-batches under a token budget, attention kept within each sequence.
* :mod:`flywheel.rl.lm.rewards` -- verifiers: exact numeric answer, format
  (regular expression).
* :mod:`flywheel.rl.lm.reward_pool` -- rewards in worker processes with a
  per-call timeout and a memory cap; failures counted by kind.
* :mod:`flywheel.rl.lm.learner` -- the training step behind one interface
  (rollouts in; metrics and weights out).
* :mod:`flywheel.rl.lm.tasks` -- multi-digit arithmetic problems written into
  train / test tables with disjoint problems.

Every function takes and returns torch tensors; none holds state.
"""
