"""The comm stage's pure parts and the report's use of its results: the size ladder, nccl-tests'
bus bandwidth, the rows and their spread, the jobs a config makes (one per environment and
backend), their params and resources, the interpolation and the scaling model, the report's
interconnect and scaling-model pages. (Real ranks: tests/test_comm_stage.py.)"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from clusterbench import comm, compare
from clusterbench import config as cb
from clusterbench.pipeline import comm_jobs
from clusterbench.pipeline.resources import train_resources
from clusterbench.report import inputs, tables
from clusterbench.report import main as run_main
from clusterbench.report.scaling_model import (
    gradient_bytes,
    interpolate_time,
    model_table,
)
from clusterbench.report.text import rst_literal
from test_report import edit_run_json, make_fake_results, pdf_text

# ------------------------------------------------------------------------------------------
# the arithmetic


def test_the_size_ladder_doubles_from_8_bytes_to_256_mib_by_default():
    default = cb.validate({"report": {"title": "t"}, "runs": [{"name": "a", "dataset": "digits"}]})
    sizes = comm.size_ladder(default["comm"]["max_bytes"])
    assert sizes[0] == 8 and sizes[-1] == 256 * 2**20 and len(sizes) == 26
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))
    assert comm.size_ladder(100) == [8, 16, 32, 64]  # a cap that is no power of two
    assert comm.size_ladder(8) == [8]
    with pytest.raises(ValueError, match="no message sizes from 8 B to 4 B"):
        comm.size_ladder(4)


@pytest.mark.parametrize(
    ("op", "ranks", "factor"),
    [
        ("allreduce", 2, 1.0),
        ("allreduce", 4, 1.5),
        ("allreduce", 8, 1.75),
        ("allgather", 2, 0.5),
        ("allgather", 4, 0.75),
        ("broadcast", 2, 1.0),
        ("broadcast", 16, 1.0),
    ],
)
def test_bus_bandwidth_factors_are_nccl_tests(op, ranks, factor):
    assert comm.bus_factor(op, ranks) == pytest.approx(factor)


def test_an_unknown_operation_is_named():
    with pytest.raises(ValueError, match="unknown operation 'alltoall'"):
        comm.bus_factor("alltoall", 2)


def test_an_allgathers_message_is_the_gathered_whole_in_whole_elements():
    assert comm.message("allreduce", 2**20, 4) == (2**18, 2**20)
    assert comm.message("broadcast", 8, 3) == (2, 8)
    assert comm.message("allgather", 2**20, 4) == (2**16, 2**20)  # each rank gives a quarter
    assert comm.message("allgather", 8, 2) == (1, 8)
    assert comm.message("allgather", 8, 3) == (1, 12)  # at least one element per rank
    assert comm.message("allgather", 64, 3) == (5, 60)  # rounded down to whole parts


def test_iterations_fill_the_budget_within_the_bounds():
    assert comm.iterations(0.001, 0.2, 5) == 200
    assert comm.iterations(1.0, 0.2, 5) == 5  # a slow size still runs min_iterations
    assert comm.iterations(1e-9, 0.2, 5) == comm.MAX_ITERATIONS
    assert comm.iterations(0.0, 0.2, 5) == comm.MAX_ITERATIONS


def test_chunks_split_the_iterations_into_near_equal_consecutive_parts():
    assert comm.chunks(5) == [1, 1, 1, 1, 1]
    assert comm.chunks(23) == [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]
    assert sum(comm.chunks(10_000)) == 10_000 and len(comm.chunks(10_000)) == comm.SAMPLES


def test_each_chunk_counts_at_its_slowest_rank():
    assert comm.slowest([[1.0, 5.0, 2.0], [3.0, 4.0, 2.5]]) == [3.0, 5.0, 2.5]


def test_a_row_has_the_latency_its_spread_and_the_bandwidths():
    # 4 ranks, allreduce of 1 MiB: chunks of 2, 2 and 1 iterations
    row = comm.row("allreduce", 2**20, 4, [2, 2, 1], [0.002, 0.004, 0.0015])
    assert row["iterations"] == 5 and row["samples"] == 3
    assert row["bytes"] == 2**20 and row["count"] == 2**18
    assert row["time_s"] == pytest.approx(0.0075 / 5)
    assert (row["time_min_s"], row["time_max_s"]) == pytest.approx((0.001, 0.002))
    assert row["time_median_s"] == pytest.approx(0.0015)
    algbw = 2**20 / (0.0075 / 5) / 1e9
    assert row["algbw_gbps"] == pytest.approx(algbw)
    assert row["busbw_gbps"] == pytest.approx(algbw * 1.5)
    assert row["busbw_min_gbps"] == pytest.approx(2**20 / 0.002 / 1e9 * 1.5)
    assert row["busbw_max_gbps"] == pytest.approx(2**20 / 0.001 / 1e9 * 1.5)
    assert set(comm.COLUMNS) >= set(row)


# ------------------------------------------------------------------------------------------
# the jobs


def resolved(runs: list[dict], **comm_settings) -> dict:
    config = {"report": {"title": "t"}, "runs": runs}
    if comm_settings:
        config["comm"] = comm_settings
    return cb.validate(config)


def test_one_job_per_multi_worker_environment_and_backend():
    config = resolved(
        [
            {"name": "one", "dataset": "digits", "workers": 1},
            {"name": "a", "dataset": "digits", "workers": 2, "lr": 0.1},
            {"name": "b", "dataset": "digits", "workers": 2, "lr": 0.2},  # same: no new job
            {"name": "c", "dataset": "digits", "workers": 2, "backend": "ddp"},
            {"name": "d", "dataset": "digits", "workers": 4, "nodes": 2},
            {"name": "e", "dataset": "digits", "workers": 8, "nodes": 2, "gpus_per_node": 4},
        ]
    )
    jobs = comm_jobs.config_jobs(config)
    assert list(jobs) == [
        "2w-1n-cpu-horovod",
        "2w-1n-cpu-ddp",
        "4w-2n-cpu-horovod",
        "8w-2n-4gpu-horovod",
    ]
    assert jobs["2w-1n-cpu-horovod"].runs == ("a", "b")
    assert jobs["8w-2n-4gpu-horovod"].device == "cuda"
    assert comm_jobs.jobs_of_runs(jobs, ["b", "d"]) == ["2w-1n-cpu-horovod", "4w-2n-cpu-horovod"]
    assert comm_jobs.jobs_of_runs(jobs, ["one"]) == []


def test_runs_naming_a_network_interface_are_measured_over_it_and_train_over_it():
    """The run keys iface and log_level: a comm job per interface (over it, at the first run's
    log level), and the train command gives both to the launcher; null: nothing (the launcher's
    variables then work)."""
    from clusterbench.pipeline.commands import network_options, train_command

    runs = [
        {"name": "a", "dataset": "digits", "workers": 2},
        {"name": "b", "dataset": "digits", "workers": 2, "iface": "ib0", "log_level": "info"},
    ]
    config = resolved(runs)
    jobs = comm_jobs.config_jobs(config)
    assert list(jobs) == ["2w-1n-cpu-horovod", "2w-1n-cpu-horovod-ib0"]
    ib0 = jobs["2w-1n-cpu-horovod-ib0"]
    assert ib0.runs == ("b",) and network_options(vars(ib0)) == "--iface ib0 --log-level info "
    params = comm_jobs.job_params(ib0, config["comm"])
    assert params["iface"] == "ib0" and cb.stage_params("comm", params) == params
    assert "iface" not in comm_jobs.job_params(jobs["2w-1n-cpu-horovod"], config["comm"])
    cfg = {"staging": {"dir": None}}
    command = train_command(config["runs"][1], cfg, "d/meta.json", "results/runs/b/run.json")
    assert "--iface ib0 --log-level info --lock" in command.launch
    plain = train_command(config["runs"][0], cfg, "d/meta.json", "results/runs/a/run.json")
    assert "--iface" not in plain.launch and "--log-level" not in plain.launch
    with pytest.raises(cb.ConfigError, match=r"runs\[0\]\.log_level: 'loud' is not one of"):
        resolved([{"name": "a", "dataset": "digits", "log_level": "loud"}])


def test_no_job_when_comm_is_off_or_every_run_has_one_worker():
    runs = [{"name": "a", "dataset": "digits", "workers": 2}]
    assert comm_jobs.config_jobs(resolved(runs, enabled=False)) == {}
    assert comm_jobs.config_jobs(resolved([{"name": "a", "dataset": "digits", "workers": 1}])) == {}


def test_a_jobs_params_are_its_environment_backend_and_the_comm_slice():
    config = resolved([{"name": "a", "dataset": "digits", "workers": 2}], max_bytes=4096)
    (job,) = comm_jobs.config_jobs(config).values()
    params = comm_jobs.job_params(job, config["comm"])
    assert params == {
        "name": "2w-1n-cpu-horovod",
        "workers": 2,
        "nodes": 1,
        "gpus_per_node": 0,
        "backend": "horovod",
        "max_bytes": 4096,
        "seconds_per_size": 0.2,
        "warmup_iterations": 3,
        "min_iterations": 5,
    }
    assert "enabled" not in params  # it decides whether the job exists: no rerun trigger
    assert cb.stage_params("comm", params) == params  # what the stage takes


def test_the_comm_settings_are_checked_by_the_schema():
    with pytest.raises(cb.ConfigError, match=r"comm.max_bytes: 4 is less than the minimum of 8"):
        resolved([{"name": "a", "dataset": "digits"}], max_bytes=4)
    with pytest.raises(cb.ConfigError, match=r"--params.workers: 1 is less than the minimum of 2"):
        cb.stage_params(
            "comm", {"name": "x", "workers": 1, "nodes": 1, "gpus_per_node": 0, "backend": "ddp"}
        )
    with pytest.raises(cb.ConfigError, match=r"--params.backend: 'mpi' is not one of"):
        cb.stage_params(
            "comm", {"name": "x", "workers": 2, "nodes": 1, "gpus_per_node": 0, "backend": "mpi"}
        )


def test_a_job_is_sized_as_a_train_job_of_its_environment():
    runs = [
        {"name": "a", "dataset": "digits", "workers": 4, "nodes": 2, "cpus_per_worker": 3,
         "qos": "short", "min_workers": 2, "max_workers": 6, "mem_mb": 1000},
    ]  # fmt: skip
    config = resolved(runs)
    (job,) = comm_jobs.config_jobs(config).values()
    sized = comm_jobs.job_run(job, config["runs"][0], config["comm"])
    res, train = train_resources(sized), train_resources(config["runs"][0])
    assert res["ranks"] == 4 and res["nodes"] == 2  # the environment's, not elastic's 6
    assert res["tasks"] == 4 and res["cpus_per_task"] == 3 and res["qos"] == "short"
    assert res["mem_mb"] == comm_jobs.memory_mb(4, 256 * 2**20) > train["mem_mb"]
    assert "--signal" not in res.get("slurm_extra", "")  # no checkpoint: no warning
    assert res["runtime"] == train["runtime"]


# ------------------------------------------------------------------------------------------
# the interpolation and the scaling model


def test_interpolation_is_linear_in_log_log_and_extends_by_latency_and_bandwidth():
    sizes, times = [1e3, 4e3, 16e3], [1e-4, 4e-4, 8e-4]
    assert interpolate_time(sizes, times, 4e3) == pytest.approx(4e-4)  # a measured size
    assert interpolate_time(sizes, times, 2e3) == pytest.approx(2e-4)  # halfway in log-log
    assert interpolate_time(sizes, times, 8e3) == pytest.approx(4e-4 * math.sqrt(2))
    assert interpolate_time(sizes, times, 10) == pytest.approx(1e-4)  # the latency floor
    assert interpolate_time(sizes, times, 64e3) == pytest.approx(32e-4)  # the last bandwidth
    with pytest.raises(ValueError):
        interpolate_time([], [], 1.0)


def test_gradient_bytes_follow_the_compression():
    assert gradient_bytes(1000, None) == gradient_bytes(1000, "none") == 4000
    assert gradient_bytes(1000, "fp16") == gradient_bytes(1000, "bf16") == 2000
    with pytest.raises(ValueError, match="unknown grad_compression 'int8'"):
        gradient_bytes(1000, "int8")


def comm_rows(name: str, workers: int, backend: str, site: str, times: dict[int, float]):
    """A comm job's allreduce rows as the report reads them."""
    return pd.DataFrame(
        [
            {"name": name, "site": site, "backend": backend, "library": "gloo",
             "workers": workers, "nodes": 1, "gpus_per_node": 0, "device": "cpu",
             "op": "allreduce", "size": size, "bytes": size, "iterations": 10, "time_s": t,
             "time_min_s": t, "time_max_s": t, "algbw_gbps": size / t / 1e9,
             "busbw_gbps": size / t / 1e9, "busbw_min_gbps": 0.0, "busbw_max_gbps": 0.0}
            for size, t in times.items()
        ],
        columns=list(inputs.COMM_COLUMNS),
    )  # fmt: skip


