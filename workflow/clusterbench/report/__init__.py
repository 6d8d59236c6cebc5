"""Stage 5: tables and a multi-page PDF report of all runs.

```
python scripts/report.py \
    --params '{"title": ..., "author": ..., "timing_warmup_epochs": 1}' --config-hash HASH \
    --run-dirs results/runs/A ... --eval-dirs results/eval/A ... \
    --benchmarks results/benchmarks/**/*.tsv [--history results/history/series.csv] \
    [--comm results/comm/JOB/comm.json ...] [--watch results/watch/RUN/watch.json ...] \
    --out-dir results/report
```

Reads, per run, ``run.json`` + ``metrics.jsonl`` (train stage) and ``metrics.json`` +
``confusion.csv`` + ``per_class.csv`` (evaluate stage), paired by directory name, plus the
comm stage's ``comm.json`` files (the interconnect of each environment and backend) and the
Snakemake ``benchmark:`` TSV files (``results/benchmarks/{rule}/{job}.tsv``). Writes
``runs.csv`` (one row per run, sorted by accuracy), ``results.csv`` (the answer, best first on
validation), ``epochs.csv`` (one row per run and epoch), ``benchmarks.csv`` (one row per
benchmark record), ``skipped.csv``, ``scaling_model.csv`` (each multi-worker run's step time,
predicted and measured: :mod:`~clusterbench.report.scaling_model`), ``figures/*.png``,
``captions.rst`` (the figures' captions for Snakemake's HTML report,
:mod:`~clusterbench.report.captions`) and, last, ``report.pdf`` (A4 landscape): the pages of
the page modules of :mod:`clusterbench.report.pages`, in their order (that package's docstring
lists them; docs/report.md shows each, and ``tests/test_docs.py`` holds it to the modules). Every
page and every PNG figure carries the same footer
(:func:`~clusterbench.report.book.footer_text`: title, config hash, commit of the report's
code).

Provenance is the training's, not the report's: each run's ``run.json`` holds what its ranks saw
where they ran (``provenance``: hosts and their ranks, CPU, GPUs and NVIDIA driver, git commit,
package versions). The provenance page has one row per run and marks the values in which a run
differs from the others (also ``provenance_differs`` in runs.csv). A ``run.json`` written before
provenance was recorded is accepted: its hardware and commit are reported as unknown (its
``versions`` and ``world.hosts`` were recorded by rank 0 and are used). The report's own host
appears only as where the report was generated.

Timing is honest: the first ``timing_warmup_epochs`` epochs of every run (start-up, caches,
compilation) are left out of its epoch time and throughput, which are mean and sample standard
deviation over the remaining ("timed") epochs; a run with no timed epoch gets NaN ("n/a") and
the report says why. A run's speed-up is measured against the fastest 1-worker run with the same
dataset, model, global batch, device, backend and BN mode, never against any other run.

All inputs are read and checked before anything is written; a missing or malformed required
file is an error naming that file. Missing benchmark files are not: the section says so. A
run's ``metrics.jsonl`` must hold epochs 1, 2, ..., N, each once and in order, and N must be
``run.json``'s ``epochs_completed`` (a cut or edited file is refused, with the command that
trains the run again).

Text from the config and the data files (title, author, run, dataset and class names, hosts)
is drawn literally: a ``$`` is a dollar sign, never mathtext
(:func:`clusterbench.report.theme.theme`), and an invisible or control character is written
out as ``<U+200B>`` (:func:`clusterbench.report.theme.shown`). Installed fonts of wide
coverage back up the report's own (:data:`~clusterbench.report.theme.FALLBACK_FONTS`);
characters that no font here can draw are named on stderr (the rule's log), per text, and
drawn as boxes.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from clusterbench.config import (
    ConfigError,
    bad_settings,
)
from clusterbench.core import provenance
from clusterbench.core.atomic import atomic_open, atomic_path
from clusterbench.core.interrupted import one_line
from clusterbench.records.runs import pair_dirs
from clusterbench.report import theme
from clusterbench.report.book import (
    Page,
    footer_text,
    pdf_metadata,
    stamp_footers,
    write_pdf,
)
from clusterbench.report.captions import captions_template
from clusterbench.report.context import Context
from clusterbench.report.inputs import (
    PROVENANCE_VERSIONS,
    SKIPPED_COLUMNS,
    ReportParams,
    RunData,
    expand_benchmark_args,
    load_benchmarks,
    load_comm,
    load_datasets,
    load_history,
    load_run,
    load_watch,
    parse_params,
    parse_skipped,
)
from clusterbench.report.pages import build
from clusterbench.report.tables import epochs_table, results_table, runs_table
from clusterbench.report.text import plural
from clusterbench.report.theme import drawable_codepoints, fonts_used, glyph_warnings


def user_texts(
    params: ReportParams,
    runs_df: pd.DataFrame,
    runs: list[RunData],
    bench: pd.DataFrame,
    bench_missing: list[str],
) -> list[tuple[str, str]]:
    """Every text the report draws that comes from the config or the data files, as (what it
    is, in words; the text), each distinct text once: title, author, run names, what the runs
    trained on and where, the class names of the best run (its confusion page), benchmark job
    names."""
    texts = {params.title: "the title", params.author: "the author"}

    def add(what: str, values: Any) -> None:
        for value in map(str, values):
            texts.setdefault(value, f"{what} {value!r}")

    add("the run name", runs_df["run"])
    for what, cols in (
        ("the dataset name", ("dataset",)),
        ("the model name", ("model",)),
        ("the backend name", ("backend", "bn", "scheduler")),
        ("the training host", ("host_ranks",)),
        ("the training CPU", ("cpu_model",)),
        ("the training GPUs", ("gpus",)),
        ("the GPU driver", ("gpu_driver",)),
        ("the software version", (*PROVENANCE_VERSIONS, "commit")),
        ("the rank differences", ("rank_differences",)),
    ):
        add(what, (v for col in cols for v in runs_df[col]))
    images = runs_df[runs_df["task"] != "language-model"]  # the confusion page's best run
    if not images.empty:
        best = next(r for r in runs if r.name == images["run"].iloc[0])
        add(f"the class name (of run {best.name})", best.confusion.index)
    add("the benchmark rule", bench["rule"])
    add("the benchmark job", bench["job"])
    add("the benchmark argument", bench_missing)
    return [(what, theme.shown(text)) for text, what in texts.items()]


def write_tables(out_dir: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Each table as ``<name>.csv`` in ``out_dir``."""
    for name, df in tables.items():
        with atomic_open(out_dir / f"{name}.csv", newline="") as fh:
            df.to_csv(fh, index=False)


