"""The history (clusterbench.history): the SQLite store (its schema version, appends from real
concurrent processes, idempotent appends, other users' files, the check before any job), the
entries made from a run's files, the regression rule on synthetic series, the workflow's
history step, ``clusterbench-history`` and the report's history page."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clusterbench.history import cli, entries, regression, stage, store
from conftest import REPO
from test_report import FAKE_COMMIT, PARAMS, make_fake_results, pdf_text, run_report

WORKFLOW = REPO / "workflow"


def entry(run_dir: str = "/results/runs/a", end_time: str = "2026-01-01T10:00:00+00:00", **kw):
    """A synthetic entry: every store column, the figures of a 10-epoch run at 1000 images/s."""
    base = {key: None for key in store.RUN_KEYS}
    base.update(
        run_dir=run_dir,
        end_time=end_time,
        date=entries.utc_date(end_time),
        run=Path(run_dir).name,
        site="vm",
        experiment="",
        environment="2 workers, 1 node",
        workload="digits / small_cnn",
        dataset="digits",
        model="small_cnn",
        settings={"name": Path(run_dir).name},
        speed_settings=json.dumps({"backend": "horovod", "bn": "aggregate", "global_batch": 128}),
        timed_epochs=10,
        images_per_second_mean=1000.0,
        images_per_second_sd=30.0,
        torch="2.12.0",
        commit_sha="0123456789abcdef",
        hosts=["node1"],
        cpu_model="Fake Xeon",
        gpu_model="none",
        python="3.11.7",
        horovod="0.28.1",
    )
    base.update(kw)
    return base


def count(path: Path, table: str = "runs") -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


# --- the store -------------------------------------------------------------------------------


def test_a_new_store_carries_its_schema_version_and_appends_once(tmp_path: Path):
    path = tmp_path / "shared" / "history.sqlite"  # the directory is made too
    first = store.append(path, [entry(), entry("/results/runs/b")], {"config_hash": "abc"})
    assert (first.added, first.present) == (2, 0)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # a local disk
        appended = conn.execute("SELECT config_hash, user, workdir FROM appends").fetchall()
    assert appended == [("abc", store._user(), os.getcwd())]
    # the same runs again (the report rerun, the step forced): nothing new, no append row
    again = store.append(path, [entry(), entry("/results/runs/b")], {})
    assert (again.append_id, again.added, again.present) == (None, 0, 2)
    # a run trained again ends at another time: a new entry, in a new append
    retrained = store.append(path, [entry(end_time="2026-01-02T10:00:00+00:00")], {})
    assert retrained.added == 1 and count(path) == 3 and count(path, "appends") == 2
    rows = store.read_runs(path)
    assert [r["end_time"][:10] for r in rows] == ["2026-01-01", "2026-01-01", "2026-01-02"]
    assert json.loads(rows[0]["hosts"]) == ["node1"]


def test_a_newer_schema_is_refused_and_an_older_one_migrated(tmp_path: Path, monkeypatch):
    path = tmp_path / "history.sqlite"
    store.append(path, [entry()], {})
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 7")
    newer = re.escape("has schema version 7, newer than this clusterbench's (2): a newer")
    for action in (
        lambda: store.append(path, [entry("/r/b")], {}),
        lambda: store.read_runs(path),
    ):
        with pytest.raises(store.HistoryError, match=newer):
            action()
    assert re.search(newer, store.check_writable(path))
    assert count(path) == 1  # nothing appended

    # an older one: migrated in place, one step at a time, inside the writer's transaction
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 2")
    monkeypatch.setattr(store, "SCHEMA_VERSION", 3)
    with pytest.raises(store.HistoryError, match="no migration from version 2 exists"):
        store.append(path, [entry("/r/b")], {})
    monkeypatch.setattr(
        store,
        "MIGRATIONS",
        {**store.MIGRATIONS, 2: lambda conn: conn.execute("ALTER TABLE runs ADD note TEXT")},
    )
    assert store.check_writable(path) is None
    store.append(path, [entry("/r/b")], {})
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(3,)]
        assert "note" in [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
    assert count(path) == 2


def test_files_that_are_no_store_are_named(tmp_path: Path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE results (x)")
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database, but text " * 100)
    for path, message in (
        (other, "not a clusterbench history store .* tables results and no schema_version"),
        (junk, "not a clusterbench history store"),
    ):
        with pytest.raises(store.HistoryError, match=message):
            store.append(path, [entry()], {})
        assert "not a clusterbench history store" in store.check_writable(path)
    empty = tmp_path / "empty.sqlite"
    empty.touch()  # an empty file is a new store
    assert store.check_writable(empty) is None
    assert store.append(empty, [entry()], {}).added == 1


def test_a_path_that_cannot_be_written_is_named_and_nothing_is_created(tmp_path: Path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert store.check_writable(a_file / "h.sqlite") == (
        f"history store {a_file / 'h.sqlite'} cannot be created: {a_file} is not a directory"
    )
    assert store.check_writable(tmp_path) == f"history store {tmp_path} is not a file"
    deep = tmp_path / "new" / "dirs" / "h.sqlite"
    assert store.check_writable(deep) is None
    assert not (tmp_path / "new").exists()  # checked, not made
    with pytest.raises(store.HistoryError, match=f"history store {a_file / 'h.sqlite'}"):
        store.append(a_file / "h.sqlite", [entry()], {})


APPENDER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from clusterbench.history import store
    path, writer, start = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    template = json.loads(sys.argv[4])
    while time.time() < start:  # every writer starts at once
        time.sleep(0.001)
    for batch in range(10):
        runs = [dict(template, run_dir=f"/w{writer}/run{batch}-{i}") for i in range(5)]
        runs.append(dict(template, run_dir="/shared/run"))  # every writer appends this one too
        store.append(path, runs, {"config_hash": f"w{writer}"})
    """
)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_concurrent_writers_lose_nothing_and_duplicate_nothing(tmp_path: Path, journal: str):
    """Six processes append to one new store at once, ten transactions each: every run once.
    ``delete``: the rollback journal a network file system gets (NFS-like locking)."""
    import time

    path = tmp_path / "history.sqlite"
    template = json.dumps(entry())
    env = {**os.environ, "PYTHONPATH": str(WORKFLOW), store.JOURNAL_ENV: journal}
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(path), str(w), str(start), template],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(6)
    ]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    rows = store.read_runs(path)
    assert len(rows) == 6 * 10 * 5 + 1
    assert len({r["run_dir"] for r in rows}) == len(rows)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == journal
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert count(path, "appends") == 6 * 10


