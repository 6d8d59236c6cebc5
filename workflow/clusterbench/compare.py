"""``clusterbench-compare``: one report over the results of several clusters.

```
clusterbench-compare DIR [DIR ...] -o compare.pdf [--title T] [--warmup-epochs N]
```

Each ``DIR`` is a finished results tree (a workflow directory holding ``results/``, or the
``results`` folder itself, e.g. copied back from a cluster). Every run's ``site`` comes from its
run.json (the config's ``site``, else the cluster's own name: Slurm's ClusterName, the SGE cell,
the local host; :mod:`clusterbench.launch.schedulers`); a run.json older than site recording
takes the directory's name.

One cluster's results from two dates (before and after a driver upgrade, say) are two
"sites": where trees share a site, each tree's runs of it are labelled with the site and the
date of the tree's newest training there (``east@2026-01-05``; to the minute where two trees
of a site share a day, by the tree's directory where they share that too), and compared as
sites are.

Runs are matched across sites by their training settings: two runs are the same benchmark on
two sites only when their training slices (every training key but the name) are equal. The
comparison says which runs could not be matched, and why: no run with those settings on
another site, or (for a run of the same name elsewhere) the keys in which they differ.

The PDF has a site-by-site table and chart (time per epoch and images/s, a language model's
tokens/s, of each matched run
on each site, and each site's ratio to the first) and then the report's own pages over all
runs, each named ``<site>/<run>``, with the site as one more dimension: no table groups or
averages runs of two sites (environments, sweep points, repeats, scaling baselines, backend
pairs are all per site). The comm stage's results of every tree (``comm/*/comm.json``) are
drawn on the interconnect page, a line per site, environment and backend, and the environments
and backends measured on several sites side by side, a chart each, a line per site. Also
written beside it: ``compare.csv`` (the site table), ``compare-runs.csv`` (every run, with its
site) and ``compare-comm.csv`` (each environment and backend measured on several sites: its
time and bus bandwidth per operation, size and site, and the ratio to the first site's).

This module finds, reads and matches the runs and writes the tables; the PDF's own pages and
the PDF are :mod:`clusterbench.report.compare`'s (which imports nothing from here).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterbench.config import (
    LATER_TRAIN_DEFAULTS,
    LATER_TRAIN_KEYS,
    TRAIN_KEYS,
    canonical_json,
    schema_default,
)
from clusterbench.core.atomic import atomic_open
from clusterbench.core.paths import PathError, cannot_make_in, expand

#: The training keys that must be equal for two runs to be compared (all but the name); keys
#: added since (absent in an older run.json) count as their default, which such a run had.
MATCH_KEYS = tuple(k for k in TRAIN_KEYS if k != "name")


class CompareError(ValueError):
    """A results directory that cannot be compared; the message names it."""


@dataclass(frozen=True)
class SiteRun:
    """One run of one results tree: where it came from and its training settings."""

    site: str
    name: str
    config: dict[str, Any]  # run.json's "run"
    run_dir: Path
    eval_dir: Path
    date: str = ""  # when its training ended (run.json's provenance date), ISO 8601

    @property
    def label(self) -> str:
        return f"{self.site}/{self.name}"


def results_root(path: Path) -> Path:
    """The ``results`` folder of ``path`` (a workflow directory or the folder itself)."""
    for root in (path / "results", path):
        if (root / "runs").is_dir():
            return root
    raise CompareError(
        f"{path}: no runs/ (nor results/runs/) here: not a clusterbench results tree"
    )


def read_run_json(path: Path) -> dict[str, Any]:
    """A run.json, as far as the comparison needs it (its ``run`` object and ``site``)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("run"), dict):
        raise CompareError(f"{path}: not a run.json (no 'run' object)")
    return data