def warn_missing_glyphs(texts: list[tuple[str, str]]) -> None:
    """Name on stderr (the rule's log) the characters of ``texts`` that no font here can
    draw, once per text, and the fonts the report draws in (call inside the theme)."""
    missing = glyph_warnings(texts, drawable_codepoints())
    for line in missing:
        print(line, file=sys.stderr)
    if missing:
        print(fonts_used(), file=sys.stderr)


def write_figures(out_dir: Path, pages: list[Page], params: ReportParams, footer: str) -> None:
    """``figures/<png>.png`` of every page that has a figure, its footer also in its metadata.

    The PNG's draw lays the page out (constrained layout); the layout is then kept, not
    computed again for the PDF (:func:`keep_layout`: 0.5 s of a 12 s report of 24 pages)."""
    metadata = {"Title": theme.shown(params.title), "Description": theme.shown(footer)}
    for page in pages:
        if page.png:
            with atomic_path(out_dir / "figures" / f"{page.png}.png") as tmp:
                page.figure.savefig(tmp, format="png", metadata=metadata)
            keep_layout(page.figure)


def keep_layout(figure) -> None:
    """Keep ``figure``'s axes where its last draw's layout engine put them: later saves draw
    it as laid out. The positions are fractions of the figure, the same at any resolution."""
    if figure.get_layout_engine() is not None:
        figure.set_layout_engine("none")


