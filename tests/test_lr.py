"""The learning rate of every step (clusterbench.config.lr): the warm-up, then lr_schedule,
against PyTorch's own schedulers where one does the same; and the checks before any job."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from clusterbench import config as cb
from clusterbench.config.lr import (
    LR_SCHEDULES,
    LRSchedule,
    learning_rate,
    lr_schedule,
    schedule_problems,
)
from test_train import run_config

STEPS = 10  # optimiser steps per epoch in these tests


def rates(schedule: LRSchedule, epochs: int, steps: int = STEPS) -> list[float]:
    """The LR of every step of ``epochs`` epochs."""
    return [learning_rate(schedule, e, s, steps) for e in range(epochs) for s in range(steps)]


def torch_rates(make_scheduler, total_steps: int, lr: float, per_epoch: int = 1) -> list[float]:
    """The LR a PyTorch scheduler gives each optimiser step, stepped every ``per_epoch``
    optimiser steps (1: per step; STEPS: per epoch, as StepLR is used)."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = make_scheduler(optimizer)
    out = []
    for i in range(total_steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if (i + 1) % per_epoch == 0:
            scheduler.step()
    return out


def test_the_schemas_choices_are_the_schedules():
    schema = yaml.safe_load(cb.SCHEMA_PATH.read_text())
    assert schema["$defs"]["run_settings"]["properties"]["lr_schedule"]["enum"] == list(
        LR_SCHEDULES
    )


def test_warm_up_ramps_linearly_per_step_to_lr_times_workers_then_constant():
    schedule = LRSchedule(lr=0.1, scale=4, warmup_epochs=2.0)

    def lr(epoch, step):
        return learning_rate(schedule, epoch, step, STEPS)

    assert lr(0, 0) == pytest.approx(0.1)
    assert lr(0, 5) == pytest.approx(0.1 + 0.3 * 0.25)  # a quarter of the way
    assert lr(1, 0) == pytest.approx(0.25)
    assert lr(1, 9) == pytest.approx(0.1 + 0.3 * 0.95)
    assert lr(2, 0) == lr(7, 3) == pytest.approx(0.4)
    steps = rates(schedule, 2)
    assert all(b > a for a, b in zip(steps, steps[1:], strict=False))
    assert learning_rate(LRSchedule(0.1, 4, 0.0), 0, 0, STEPS) == pytest.approx(0.4)
    # scale 1 (batch_scaling: global, or one worker): nothing to ramp, whatever warmup_epochs
    assert rates(LRSchedule(0.1, 1, 2.0), 3) == [0.1] * 30


def test_step_is_torchs_steplr_stepped_once_per_epoch():
    schedule = LRSchedule(lr=0.2, kind="step", step_size=3, gamma=0.5)
    expected = torch_rates(
        lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5),
        10 * STEPS,
        0.2,
        per_epoch=STEPS,
    )
    assert rates(schedule, 10) == pytest.approx(expected, rel=1e-12)
    assert learning_rate(schedule, 2, 9, STEPS) == 0.2  # the LR changes at an epoch's start
    assert learning_rate(schedule, 3, 0, STEPS) == 0.1
    assert learning_rate(schedule, 6, 0, STEPS) == 0.05


def test_cosine_is_torchs_cosine_annealing_stepped_per_step_down_to_lr_min():
    schedule = LRSchedule(lr=0.1, kind="cosine", epochs=5, lr_min=0.001)
    expected = torch_rates(
        lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5 * STEPS, eta_min=0.001),
        5 * STEPS,
        0.1,
    )
    got = rates(schedule, 5)
    assert got == pytest.approx(expected, rel=1e-9)
    assert got[0] == 0.1 and all(b < a for a, b in zip(got, got[1:], strict=False))
    assert got[-1] == pytest.approx(0.001 + 0.099 * 0.5 * (1 + math.cos(math.pi * 49 / 50)))
    assert learning_rate(LRSchedule(0.1, kind="cosine", epochs=5), 5, 0, STEPS) == 0.0  # beyond


