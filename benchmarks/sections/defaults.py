"""defaults: no default is the slow path. Each setting whose default decides speed is run at its
default and at its alternatives, each against the plain reference, on a small ResNet-20 case:

* precision: fp32 (default) and bf16, 1 worker / hand loop (fp32), per backend;
* memory format: ``channels_last: auto`` (default: channels-last here) and ``false`` (NCHW), 1
  worker / hand loop, per backend;
* BatchNorm mode: aggregate (default), local and sync, 2 workers / plain DDP, per backend;
* Horovod's cycle time (HOROVOD_CYCLE_TIME, Horovod's 1 ms by default) at 2 and 5 ms, and its
  fusion threshold off (HOROVOD_FUSION_THRESHOLD=0), and ``grad_allreduce: buckets`` (the
  default ``auto`` is one buffer on the CPU), 2 workers / plain DDP;
* DDP's bucket size (CLUSTERBENCH_DDP_BUCKET_MB; PyTorch's 25 MiB by default) at 1 and 100 MiB,
  2 workers / plain DDP.

Figures ``D <setting> <backend>``: the default's ratio to the reference over the best
alternative's (goal >= 0.95: the default is within 5 % of the fastest choice, or faster); every
row's ratio is in the rows table and the results file.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bench_data import make_cifar_like
from benchlib.figures import Figure, rate
from benchlib.rows import Case, Runner, Spec

ORDER = 50
TITLE = "every speed-deciding default against its alternatives, each / the plain reference"
OPTIONS = {
    "defaults_train": (int, 384, 128, "training images of the defaults rows"),
    "defaults_epochs": (int, 4, 2, "epochs of the defaults rows"),
}
NEEDS: tuple[str, ...] = ()
GPU = False
CASE = "defaults"


def cases(args: argparse.Namespace, work: Path) -> dict[str, Case]:
    data = make_cifar_like(work / "data" / "cifar-defaults", args.defaults_train)
    return {CASE: Case(CASE, "cifar10", "resnet", data, args.defaults_epochs, 128, 0.05)}


@dataclasses.dataclass(frozen=True)
class Setting:
    """A setting, the rows of its default and of its alternatives, and their reference."""

    name: str
    backend: str
    default: Spec
    alternatives: tuple[Spec, ...]
    reference: Spec


def settings(backend: str) -> list[Setting]:
    hand, ddp = Spec(CASE, "hand_loop"), Spec(CASE, "plain_ddp", 2)
    one, two = Spec(CASE, "cb", 1, backend, "aggregate"), Spec(CASE, "cb", 2, backend, "aggregate")
    found = [
        Setting("precision", backend, one, (_with(one, run=(("precision", "bf16"),)),), hand),
        Setting(
            "memory format", backend, one, (_with(one, run=(("channels_last", False),)),), hand
        ),
        Setting("bn", backend, two, tuple(_with(two, bn=bn) for bn in ("local", "sync")), ddp),
    ]
    if backend == "horovod":
        cycles = tuple(_with(two, env=(("HOROVOD_CYCLE_TIME", ms),)) for ms in ("2", "5"))
        fusion = (_with(two, env=(("HOROVOD_FUSION_THRESHOLD", "0"),)),)
        buckets = (_with(two, run=(("grad_allreduce", "buckets"),)),)
        found += [
            Setting("cycle time", backend, two, cycles, ddp),
            Setting("fusion", backend, two, fusion, ddp),
            Setting("grad_allreduce", backend, two, buckets, ddp),
        ]
    else:
        buckets = tuple(
            _with(two, env=(("CLUSTERBENCH_DDP_BUCKET_MB", mb),)) for mb in ("1", "100")
        )
        found.append(Setting("bucket size", backend, two, buckets, ddp))
    return found


def _with(spec: Spec, **changes: object) -> Spec:
    return dataclasses.replace(spec, **changes)


def figure(runner: Runner, setting: Setting) -> Figure:
    specs = (setting.default, *setting.alternatives, setting.reference)
    for spec in specs:
        runner.get(spec)
    fig = Figure(
        f"D {setting.name} {setting.backend}",
        f"defaults: {setting.name} ({setting.backend}), default / the best alternative, "
        f"each / {setting.reference.name}",
        0.95,
        rows=[f"{s.case}: {s.name}" for s in specs],
    )
    rates = {spec: rate(runner, spec) for spec in specs}
    missing = [why for value, why in rates.values() if value is None]
    if missing:
        fig.detail = "; ".join(missing)
        return fig
    reference = rates[setting.reference][0]
    ratios = {spec: rates[spec][0] / reference for spec in (setting.default, *setting.alternatives)}
    best = max(setting.alternatives, key=ratios.__getitem__)
    fig.value = ratios[setting.default] / ratios[best]
    shown = ", ".join(f"{s.name.split(', ', 2)[-1]} {r:.2f}" for s, r in ratios.items())
    fig.detail = f"vs the reference: {shown}"
    return fig


def run(runner: Runner, args: argparse.Namespace) -> list[Figure]:
    return [figure(runner, s) for b in args.backends for s in settings(b)]