def write_outputs(
    out_dir: Path,
    params: ReportParams,
    prov: dict[str, Any],
    runs: list[RunData],
    bench: pd.DataFrame,
    bench_missing: list[str],
    skipped: Sequence[dict[str, Any]] = (),
    history: pd.DataFrame | None = None,
    comm: pd.DataFrame | None = None,
    datasets: Sequence[dict[str, Any]] = (),
    watch: dict[str, dict[str, Any]] | None = None,
) -> int:
    """Write the CSVs, the figure PNGs and, last, report.pdf; returns the PDF's page count.
    ``comm``: the comm stage's rows (:func:`~clusterbench.report.inputs.load_comm`);
    ``datasets``: the runs' datasets' records (:func:`~clusterbench.report.inputs.
    load_datasets`); ``watch``: the evaluations while training, by run
    (:func:`~clusterbench.report.inputs.load_watch`)."""
    import matplotlib

    matplotlib.use("Agg")

    runs_df = runs_table(runs, params.timing_warmup_epochs)
    epochs_df = epochs_table(runs, params.timing_warmup_epochs)
    tables = {"runs": runs_df, "results": results_table(runs_df), "epochs": epochs_df}
    write_tables(out_dir, {**tables, "benchmarks": bench})
    with theme.style(), warnings.catch_warnings():
        # matplotlib warns of each missing glyph at each save: said once per text below instead
        warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
        warn_missing_glyphs(user_texts(params, runs_df, runs, bench, bench_missing))
        ctx = Context(
            params, prov, runs, runs_df, epochs_df, bench, bench_missing, skipped, history
        )
        if comm is not None:
            ctx.comm = comm
        ctx.datasets = list(datasets)
        ctx.watch = dict(watch or {})
        write_tables(out_dir, {"scaling_model": ctx.scaling_model})
        pages = build(ctx)
        footer = footer_text(params, prov)
        stamp_footers(pages, footer)
        write_figures(out_dir, pages, params, footer)
        with atomic_open(out_dir / "captions.rst", encoding="utf-8") as fh:
            fh.write(captions_template(pages))
        write_pdf(pages, out_dir / "report.pdf", pdf_metadata(params, prov))
    return len(pages)


def write_skipped(path: Path, skipped: list[dict[str, Any]]) -> None:
    """skipped.csv (:data:`SKIPPED_COLUMNS`; a header alone when nothing was skipped)."""
    import csv

    with atomic_open(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(SKIPPED_COLUMNS)
        for entry in skipped:
            writer.writerow(["" if entry.get(k) is None else entry[k] for k in SKIPPED_COLUMNS])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The stage's command line (the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--params", required=True, help='the report settings: {"title", "author", ...}'
    )
    parser.add_argument("--config-hash", required=True, help="hash of the config (provenance)")
    parser.add_argument("--run-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--eval-dirs", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument(
        "--benchmarks",
        nargs="*",
        default=[],
        metavar="TSV",
        help="benchmark files, directories or glob patterns",
    )
    parser.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="CSV",
        help="the history of these runs' series (results/history/series.csv, the history step)",
    )
    parser.add_argument(
        "--comm",
        type=Path,
        nargs="*",
        default=[],
        metavar="JSON",
        help="the comm stage's results (results/comm/NAME/comm.json)",
    )
    parser.add_argument(
        "--datasets",
        type=Path,
        nargs="*",
        default=[],
        metavar="JSON",
        help="the runs' preprocessed datasets (results/data/NAME/meta.json)",
    )
    parser.add_argument(
        "--watch",
        type=Path,
        nargs="*",
        default=[],
        metavar="JSON",
        help="the evaluations while training (results/watch/RUN/watch.json, the watch stage)",
    )
    parser.add_argument("--out-dir", type=Path, required=True, help="results/report")
    parser.add_argument(
        "--skipped",
        default="[]",
        help="the runs skipped where the workflow ran: a JSON list of "
        '{"run", "experiment", "environment", "point", "reason"} (-> skipped.csv)',
    )
    return parser.parse_args(argv)


@one_line("report")
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        params = parse_params(args.params, args.config_hash)
        skipped = parse_skipped(args.skipped)
    except ConfigError as exc:
        return bad_settings("report", exc)
    runs = [
        load_run(run_dir, eval_dir)
        for run_dir, eval_dir in pair_dirs(args.run_dirs, args.eval_dirs)
    ]
    bench_files, bench_missing = expand_benchmark_args(args.benchmarks)
    bench = load_benchmarks(bench_files)
    history = load_history(args.history)
    comm = load_comm(args.comm)
    datasets = load_datasets(args.datasets)
    watch = load_watch(args.watch)
    prov = provenance.collect()
    write_skipped(args.out_dir / "skipped.csv", skipped)  # the PDF comes last
    n_pages = write_outputs(
        args.out_dir,
        params,
        prov,
        runs,
        bench,
        bench_missing,
        skipped,
        history,
        comm,
        datasets,
        watch,
    )
    print(
        f"report: {plural(len(runs), 'run')}, {plural(len(bench), 'benchmark record')}, "
        f"{n_pages} pages -> {args.out_dir / 'report.pdf'}"
    )
    return 0
