"""The one-clock page (clusterbench.report.pages.one_clock) and what it computes
(clusterbench.report.clock, pure), on two runs that traded ranks: A grows to 2, B starts and
A's worker job is preempted for it, B's priority is raised, B ends and A grows again."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from clusterbench.report import clock
from clusterbench.report.pages import one_clock


def at(clock_time: str) -> str:
    """An ISO time on the day of the example, from 'HH:MM:SS' (UTC)."""
    return f"2026-12-07T{clock_time}+00:00"


def s(clock_time: str) -> float:
    return clock.seconds(at(clock_time))


#: run.json's world.elastic and priority of the two runs (as the training writes them).
A = {
    "world": {"device": "cuda", "elastic": {
        "min_workers": 1, "max_workers": 2, "grow": "jobs",
        "timeline": [
            {"time": at("08:00:00"), "size": 1, "why": "started"},
            {"time": at("08:00:30"), "size": 2, "why": "hosts changed"},
            {"time": at("08:02:06"), "size": 1, "why": "a rank failed"},
            {"time": at("08:05:30"), "size": 2, "why": "hosts changed"},
            {"time": at("08:07:00"), "size": 2, "why": "finished"},
        ],
        # 30 s x 1 + 96 s x 2 + 204 s x 1 + 90 s x 2 = 606 rank-seconds, of 420 s x 2
        "rank_hours": 606 / 3600, "max_workers_rank_hours": 840 / 3600,
        "worker_jobs": [
            {"job": "11", "node": "n2", "start": at("08:00:14"), "end": at("08:02:05"),
             "why": "preempted"},
            {"job": "12", "node": "n2", "start": at("08:05:10"), "end": at("08:07:00"),
             "why": "the run ended"},
        ],
    }},
}  # fmt: skip
B = {
    "world": {"device": "cuda", "elastic": {
        "min_workers": 1, "max_workers": 2, "grow": "jobs",
        "timeline": [
            {"time": at("08:02:10"), "size": 1, "why": "started"},
            {"time": at("08:05:00"), "size": 1, "why": "finished"},
        ],
        "rank_hours": 170 / 3600, "max_workers_rank_hours": 340 / 3600,
        "worker_jobs": [
            {"job": "22", "node": None, "start": None, "end": at("08:05:00"),
             "why": "the run ended"},
        ],
    }},
    "priority": {"submitted": 0, "changes": [
        {"time": at("08:03:00"), "from": 0, "to": 5, "jobs": ["21", "22"]},
    ]},
}  # fmt: skip


def test_the_stack_of_two_runs_that_traded_ranks_totals_the_cluster():
    """A's steps (1, 2, 1 after the take-back, 2 again, none after its end) and B's, stacked
    over every time either changes: the total is what the two nodes held."""
    a = clock.elastic_steps(clock.timeline(A))
    b = clock.elastic_steps(clock.timeline(B))
    assert a == [
        (s("08:00:00"), 1), (s("08:00:30"), 2), (s("08:02:06"), 1), (s("08:05:30"), 2),
        (s("08:07:00"), 0),
    ]  # fmt: skip
    assert b == [(s("08:02:10"), 1), (s("08:05:00"), 0)]
    times, layers = clock.stacked({"A": a, "B": b})
    assert times == [
        s(t) for t in ("08:00:00", "08:00:30", "08:02:06", "08:02:10", "08:05:00", "08:05:30",
                       "08:07:00")
    ]  # fmt: skip
    assert layers == {"A": [1, 2, 1, 1, 1, 2, 0], "B": [0, 0, 0, 1, 0, 0, 0]}
    total = [x + y for x, y in zip(layers["A"], layers["B"], strict=True)]
    assert total == [1, 2, 1, 2, 1, 2, 0]
    assert clock.ranks_at(a, s("07:59:59")) == 0 and clock.ranks_at(a, s("08:03:00")) == 1


def test_a_resumed_run_holds_no_ranks_between_its_last_epoch_and_the_resume():
    """A launch that stopped (preempted) and a later one that resumed: the ranks end at the
    last epoch record before the resume (run.json's rank_hours counts the same), or at the
    stop's start when none was recorded."""
    points = [
        {"time": at("08:00:00"), "size": 2, "why": "started"},
        {"time": at("08:10:00"), "size": 1, "why": "resumed"},
        {"time": at("08:20:00"), "size": 1, "why": "finished"},
    ]
    records = [at("08:03:00"), at("08:06:00"), at("08:12:00")]
    assert clock.elastic_steps(points, records) == [
        (s("08:00:00"), 2), (s("08:06:00"), 0), (s("08:10:00"), 1), (s("08:20:00"), 0),
    ]  # fmt: skip
    assert clock.elastic_steps(points)[1] == (s("08:00:00"), 0)
    assert clock.elastic_steps([]) == []


def test_a_fixed_run_is_a_band_from_its_first_epochs_start_and_drawn_when_it_overlaps():
    epochs = [
        {"time": at("08:01:40"), "epoch_seconds": 40.0},
        {"time": at("08:02:20"), "epoch_seconds": 40.0},
        {"time": None, "epoch_seconds": 40.0},  # unreadable: left out
    ]
    steps = clock.fixed_steps(epochs, 3)
    assert steps == [(s("08:01:00"), 3), (s("08:02:20"), 0)]
    assert clock.overlaps(steps, s("08:02:00"), s("09:00:00"))
    assert not clock.overlaps(steps, s("08:02:20"), s("09:00:00"))
    assert not clock.overlaps(steps, s("07:00:00"), s("08:01:00"))
    assert clock.fixed_steps([{"time": None, "epoch_seconds": 1.0}], 3) == []


def test_the_marks_are_worker_jobs_take_backs_and_priority_changes():
    """A preempted worker job (Slurm) and a suspended one (SGE) are take-backs; a job that
    ended with the run is an end; a job that never started has no start mark; a priority
    change is marked with its from and to."""
    assert clock.marks(A) == [
        clock.Mark(s("08:00:14"), clock.STARTED),
        clock.Mark(s("08:02:05"), clock.TAKEN_BACK),
        clock.Mark(s("08:05:10"), clock.STARTED),
        clock.Mark(s("08:07:00"), clock.ENDED),
    ]
    assert clock.marks(B) == [
        clock.Mark(s("08:03:00"), clock.PRIORITY, "P0\u2192P5"),
        clock.Mark(s("08:05:00"), clock.ENDED),
    ]
    assert clock.taken_back("taken back (suspended)") and clock.taken_back("preempted")
    assert not any(map(clock.taken_back, ("cancelled", "its time limit", None, "node failure")))
    assert clock.marks({"world": {"size": 1}}) == []


def test_the_device_hours_per_run_and_their_totals_by_unit():
    """runs.csv's device-hours of each elastic run against max_workers's, a total per unit
    (GPU-hours and CPU-hours never added), a run without them (fixed) left out."""
    rows = [
        {"run": "A", "device_hours": 606 / 3600, "fixed_device_hours": 840 / 3600,
         "device_hours_unit": "GPU"},
        {"run": "B", "device_hours": 170 / 3600, "fixed_device_hours": 340 / 3600,
         "device_hours_unit": "GPU"},
        {"run": "C", "device_hours": float("nan"), "fixed_device_hours": float("nan"),
         "device_hours_unit": ""},
        {"run": "D", "device_hours": 2.0, "fixed_device_hours": 4.0, "device_hours_unit": "CPU"},
    ]  # fmt: skip
    each, totals = clock.device_hours(rows)
    assert [h.run for h in each] == ["A", "B", "D"]
    assert totals["GPU"].used == pytest.approx(776 / 3600)
    assert totals["GPU"].fixed == pytest.approx(1180 / 3600)
    assert (totals["CPU"].used, totals["CPU"].fixed) == (2.0, 4.0)


def retime(run_dir: Path, start: str, end: str) -> None:
    """Spread a fake run's epochs' ends evenly over ``start``..``end`` (HH:MM:SS)."""
    path = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    step = (s(end) - s(start)) / len(records)
    for i, record in enumerate(records, start=1):
        record["time"] = dt.datetime.fromtimestamp(s(start) + i * step, dt.UTC).isoformat()
        record["epoch_seconds"] = step
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def two_runs_and_a_fixed_one(tmp_path: Path) -> dict:
    """make_fake_results' runs A and B given the example's run.json records, C a fixed run
    of 1 rank from 08:01:00 to 08:04:00 and D a fixed one long before: the report's inputs."""
    from test_report import make_fake_results

    names = ["A", "B", "C", "D"]
    specs = [{"name": n, "dataset": "digits", "workers": 1, "nodes": 1, "ips": 900, "acc": 0.9}
             for n in names]  # fmt: skip
    fake = make_fake_results(tmp_path, runs=specs, epochs=3, benchmarks=False)
    runs = tmp_path / "results" / "runs"
    for name, record in (("A", A), ("B", B)):
        info = json.loads((runs / name / "run.json").read_text())
        info["world"].update(record["world"])
        info.update({k: v for k, v in record.items() if k != "world"})
        (runs / name / "run.json").write_text(json.dumps(info))
    for name, start, end in (
        ("A", "08:00:00", "08:07:00"),
        ("B", "08:02:10", "08:05:00"),
        ("C", "08:01:00", "08:04:00"),
        ("D", "06:00:00", "06:10:00"),
    ):
        retime(runs / name, start, end)  # fmt: skip
    return fake


def draw_page(tmp_path: Path) -> tuple[object, str]:
    """The example's runs read as the report reads them, and only the one-clock page drawn:
    the page and its texts as drawn (titles, labels, legend, ticks)."""
    import matplotlib
    import pandas as pd
    from clusterbench.report import theme
    from clusterbench.report.context import Context
    from clusterbench.report.inputs import load_run, parse_params
    from clusterbench.report.tables import epochs_table, runs_table
    from matplotlib.text import Text
    from test_report import PARAMS

    matplotlib.use("Agg")
    fake = two_runs_and_a_fixed_one(tmp_path)
    pairs = zip(fake["run_dirs"], fake["eval_dirs"], strict=True)
    runs = [load_run(Path(run), Path(ev)) for run, ev in pairs]
    params = parse_params(json.dumps(PARAMS), "abc")
    with theme.style():
        ctx = Context(params, {}, runs, runs_table(runs, 1), epochs_table(runs, 1), pd.DataFrame())
        one_clock.draw(ctx)
        (page,) = ctx.book.pages
        page.figure.savefig(tmp_path / "one_clock.png")  # lays it out, as the report saves it
    texts = [t.get_text() for t in page.figure.findobj(Text) if t.get_visible()]
    return page, " ".join(" ".join(texts).split())


def test_the_page_draws_every_elastic_run_and_an_overlapping_fixed_one(tmp_path: Path):
    """A, B and the fixed run C that overlapped them (not D, long before), each run's row of
    marks, the priority change beside its mark, the GPU-hours of A and B and their total."""
    page, text = draw_page(tmp_path)
    assert page.title == "One clock: every elastic run's ranks over time"
    assert page.png == "one_clock" and page.note is None
    assert "C (fixed)" in text and "D (fixed)" not in text and " D " not in text
    assert "P0\u2192P5" in text and "worker job taken back" in text
    assert "0.17 of 0.23 GPU-h, 72%" in text  # A: 606 of 840 rank-seconds
    assert "0.047 of 0.094 GPU-h, 50%" in text  # B
    assert "0.22 of 0.33 GPU-h, 66%" in text  # all runs
    assert "from 2026-12-07 08:00:00 UTC" in text
    assert (tmp_path / "one_clock.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_page_without_an_elastic_run_with_a_timeline():
    """A fixed run and an elastic run trained before the timeline was recorded: no page (the
    page never reaches the book)."""
    import pandas as pd

    ctx = SimpleNamespace(
        runs_df=pd.DataFrame({"run": ["C", "E"], "elastic": [False, True], "workers": [1, 1]}),
        epochs_df=pd.DataFrame(
            {"run": ["C", "E"], "time": [at("08:00:00")] * 2, "epoch_seconds": [1.0] * 2}
        ),
        run_data=lambda name: SimpleNamespace(info={"world": {"elastic": {"min_workers": 1}}}),
        book=None,
    )
    assert one_clock.runs_on_the_clock(ctx) == ({}, [], 1)
    one_clock.draw(ctx)  # draws nothing: ctx.book is never used


def test_the_page_says_what_it_leaves_out_and_names_runs_by_their_start_and_end():
    assert one_clock.note(3, 3, 0) is None
    assert one_clock.note(12, 10, 1) == (
        "The first 10 of 12 runs to start are drawn: the total leaves the others out. "
        "1 elastic run(s) recorded no timeline (trained by an older version): not drawn."
    )
    name = "resnet50-imagenet-elastic-run-number-7"
    assert one_clock.short(name, 20) == "resnet50-\u2026n-number-7"  # 20: runs told apart
    assert one_clock.short("A", 20) == "A"