def find_runs(path: Path) -> tuple[list[SiteRun], list[tuple[str, str]]]:
    """The finished runs of one results tree (a run.json and its evaluation's metrics.json),
    and the unfinished ones as ``(site/run, why)``: a run directory without run.json or
    without its evaluation. The site of an unfinished run is that of the tree's finished runs
    (the directory's name where they have several or none)."""
    root = results_root(path)
    runs, pending = [], []
    for run_dir in sorted(p for p in (root / "runs").iterdir() if p.is_dir()):
        eval_dir = root / "eval" / run_dir.name
        if not (run_dir / "run.json").is_file():
            pending.append((run_dir.name, f"no run.json in {run_dir}: its training did not finish"))
            continue
        if not (eval_dir / "metrics.json").is_file():
            pending.append(
                (run_dir.name, f"no {eval_dir / 'metrics.json'}: not evaluated, so not compared")
            )
            continue
        info = read_run_json(run_dir / "run.json")
        site = str(info.get("site") or tree_name(path))
        date = training_date(info, run_dir / "run.json")
        runs.append(SiteRun(site, run_dir.name, dict(info["run"]), run_dir, eval_dir, date))
    if not runs:
        raise CompareError(f"{root}: no finished run (run.json and eval metrics.json)")
    site = tree_site(runs, tree_name(path))
    return runs, [(f"{site}/{name}", why) for name, why in pending]


def training_date(info: dict[str, Any], run_json: Path) -> str:
    """When a run's training ended: its run.json's provenance date (as recorded, in the local
    time of where it trained), else the file's modification time."""
    date = (info.get("provenance") or {}).get("date")
    if isinstance(date, str) and len(date) >= 16:
        return date
    import datetime as dt

    return dt.datetime.fromtimestamp(run_json.stat().st_mtime).astimezone().isoformat()


def dated_sites(trees: Sequence[tuple[str, list[SiteRun]]]) -> dict[tuple[int, str], str]:
    """(tree index, site) -> the site's label, for trees given as (name, runs): the site
    itself, or where several trees share it, ``site@date`` of that tree's newest training
    there (to the day, else the minute), ``site@<tree name>`` where two trees share even
    that."""
    found: dict[str, list[tuple[int, str]]] = {}
    for i, (_, runs) in enumerate(trees):
        for site in dict.fromkeys(r.site for r in runs):
            newest = max(r.date for r in runs if r.site == site)
            found.setdefault(site, []).append((i, newest))
    labels = {}
    for site, seen in found.items():
        if len(seen) == 1:
            labels[seen[0][0], site] = site
            continue
        for width in (10, 16, None):
            stamps = [d[:width].replace("T", " ") if width else "" for _, d in seen]
            if width is None or len(set(stamps)) == len(stamps):
                break
        for (i, _), stamp in zip(seen, stamps, strict=True):
            labels[i, site] = f"{site}@{stamp or trees[i][0]}"
    return labels


def tree_name(path: Path) -> str:
    """The name of a results tree: its workflow directory's (``path`` or its ``results``)."""
    root = results_root(path).resolve()
    return root.parent.name if root.name == "results" else root.name


def tree_site(runs: Sequence[SiteRun], default: str) -> str:
    """The site of a results tree: that of all its runs, else ``default`` (its name)."""
    sites = {r.site for r in runs}
    return sites.pop() if len(sites) == 1 else default


#: The columns of a tree's ``report/skipped.csv`` (the report's ``SKIPPED_COLUMNS``).
SKIPPED_FILE = Path("report") / "skipped.csv"