RUNS = [
    {"name": "one", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 2000, "acc": 0.96},
    {"name": "two", "dataset": "digits", "workers": 2, "nodes": 1, "ips": 3000, "acc": 0.97},
    {"name": "two-ddp", "dataset": "digits", "workers": 2, "nodes": 1, "ips": 3000, "acc": 0.95,
     "backend": "ddp"},
]  # fmt: skip


def model_of(
    tmp_path: Path,
    comm_df: pd.DataFrame,
    step_work: dict | None = None,
    step_comm: dict | None = None,
):
    """The scaling model of :data:`RUNS` faked; ``step_comm``: runs.csv's exposed
    communication per step by run (the step-time breakdown; absent: none)."""
    fake = make_fake_results(tmp_path, RUNS, epochs=3, benchmarks=False)
    for name in ("one", "two", "two-ddp"):
        if step_work is not False:
            work = step_work or {"parameters": 50_000, "steps_per_epoch": 9}
            edit_run_json(tmp_path, name, step_work=work)
    runs = [
        inputs.load_run(Path(r), Path(e))
        for r, e in zip(fake["run_dirs"], fake["eval_dirs"], strict=True)
    ]
    runs_df = tables.runs_table(runs, 1)
    if step_comm is not None:
        runs_df["step_comm_mean"] = runs_df["run"].map(step_comm)
    return model_table(runs, runs_df, comm_df).set_index("run"), runs_df.set_index("run")