def run_as_nobody(code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` run by the system Python as the user nobody (another user than the tests')."""
    return subprocess.run(
        ["/usr/bin/python3", "-c", code, *args],
        env={"PYTHONPATH": str(WORKFLOW), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        user="nobody",
        group="nogroup",
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=120,
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
    reason="needs root (to act as another user) and /usr/bin/python3",
)


@pytest.fixture
def shared_dir():
    """A group's shared directory (setgid, group nogroup, group-writable) that nobody can
    reach: /tmp/cb-history-*, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="cb-history-", dir="/tmp"))
    shutil.chown(path, group="nogroup")
    path.chmod(0o2775)
    yield path
    shutil.rmtree(path)


@needs_root
def test_another_users_store_in_a_shared_directory_is_appended_to(shared_dir: Path):
    """A store one user made in a group's directory: group-writable, so another member of the
    group appends to it (and its WAL files); one who may only read it reads it; one who may
    not write it is told so, naming the file."""
    path = shared_dir / "history.sqlite"
    store.append(path, [entry()], {})
    assert path.stat().st_mode & 0o060 == 0o060 and path.stat().st_gid == 65534
    append = (
        "import sys, json; from pathlib import Path; from clusterbench.history import store; "
        "print(store.append(Path(sys.argv[1]), [json.loads(sys.argv[2])], {}).added)"
    )
    proc = run_as_nobody(append, str(path), json.dumps(entry("/results/runs/nobody")))
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr
    assert [r["user"] for r in _appends(path)] == ["root", "nobody"]
    store.append(path, [entry("/results/runs/root-again")], {})  # and back: root again
    assert count(path) == 3

    path.chmod(0o644)  # the group may read it only
    read = (
        "import sys; from pathlib import Path; from clusterbench.history import store; "
        "print(len(store.read_runs(Path(sys.argv[1])))); "
        "print(store.check_writable(Path(sys.argv[1])))"
    )
    proc = run_as_nobody(read, str(path))
    assert proc.returncode == 0, proc.stderr
    count_line, problem = proc.stdout.strip().splitlines()
    assert count_line == "3"
    assert problem == f"history store {path} cannot be opened for writing: Permission denied"


def _appends(path: Path) -> list[dict]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM appends ORDER BY id")]


def test_journal_mode_follows_the_file_system(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(store.JOURNAL_ENV, raising=False)
    monkeypatch.setattr(store, "filesystem_type", lambda path: "nfs4")
    assert store.journal_mode(tmp_path / "h.sqlite") == "delete"
    monkeypatch.setattr(store, "filesystem_type", lambda path: "ext4")
    assert store.journal_mode(tmp_path / "h.sqlite") == "wal"
    monkeypatch.setenv(store.JOURNAL_ENV, "delete")
    assert store.journal_mode(tmp_path / "h.sqlite") == "delete"
    monkeypatch.setenv(store.JOURNAL_ENV, "fast")
    with pytest.raises(store.HistoryError, match="CLUSTERBENCH_HISTORY_JOURNAL='fast'"):
        store.journal_mode(tmp_path / "h.sqlite")


def test_the_file_system_is_that_of_the_longest_mount_point_above_the_path():
    mounts = (
        "/dev/vda / ext4 rw 0 0\n"
        "server:/export /shared nfs4 rw 0 0\n"
        "/dev/vdb /shared/local\\040disk xfs rw 0 0\n"
    )
    assert store.filesystem_type(Path("/shared/group/history.sqlite"), mounts) == "nfs4"
    assert store.filesystem_type(Path("/shared/local disk/h.sqlite"), mounts) == "xfs"
    assert store.filesystem_type(Path("/sharedx/h.sqlite"), mounts) == "ext4"
    assert store.filesystem_type(Path("/proc/self")) == "proc"  # this machine's own


# --- the regression rule ---------------------------------------------------------------------


#: The stated noise of the synthetic history: five earlier workflow runs whose means spread by
#: 1 % (sd 8.2 images/s around 1000), each run's epochs by 3 % (sd 30 over 10 timed epochs).
HISTORY_MEANS = (1000.0, 1010.0, 990.0, 1005.0, 995.0)


def synthetic_series(newest: float, torch: str = "2.13.0") -> pd.DataFrame:
    rows = [
        entry(f"/r/run{i}", f"2026-01-0{i + 1}T10:00:00+00:00", images_per_second_mean=m)
        for i, m in enumerate(HISTORY_MEANS)
    ]
    rows.append(
        entry("/r/new", "2026-01-08T10:00:00+00:00", images_per_second_mean=newest, torch=torch)
    )
    for i, row in enumerate(rows, start=1):
        row["append_id"] = i
    return pd.DataFrame(rows)


def test_an_injected_20_percent_slowdown_is_flagged_and_names_what_changed():
    pts = regression.points(synthetic_series(800.0))
    assert list(pts["status"]) == ["first", "ok", "ok", "ok", "ok", "regression"]
    newest = pts.iloc[-1]
    # reference: 1000 +- max(sqrt(5 x 900/10)/5, sd 7.9/sqrt 5) = 4.24; newest 800 +- 9.49
    assert newest["ref_mean"] == pytest.approx(1000.0)
    assert newest["threshold"] == pytest.approx(1000 - 3 * np.hypot(9.4868, 4.2426), rel=1e-3)
    assert newest["change"] == pytest.approx(-0.2)
    assert newest["changed"] == "torch 2.12.0 \u2192 2.13.0"
    flagged = regression.newest_regressions(pts)
    assert list(flagged["runs"]) == ["new"]


def test_a_2_percent_slowdown_at_the_stated_noise_is_not_flagged():
    pts = regression.points(synthetic_series(980.0))
    assert list(pts["status"]) == ["first", "ok", "ok", "ok", "ok", "ok"]
    assert pts.iloc[-1]["threshold"] < 980.0 < pts.iloc[-1]["ref_mean"]
    assert regression.newest_regressions(pts).empty


def test_a_regression_stays_out_of_the_reference_and_faster_is_said():
    df = synthetic_series(800.0)
    later = entry(
        "/r/later", "2026-01-09T10:00:00+00:00", images_per_second_mean=810.0, torch="2.13.0"
    )
    faster = entry("/r/fast", "2026-01-10T10:00:00+00:00", images_per_second_mean=1200.0)
    df = pd.concat([df, pd.DataFrame([{**later, "append_id": 7}, {**faster, "append_id": 8}])])
    pts = regression.points(df)
    # the later slow point is compared with the good points only (not the first slow one)
    assert list(pts["status"][-3:]) == ["regression", "regression", "faster"]
    assert pts.iloc[-2]["ref_mean"] == pytest.approx(1000.0)
    assert pts.iloc[-2]["changed"] == "torch 2.12.0 \u2192 2.13.0"  # since the last good entry


def test_the_noise_unknown_and_several_series_apart():
    single_epoch = synthetic_series(500.0).assign(images_per_second_sd=np.nan, timed_epochs=1)
    single_epoch["images_per_second_mean"] = 1000.0
    single_epoch.loc[5, "images_per_second_mean"] = 500.0
    # the history's own run-to-run spread is 0: no noise known at all
    assert regression.points(single_epoch).iloc[-1]["status"] == "unjudged"
    other = synthetic_series(800.0).assign(site="other")
    both = pd.concat([synthetic_series(1000.0), other.assign(append_id=other["append_id"] + 10)])
    pts = regression.points(both)
    assert pts.groupby("site")["status"].last().to_dict() == {"vm": "ok", "other": "regression"}


def test_a_language_model_series_is_judged_and_told_in_tokens_per_second():
    """Its throughput is tokens/s: the rule reads them (here the tokens fell 20 % and the
    sequences per second did not), and every line saying the figure names the unit."""
    df = synthetic_series(1000.0).assign(workload="notes / gpt-tiny")
    df["tokens_per_second_mean"] = df["images_per_second_mean"] * 32
    df["tokens_per_second_sd"] = 30.0 * 32
    df.loc[5, "tokens_per_second_mean"] = 800.0 * 32
    pts = regression.points(df)
    assert set(pts["unit"]) == {"tokens/s"}
    assert pts.iloc[-1]["status"] == "regression"
    assert pts.iloc[-1]["ref_mean"] == pytest.approx(32_000)
    lines = stage.summary(Path("h.sqlite"), store.Appended(1, 6, 0), df)
    assert "25,600 tokens/s on 2026-01-08" in lines[-1] and "images/s" not in "".join(lines)
    assert "tokens/s" in "".join(cli.series_lines(pts, 10))
    # a classifier's series is told in images/s
    assert set(regression.points(synthetic_series(800.0))["unit"]) == {"images/s"}


# --- entries from a run's files, the step, the CLI and the page ------------------------------


@pytest.fixture
def fake_tree(tmp_path: Path) -> dict:
    fake = make_fake_results(tmp_path, benchmarks=False)
    return fake


def test_an_entry_holds_the_runs_settings_provenance_and_figures(fake_tree: dict):
    run_dir = Path(fake_tree["run_dirs"][1])  # digits-2w
    e = entries.entry(run_dir, Path(fake_tree["eval_dirs"][1]), warmup=1)
    expected = fake_tree["expected"]["digits-2w"]
    assert e["run_dir"] == str(run_dir) and e["end_time"] == "2025-10-09T10:00:00+00:00"
    assert e["date"] == "2025-10-09T10:00:00.000+00:00"
    assert (e["workload"], e["environment"], e["site"]) == (
        "digits / small_cnn",
        "2 workers, 1 node",
        "",
    )
    speed = json.loads(e["speed_settings"])
    assert "lr" not in speed and "seed" not in speed and "epochs" not in speed
    assert speed["global_batch"] == 128 and speed["grad_compression"] == "none"
    assert e["settings"]["lr"] == 0.05  # every training setting kept
    timed = expected["ips"][1:]
    assert e["images_per_second_mean"] == pytest.approx(np.mean(timed))
    assert e["images_per_second_sd"] == pytest.approx(np.std(timed, ddof=1))
    assert e["timed_epochs"] == 14 and e["epochs"] == 15
    assert e["epoch_metrics"]["images_per_second"] == pytest.approx(expected["ips"])
    assert e["cpu_model"] == "Fake Xeon Gold 6330 @ 2.00GHz" and e["gpu_model"] == "none"
    assert (e["torch"], e["horovod"], e["commit_sha"]) == ("2.13.0", "0.28.1", FAKE_COMMIT)
    assert e["accuracy"] == pytest.approx(expected["accuracy"]) and e["eval_split"] == "test"


def stage_args(fake: dict, path: Path, out: Path) -> list[str]:
    return [
        "--history",
        str(path),
        "--warmup-epochs",
        "1",
        "--run-dirs",
        *fake["run_dirs"],
        "--eval-dirs",
        *fake["eval_dirs"],
        "--out",
        str(out),
    ]


def test_the_step_appends_then_writes_the_series_and_the_cli_flags_a_slowdown(
    fake_tree: dict, tmp_path: Path, capsys, monkeypatch
):
    path, out = tmp_path / "h.sqlite", tmp_path / "series.csv"
    assert stage.main(stage_args(fake_tree, path, out)) == 0
    assert "history: 5 run(s) appended" in capsys.readouterr().out
    assert stage.main(stage_args(fake_tree, path, out)) == 0  # again: nothing new
    assert "history: 0 run(s) appended" in capsys.readouterr().out
    assert count(path) == 5

    # the same tree trained again, 20 % slower on a newer torch: a regression of its series
    root = Path(fake_tree["run_dirs"][0]).parents[2]
    for name in ("digits-2w",):
        run_dir = root / "results" / "runs" / name
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        for r in lines:
            r["images_per_second"] *= 0.8
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        info = json.loads((run_dir / "run.json").read_text())
        info["provenance"]["date"] = "2025-11-01T10:00:00+00:00"
        info["provenance"]["versions"]["torch"] = "2.14.0"
        (run_dir / "run.json").write_text(json.dumps(info))
    assert stage.main(stage_args(fake_tree, path, out)) == 0
    log = capsys.readouterr().out
    assert "history: 1 run(s) appended" in log and "(4 already there)" in log
    assert "history: REGRESSION no site / 2 workers, 1 node / digits / small_cnn / horovod" in log
    assert "changed: torch 2.13.0 \u2192 2.14.0" in log
    series = pd.read_csv(out)
    assert len(series) == 6 and series["current"].sum() == 5
    assert "provenance" not in series.columns

    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("history:\n  path: $HISTORY_HERE\n")
    monkeypatch.setenv("HISTORY_HERE", str(path))
    assert cli.main([]) == 0  # the path from config/config.yaml, its variable expanded
    text = capsys.readouterr().out
    assert text.startswith(f"history store {path}: 6 run(s) in 2 append(s)")
    assert " \u00b7 2 workers, 1 node \u00b7 digits / small_cnn" in text
    assert "REGRESSION (-20.0% vs" in text and "regressions (newest points): 1" in text
    assert cli.main([str(path), "--fail-on-regression"]) == 1
    capsys.readouterr()
    assert cli.main([str(tmp_path / "none.sqlite")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_the_report_draws_the_history_page(fake_tree: dict, tmp_path: Path):
    path, out = tmp_path / "h.sqlite", tmp_path / "series.csv"
    assert stage.main(stage_args(fake_tree, path, out)) == 0
    report = tmp_path / "report"
    argv_fake = {**fake_tree, "benchmarks": []}
    from clusterbench.report import main

    args = ["--params", json.dumps(PARAMS), "--config-hash", "abc"]
    args += ["--run-dirs", *argv_fake["run_dirs"], "--eval-dirs", *argv_fake["eval_dirs"]]
    assert main([*args, "--history", str(out), "--out-dir", str(report)]) == 0
    pages = [" ".join(p.split()) for p in pdf_text(report / "report.pdf").split("\f")]
    page = next(p for p in pages if p.startswith("History: throughput over time"))
    assert "A point (one workflow run's runs of a series) is a regression when" in page
    assert "Newest points: no regression (5 series: first point)" in page
    assert (report / "figures" / "history.png").is_file()
    # without a history (a comparison, an older workflow): no page
    assert run_report(fake_tree, tmp_path / "plain") == 0
    assert not (tmp_path / "plain" / "figures" / "history.png").exists()


def test_the_cli_on_a_directory_says_it_is_one_and_names_the_file_to_give(tmp_path: Path, capsys):
    store.append(tmp_path / "history.sqlite", [entry()], {})
    assert cli.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a directory, not a history store" in err, err
    assert "(it holds history.sqlite)" in err and "no such file" not in err, err


def drawn_range(series: pd.DataFrame) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The x range the history page gives one panel of ``series`` (store rows)."""
    from types import SimpleNamespace

    import matplotlib
    import seaborn as sns

    matplotlib.use("Agg")
    from clusterbench.report.pages import history as page
    from matplotlib.dates import num2date
    from matplotlib.figure import Figure

    series = series.assign(current=True)
    pts = regression.points(series)
    pts = pts.assign(when=pd.to_datetime(pts["date"], utc=True, format="ISO8601"))
    runs = series.assign(date=pd.to_datetime(series["date"], utc=True, format="ISO8601"))
    ax = Figure().subplots()
    ctx = SimpleNamespace(book=SimpleNamespace(sns=sns))
    page.panel(ctx, ax, ("vm", "2 workers, 1 node", "digits / small_cnn"), pts, runs)
    low, high = ax.get_xlim()
    return pd.Timestamp(num2date(low)), pd.Timestamp(num2date(high))


def test_the_history_page_dates_fit_the_points_also_for_a_single_one():
    """One point (a series' first workflow run) drew a date axis from 2025 to 2029: matplotlib's
    default range for a single date. The page's range is the points' span, with a margin."""
    series = synthetic_series(1000.0)
    point = pd.Timestamp("2026-01-01T10:00:00+00:00")
    low, high = drawn_range(series.iloc[:1])
    assert low < point < high and high - low <= pd.Timedelta(hours=4), (low, high)
    low, high = drawn_range(series)  # 2026-01-01 .. 2026-01-08: the week and a margin
    assert pd.Timestamp("2025-12-31", tz="UTC") < low < point
    assert pd.Timestamp("2026-01-08T10:00:00+00:00") < high < pd.Timestamp("2026-01-10", tz="UTC")