def find_skipped(path: Path, site: str) -> list[dict[str, Any]]:
    """The runs a results tree's workflow skipped (its ``report/skipped.csv``; none when the
    file is absent), each named ``site/run`` and with its ``site``."""
    file = results_root(path) / SKIPPED_FILE
    if not file.is_file():
        return []
    try:
        with open(file, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise CompareError(f"{file}: cannot be read as CSV: {exc}") from None
    if rows and not {"run", "reason"} <= rows[0].keys():
        raise CompareError(f"{file}: no run and reason columns: not a clusterbench skipped.csv")
    return [{**row, "run": f"{site}/{row['run']}", "site": site} for row in rows]


@dataclass
class Loaded:
    """Every tree's finished runs (with the report's view of each, named ``site/run``, its
    site set), the runs that did not finish (``site/run``, why) and the skipped runs."""

    runs: list[SiteRun]
    data: list[Any]  # clusterbench.report.inputs.RunData
    pending: list[tuple[str, str]]
    skipped: list[dict[str, Any]]
    # every tree's comm results (report.inputs.load_comm's rows), their sites labelled
    comm: list[Any] = dataclasses.field(default_factory=list)


def load_all(dirs: Sequence[Path]) -> Loaded:
    """Read every tree: its runs as the report reads them, each named and sited as the
    comparison names it (an older run.json: the tree's directory is its site; a site of
    several trees: dated, :func:`dated_sites`)."""
    from clusterbench.report.inputs import load_run

    loaded = Loaded([], [], [], [])
    found = [(path, find_runs(path)) for path in dirs]
    labels = dated_sites([(tree_name(path), runs) for path, (runs, _) in found])
    for i, (path, (runs, pending)) in enumerate(found):
        site = tree_site(runs, tree_name(path))
        runs = [dataclasses.replace(r, site=labels[i, r.site]) for r in runs]
        pending = [
            (f"{labels.get((i, site), site)}/{label.split('/', 1)[1]}", why)
            for label, why in pending
        ]
        for run in runs:
            try:
                data = load_run(run.run_dir, run.eval_dir)
            except (OSError, ValueError) as exc:
                raise CompareError(f"{run.label}: {exc}") from None
            info = {**data.info, "site": run.site}
            loaded.runs.append(run)
            loaded.data.append(dataclasses.replace(data, name=run.label, info=info))
        loaded.pending += pending
        loaded.skipped += find_skipped(path, labels.get((i, site), site))
        loaded.comm.append(tree_comm(path, lambda s, i=i: labels.get((i, s), s)))
    return loaded


def tree_comm(path: Path, label: Callable[[str], str]) -> Any:
    """A tree's comm results (``comm/*/comm.json``: :func:`clusterbench.report.inputs.
    load_comm`), each row's site as the comparison labels that tree's runs of it (``label``:
    a site of several trees is dated), so that each run meets its own tree's interconnect."""
    from clusterbench.report.inputs import load_comm

    try:
        comm = load_comm(sorted(results_root(path).glob("comm/*/comm.json")))
    except (OSError, ValueError) as exc:
        raise CompareError(str(exc)) from None
    return comm.assign(site=comm["site"].map(label))


def match_key(config: dict[str, Any]) -> str:
    """What must be equal for two runs to be compared: the training slice without the name."""
    return canonical_json(
        {k: setting(config, k) for k in MATCH_KEYS if k in config or k in LATER_TRAIN_KEYS}
    )


def setting(config: dict[str, Any], key: str) -> Any:
    """A training key of run.json's ``run``; a later key an older run.json lacks: its default."""
    return config[key] if key in config else LATER_TRAIN_DEFAULTS.get(key)


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in MATCH_KEYS if setting(a, k) != setting(b, k))


def match_runs(runs: Sequence[SiteRun]) -> tuple[list[list[SiteRun]], list[tuple[SiteRun, str]]]:
    """Groups of runs with equal training settings on at least two sites (one run per site:
    the first found), and every other run with the reason it is not compared."""
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        twice = sorted({x for x in labels if labels.count(x) > 1})
        raise CompareError(
            f"runs given twice (the same site and run name in two directories): {twice}; "
            "give each cluster's results once, or set a distinct `site` in each config"
        )
    by_key: dict[str, list[SiteRun]] = {}
    for run in runs:
        by_key.setdefault(match_key(run.config), []).append(run)
    groups, unmatched = [], []
    for members in by_key.values():
        per_site: dict[str, SiteRun] = {}
        for run in members:
            if run.site in per_site:
                unmatched.append(
                    (run, f"same settings as {per_site[run.site].name} on the same site")
                )
            else:
                per_site[run.site] = run
        if len(per_site) >= 2:
            groups.append(list(per_site.values()))
        else:
            for run in per_site.values():
                unmatched.append((run, _why_alone(run, runs)))
    return groups, unmatched