def test_the_model_adds_the_scaled_compute_and_the_measured_allreduce(tmp_path):
    comm_df = comm_rows("2w-1n-cpu-horovod", 2, "horovod", "", {2**16: 1e-3, 2**18: 4e-3})
    model, runs_df = model_of(tmp_path, comm_df)
    two, one = model.loc["two"], runs_df.loc["one"]
    t1 = one["mean_epoch_seconds"] / 9
    assert two["baseline_run"] == "one"
    assert two["compute_s"] == pytest.approx(t1 * 64 / 128)  # half the batch per rank
    nbytes = 50_000 * 4  # between 2**16 and 2**18 bytes
    assert two["gradient_bytes"] == nbytes
    expected = interpolate_time([2**16, 2**18], [1e-3, 4e-3], nbytes)
    assert two["network_s"] == pytest.approx(expected)
    assert two["predicted_s"] == pytest.approx(two["compute_s"] + expected)
    measured = runs_df.loc["two", "mean_epoch_seconds"] / 9
    assert two["measured_step_s"] == pytest.approx(measured)
    assert two["gap_s"] == pytest.approx(measured - two["compute_s"])
    assert two["explained"] == pytest.approx(expected / (measured - two["compute_s"]))
    assert two["comm_job"] == "2w-1n-cpu-horovod" and two["note"] == ""


