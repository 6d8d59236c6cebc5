"""Training: one loop for every run (:mod:`clusterbench.training.loop`), and its parts.

=================================  ============================================================
module                             what it holds
=================================  ============================================================
:mod:`~.loop`                      :func:`~clusterbench.training.loop.fit`, the loop's body,
                                   the fixed-size session
:mod:`~.elastic`                   the elastic session: commits and resets (Horovod elastic)
:mod:`~.steps`                     the training pass (the hot path) and validation
:mod:`~.step_times`                where a step's time goes, on every rank
:mod:`~.objectives`                the loss and accuracy by the data's task
:mod:`~.state`                     the state carried across steps, checkpoints and resets
:mod:`~.schedule`                  pure: the global batch, effective settings, progress lines
:mod:`~.memory_format`             channels-last or contiguous, and why
:mod:`~.record`                    the epoch's record, run.json's world and provenance
:mod:`~.outputs`                   rank 0's writer: checkpoints, metrics, run.json, model.pt
:mod:`~.checkpoints`               where checkpoints are, which one a run continues from
:mod:`~.device`                    the rank's device, CPU threads, node name, RNG state
=================================  ============================================================

The train stage (:mod:`clusterbench.train`) starts the backend and calls ``fit``; the data
comes from :mod:`clusterbench.data` (which samples each rank reads: :mod:`clusterbench.data.order`),
the network from :mod:`clusterbench.models`, the LR of each step from
:mod:`clusterbench.config.lr`.
"""