def _why_alone(run: SiteRun, runs: Iterable[SiteRun]) -> str:
    namesakes = [r for r in runs if r.name == run.name and r.site != run.site]
    if not namesakes:
        return "no run with these training settings on another site"
    other = namesakes[0]
    keys = differing_keys(run.config, other.config)
    return f"differs from {other.label} in {', '.join(keys)}"


def site_table(groups: Sequence[Sequence[SiteRun]], runs_df: Any) -> Any:
    """One row per matched run and site: time per epoch (mean, sd, epochs timed), images/s,
    and both as a ratio to the group's first site; ``throughput`` in ``unit``: images/s, a
    language model's tokens/s. ``runs_df``: the report's runs table with ``run`` =
    :attr:`SiteRun.label`."""
    import pandas as pd

    by_label = runs_df.set_index("run")
    rows = []
    for group in groups:
        first = by_label.loc[group[0].label]
        for run in group:
            r = by_label.loc[run.label]
            rows.append(
                {
                    "benchmark": group[0].name,
                    "site": run.site,
                    "run": run.label,
                    "workers": int(r["workers"]),
                    "nodes": int(r["nodes"]),
                    "mean_epoch_seconds": float(r["mean_epoch_seconds"]),
                    "std_epoch_seconds": float(r["std_epoch_seconds"]),
                    "timed_epochs": int(r["timed_epochs"]),
                    "images_per_second": float(r["images_per_second"]),
                    "epoch_seconds_vs_first_site": float(
                        r["mean_epoch_seconds"] / first["mean_epoch_seconds"]
                    ),
                    "images_per_second_vs_first_site": float(
                        r["images_per_second"] / first["images_per_second"]
                    ),
                    "accuracy": float(r["accuracy"]),
                    **site_throughput(r),
                }
            )
    return pd.DataFrame(rows)


def site_throughput(r: Any) -> dict[str, Any]:
    """A run's throughput in its unit: tokens/s for a language model, else images/s."""
    tokens = r.get("task") == "language-model"
    rate = float(r["tokens_per_second" if tokens else "images_per_second"])
    return {"throughput": rate, "unit": "tokens/s" if tokens else "images/s"}


def comm_site_table(comm: Any) -> Any:
    """The comm stage's results side by side: one row per environment and backend (job name),
    operation, message size and site, for the jobs measured on at least two sites; time per
    operation, bus bandwidth, and the bus bandwidth as a ratio to the first site's."""
    import pandas as pd

    columns = ["name", "backend", "op", "bytes", "site", "time_s", "busbw_gbps"]
    if comm.empty:
        return pd.DataFrame(columns=[*columns, "busbw_vs_first_site"])
    shared = comm.groupby("name")["site"].transform("nunique") > 1
    table = comm.loc[shared, columns]
    first = table.groupby(["name", "op", "bytes"], sort=False)["busbw_gbps"].transform("first")
    return table.assign(busbw_vs_first_site=table["busbw_gbps"] / first).reset_index(drop=True)


def compare(dirs: Sequence[Path], output: Path, title: str | None, warmup: int) -> int:
    """Compare the trees ``dirs``: ``compare.csv``, ``compare-runs.csv`` and the PDF
    ``output``; returns 0."""
    import pandas as pd

    from clusterbench.core import provenance
    from clusterbench.report import compare as compare_report
    from clusterbench.report import tables
    from clusterbench.report.inputs import ReportParams, load_comm

    loaded = load_all(dirs)
    warmup_problems(loaded.data, warmup)
    found = [frame for frame in loaded.comm if not frame.empty]
    comm = pd.concat(found, ignore_index=True) if found else load_comm([])
    sites = list(dict.fromkeys(r.site for r in loaded.runs))
    groups, unmatched = match_runs(loaded.runs)
    runs_df = tables.runs_table(loaded.data, warmup)
    epochs_df = tables.epochs_table(loaded.data, warmup)
    table = site_table(groups, runs_df)
    not_compared = [(r.label, why) for r, why in unmatched] + loaded.pending
    output.parent.mkdir(parents=True, exist_ok=True)
    outputs = (
        ("compare", table),
        ("compare-runs", runs_df),
        ("compare-comm", comm_site_table(comm)),
    )
    for name, df in outputs:
        with atomic_open(output.with_name(f"{name}.csv"), newline="") as fh:
            df.to_csv(fh, index=False)
    title = title or f"clusterbench: {', '.join(sites)} compared"
    params = ReportParams(title, "", "compare", warmup)
    n_pages = compare_report.write_comparison(
        output,
        compare_report.Comparison(
            params, provenance.collect(), loaded.data, runs_df, epochs_df, comm
        ),
        compare_report.Sites(sites, table, not_compared, loaded.skipped),
    )
    print(
        f"compare: {len(loaded.runs)} runs on {len(sites)} sites ({', '.join(sites)}), "
        f"{len(groups)} matched, {len(not_compared)} not, {len(loaded.skipped)} skipped; "
        f"{n_pages} pages -> {output}",
        file=sys.stderr,
    )
    return 0