def test_the_model_puts_the_runs_measured_exposed_communication_beside_its_network(tmp_path):
    comm_df = comm_rows("2w-1n-cpu-horovod", 2, "horovod", "", {2**16: 1e-3, 2**18: 4e-3})
    model, _ = model_of(tmp_path, comm_df, step_comm={"one": 0.0, "two": 2.5e-3})  # ddp: none
    assert model.loc["two", "measured_comm_s"] == pytest.approx(2.5e-3)
    assert math.isnan(model.loc["two-ddp", "measured_comm_s"])
    assert model.loc["two", "network_s"] > 0  # the model's own figure, unchanged beside it


def test_a_run_without_a_baseline_comm_result_or_step_work_is_named_with_why(tmp_path):
    comm_df = comm_rows("2w-1n-cpu-horovod", 2, "horovod", "", {2**16: 1e-3, 2**18: 4e-3})
    model, _ = model_of(tmp_path / "a", comm_df)
    assert list(model.index) == ["two", "two-ddp"]  # predicted first; 1-worker runs: none
    assert "no timed 1-worker run" in model.loc["two-ddp", "note"]  # no 1-worker ddp run
    assert math.isnan(model.loc["two-ddp", "predicted_s"])
    empty = comm_rows("x", 2, "horovod", "", {})
    model, _ = model_of(tmp_path / "b", empty)
    assert model.loc["two", "note"].startswith("no comm result for its environment (workers 2")
    other_site = comm_rows("2w-1n-cpu-horovod", 2, "horovod", "east", {8: 1e-4})
    assert "on site ?" in model_of(tmp_path / "c", other_site)[0].loc["two", "note"]
    model, _ = model_of(tmp_path / "d", comm_df, step_work=False)
    assert "records no steps per epoch or parameter count" in model.loc["two", "note"]


