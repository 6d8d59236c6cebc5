"""Training: one loop for every run (:mod:`clusterbench.training.loop`), and its parts.

=================================  ============================================================
module                             what it holds
=================================  ============================================================
:mod:`~.loop`                      :func:`~clusterbench.training.loop.fit`, the loop's body,
                                   the fixed-size session
:mod:`~.elastic`                   the elastic session: commits and resets (Horovod elastic)
:mod:`~.steps`                     the training pass (the hot path) and validation
:mod:`~.state`                     the state carried across steps, checkpoints and resets
:mod:`~.schedule`                  pure: batch split, sample order, progress lines
:mod:`~.lr`                        pure: the LR of each step (warm-up, ``lr_schedule``)
:mod:`~.record`                    the epoch's record, run.json's world and provenance
:mod:`~.outputs`                   rank 0's writer: checkpoints, metrics, run.json, model.pt
:mod:`~.device`                    the rank's device, CPU threads, node name, RNG state
=================================  ============================================================

The train stage (:mod:`clusterbench.train`) starts the backend and calls ``fit``; the data
comes from :mod:`clusterbench.data`, the network from :mod:`clusterbench.models`.
"""