def test_inverse_time_is_seed_001s_decay_per_optimiser_step():
    schedule = LRSchedule(lr=0.1, kind="inverse_time", decay=0.01)
    got = rates(schedule, 3)
    assert got == pytest.approx([0.1 / (1 + 0.01 * i) for i in range(3 * STEPS)], rel=1e-12)
    # the iteration counts optimiser steps, whatever an epoch holds
    assert learning_rate(schedule, 2, 5, 20) == pytest.approx(0.1 / (1 + 0.01 * 45))


@pytest.mark.parametrize("kind", ["cosine", "step", "inverse_time"])
def test_a_schedule_starts_from_the_peak_where_the_warm_up_ends(kind):
    """As SequentialLR([warm-up, schedule], milestones=[warm-up]): the schedule's clock starts at
    the warm-up's end, from the LR the warm-up reached, with no jump."""
    warm = LRSchedule(0.1, 2, 1.0, kind, epochs=6, step_size=2, gamma=0.5, decay=0.02)
    plain = LRSchedule(0.2, 1, 0.0, kind, epochs=5, step_size=2, gamma=0.5, decay=0.02)
    after = rates(warm, 6)[STEPS:]  # the epochs after the warm-up's one
    assert after == pytest.approx(rates(plain, 5), rel=1e-12)
    assert rates(warm, 1)[-1] < after[0] == pytest.approx(0.2)


def test_the_run_keys_make_the_schedule():
    run = run_config(
        lr=0.1,
        workers=4,
        batch_scaling="per_worker",
        warmup_epochs=2,
        epochs=9,
        lr_schedule="step",
        lr_step_size=3,
        lr_gamma=0.5,
    )
    assert lr_schedule(run) == LRSchedule(
        0.1, 4, 2, "step", epochs=9, step_size=3, gamma=0.5, decay=None, lr_min=0.0
    )
    older = {k: v for k, v in run_config().items() if not k.startswith("lr_")}  # before the keys
    assert rates(lr_schedule(older), 2) == [0.05] * 20


@pytest.mark.parametrize(
    "change, match",
    [
        ({"lr_schedule": "step"}, r"run\.lr_step_size: lr_schedule step needs lr_step_size"),
        ({"lr_schedule": "inverse_time"}, r"run\.lr_decay: lr_schedule inverse_time needs"),
        (
            {"lr_schedule": "cosine", "epochs": None, "minutes": 5},
            r"run\.lr_schedule: cosine decays the LR over the run's epochs, and epochs is null",
        ),
        (
            {
                "lr_schedule": "cosine",
                "epochs": 2,
                "warmup_epochs": 2,
                "batch_scaling": "per_worker",
            },
            r"run\.warmup_epochs: a warm-up of 2 epochs leaves none of the run's 2 epochs",
        ),
        ({"lr_schedule": "cosine", "lr_min": 0.05}, r"run\.lr_min: .* below the LR it starts"),
        ({"lr_gamma": 0}, r"run\.lr_gamma: 0 is less than or equal to the minimum of 0"),
        ({"lr_decay": -1}, r"run\.lr_decay"),
        ({"lr_schedule": "linear"}, r"run\.lr_schedule: 'linear' is not one of"),
    ],
)
def test_a_schedule_without_what_it_needs_is_refused_naming_the_key(change, match):
    from clusterbench.train import validate_run

    with pytest.raises(cb.ConfigError, match=match):
        validate_run(run_config(**change))


def test_what_each_schedule_needs_is_enough():
    for run in (
        run_config(lr_schedule="step", lr_step_size=1),
        run_config(lr_schedule="inverse_time", lr_decay=1e-4),
        run_config(lr_schedule="cosine", epochs=3, minutes=1, lr_min=0.001),
        run_config(lr_schedule="constant", epochs=None, minutes=1),
        run_config(lr_schedule="step", lr_step_size=2, epochs=None, minutes=1),
    ):
        assert schedule_problems(run) == [], run