def test_compressed_gradients_travel_in_half_the_bytes(tmp_path):
    comm_df = comm_rows("2w-1n-cpu-horovod", 2, "horovod", "", {8: 1e-4, 2**20: 1e-2})
    fake_root = tmp_path
    model, _ = model_of(fake_root, comm_df)
    plain = model.loc["two", "gradient_bytes"]
    edit_run_json(fake_root, "two", run={"grad_compression": "fp16"})
    runs = [
        inputs.load_run(fake_root / "results" / "runs" / n, fake_root / "results" / "eval" / n)
        for n in ("one", "two")
    ]
    again = model_table(runs, tables.runs_table(runs, 1), comm_df).set_index("run")
    assert again.loc["two", "gradient_bytes"] == plain // 2
    assert again.loc["two", "grad_compression"] == "fp16"


# ------------------------------------------------------------------------------------------
# the report


def write_comm_json(
    root: Path, name: str, workers: int, backend: str, site: str = "", slower: float = 1.0
) -> Path:
    """A comm job's outputs as the stage writes them, with made-up times (latency 50 us, then
    2 GB/s of bus bandwidth; all ``slower`` times longer)."""
    out = root / "results" / "comm" / name
    out.mkdir(parents=True)
    rows = []
    for op in comm.OPS:
        for size in comm.size_ladder(2**22):
            _, nbytes = comm.message(op, size, workers)
            t = (50e-6 + nbytes * comm.bus_factor(op, workers) / 2e9) * slower
            rows.append(comm.row(op, size, workers, [3, 2], [3 * t, 2 * t * 1.1]))
    settings = {"name": name, "workers": workers, "nodes": 1, "gpus_per_node": 0}
    content = {
        "format": comm.FORMAT,
        **settings,
        "backend": backend,
        "library": "gloo",
        "environment": {**{k: settings[k] for k in ("workers", "nodes", "gpus_per_node")}},
        "site": site,
        "rows": rows,
    }
    content["environment"]["device"] = "cpu"
    comm.write_outputs(out, content)
    return out / "comm.json"


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_the_report_draws_the_interconnect_and_the_scaling_model(tmp_path):
    fake = make_fake_results(tmp_path, RUNS, epochs=3)
    for name in ("one", "two", "two-ddp"):
        edit_run_json(tmp_path, name, step_work={"parameters": 50_000, "steps_per_epoch": 9})
    files = [
        write_comm_json(tmp_path, "2w-1n-cpu-horovod", 2, "horovod"),
        write_comm_json(tmp_path, "2w-1n-cpu-ddp", 2, "ddp"),
    ]
    csv_rows = pd.read_csv(files[0].with_suffix(".csv"))
    assert list(csv_rows.columns) == list(comm.COLUMNS) and len(csv_rows) == 3 * 20
    out = tmp_path / "report"
    argv = ["--params", json.dumps({"title": "comm"}), "--config-hash", "abc"]
    argv += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    assert run_main(argv + ["--comm", *map(str, files), "--out-dir", str(out)]) == 0
    assert (out / "figures" / "interconnect.png").is_file()
    assert (out / "figures" / "scaling-model.png").is_file()
    captions = (out / "captions.rst").read_text()
    # the two pages, one after the other (their numbers move as pages come before them)
    first = re.search(r"page (\d+)\\: The interconnect\\: bus bandwidth and latency", captions)
    assert first is not None, captions
    second = rst_literal(f"page {int(first[1]) + 1}: Scaling model: predicted against measured")
    assert second in captions
    model = pd.read_csv(out / "scaling_model.csv").set_index("run")
    assert model.loc["two", "comm_job"] == "2w-1n-cpu-horovod"
    assert model.loc["two", "predicted_s"] > 0
    assert "no timed 1-worker run" in model.loc["two-ddp", "note"]


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_without_comm_results_there_is_no_page_and_the_model_says_why(tmp_path):
    fake = make_fake_results(tmp_path, RUNS[:2], epochs=3, benchmarks=False)
    out = tmp_path / "report"
    argv = ["--params", json.dumps({"title": "comm"}), "--config-hash", "abc"]
    argv += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    assert run_main(argv + ["--out-dir", str(out)]) == 0  # comm.enabled: false
    captions = (out / "captions.rst").read_text()
    assert "interconnect" not in captions and "Scaling model" not in captions
    model = pd.read_csv(out / "scaling_model.csv")
    assert list(model["run"]) == ["two"] and "records no steps per epoch" in model["note"][0]