def warmup_problems(data: Sequence[Any], warmup: int) -> None:
    """``--warmup-epochs`` that leaves a run no timed epoch: a :class:`CompareError` when it
    leaves none to any run (every figure would be empty), a warning naming the runs when it
    leaves none to some (their figures are empty, the report says why)."""
    epochs = {run.name: len(run.epochs) for run in data}
    short = sorted(name for name, n in epochs.items() if n <= warmup)
    if not short:
        return
    low, high = min(epochs.values()), max(epochs.values())
    had = f"{low}" if low == high else f"{low} to {high}"
    if len(short) == len(epochs):
        raise CompareError(
            f"--warmup-epochs {warmup} leaves no timed epoch: the runs have {had} epoch(s); "
            f"give --warmup-epochs below {high}"
        )
    print(
        f"clusterbench-compare: warning: --warmup-epochs {warmup} leaves {len(short)} run(s) "
        f"no timed epoch (their times are left empty): {', '.join(short)}",
        file=sys.stderr,
    )


def output_problem(output: Path) -> str | None:
    """Why the PDF ``output`` (and the CSV files beside it) cannot be written, checked before
    any work: a folder in its place, or a folder that cannot be made or written (a read-only
    file system). Makes and removes a temporary file in the nearest existing folder; nothing
    is left behind. None when it can be written."""
    output = Path(os.path.abspath(output))
    if output.is_dir():
        return f"-o {output}: a directory; give the PDF file to write (e.g. {output}/compare.pdf)"
    existing = output.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"-o {output}: {existing} is a file, not a folder"
    why = cannot_make_in(existing)
    if why:
        made = "written" if existing == output.parent else "created"
        return f"-o {output}: its folder cannot be {made} ({existing}: {why})"
    if output.exists() and not os.access(output, os.W_OK):
        return f"-o {output}: exists and cannot be written by this user"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="clusterbench-compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="results trees")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the PDF to write")
    parser.add_argument("--title", default=None, help="the report's title")
    parser.add_argument(
        "--warmup-epochs",
        type=int,
        default=schema_default("report", "timing_warmup_epochs"),
        help="epochs left out of the timing (default: the report's timing_warmup_epochs, "
        "%(default)s)",
    )
    args = parser.parse_args(argv)
    if len(args.dirs) < 2:
        parser.error("give at least two results trees to compare")
    if args.warmup_epochs < 0:
        parser.error(f"--warmup-epochs must be 0 or more, got {args.warmup_epochs}")
    try:  # a ~user or $VARIABLE the shell left as it was (quoted, or no such user)
        args.output = Path(expand(str(args.output), "-o"))
    except PathError as exc:
        parser.error(str(exc))
    problem = output_problem(args.output)
    if problem:
        parser.error(problem)
    try:
        return compare(args.dirs, args.output, args.title, args.warmup_epochs)
    except CompareError as exc:
        print(f"clusterbench-compare: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the outputs could not be written after all (the disk filled)
        print(
            f"clusterbench-compare: error: writing {exc.filename or args.output}: "
            f"{exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