def test_a_bad_comm_json_is_named(tmp_path):
    path = write_comm_json(tmp_path, "2w-1n-cpu-ddp", 2, "ddp")
    info = json.loads(path.read_text())
    path.write_text(json.dumps({**info, "format": 99}))
    with pytest.raises(ValueError, match=rf"{path}: comm.json format 99, expected 1"):
        inputs.load_comm([path])
    info["rows"][3]["busbw_gbps"] = "fast"
    path.write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"rows\[3\]: unknown op 'allreduce' or no number in"):
        inputs.load_comm([path])


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_compare_puts_two_sites_interconnects_side_by_side(tmp_path):
    for site, slower in (("east", 1.0), ("west", 2.0)):
        make_fake_results(tmp_path / site, RUNS[:2], epochs=3, benchmarks=False)
        for name in ("one", "two"):
            work = {"parameters": 50_000, "steps_per_epoch": 9}
            edit_run_json(tmp_path / site, name, site=site, step_work=work)
        write_comm_json(tmp_path / site, "2w-1n-cpu-horovod", 2, "horovod", site, slower)
    out = tmp_path / "compare" / "compare.pdf"
    assert compare.main([str(tmp_path / "east"), str(tmp_path / "west"), "-o", str(out)]) == 0
    table = pd.read_csv(out.with_name("compare-comm.csv"))
    assert set(table["site"]) == {"east", "west"} and len(table) == 2 * 3 * 20
    west = table[table["site"] == "west"]
    assert west["busbw_vs_first_site"].tolist() == pytest.approx([0.5] * len(west))
    text = pdf_text(out)
    assert "The interconnect by site" in text
    assert "Scaling model: predicted against measured step time" in text
    assert "east/two" in text and "west/two" in text  # each site's run predicted with its own


def test_one_sites_interconnect_from_two_dates_is_labelled_as_its_runs_are(tmp_path):
    """One cluster's trees from two dates compare as two sites (site@date): each tree's comm
    rows carry its dated label, so that its runs meet their own tree's interconnect."""
    for tree, date in (("before", "2026-01-05"), ("after", "2026-02-10")):
        make_fake_results(tmp_path / tree, RUNS[:2], epochs=3, benchmarks=False)
        for name in ("one", "two"):
            path = tmp_path / tree / "results" / "runs" / name / "run.json"
            info = json.loads(path.read_text())
            info["provenance"]["date"] = f"{date}T10:00:00+01:00"
            path.write_text(json.dumps({**info, "site": "east"}))
        write_comm_json(tmp_path / tree, "2w-1n-cpu-horovod", 2, "horovod", "east")
    loaded = compare.load_all([tmp_path / "before", tmp_path / "after"])
    assert [set(frame["site"]) for frame in loaded.comm] == [
        {"east@2026-01-05"},
        {"east@2026-02-10"},
    ]
    assert {r.site for r in loaded.runs} == {"east@2026-01-05", "east@2026-02-10"}
