"""``clusterbench-history``: the throughput of a history store over time, per site,
environment and workload, and the regressions.

```
clusterbench-history [PATH] [--last N] [--fail-on-regression]
```

``PATH`` defaults to the ``history.path`` of ``config/config.yaml`` in the working directory
(``~`` and ``$VARIABLES`` expanded; relative to the working directory), else the schema's
default (``results/history.sqlite``). The store is opened read-only: reading it while a
workflow appends is safe, and a store other users write can be read by anyone who may read it.

For each site, environment and workload, each configuration's points (one workflow run's runs
of it each) are listed oldest first with their mean images/s (a language model's: tokens/s),
standard error, runs, timed
epochs and status under the regression rule (:mod:`clusterbench.history.regression`); then
every series whose newest point is a regression, with what changed in provenance since its
last good entry. Exit status 0; 1 with ``--fail-on-regression`` when a newest point is a
regression (for a cron job); 2 when the store cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from clusterbench.core.paths import PathError, expand
from clusterbench.history import regression, store

#: The config file whose history.path is the default store (relative to the working directory).
CONFIG_FILE = Path("config") / "config.yaml"


def default_path(config_file: Path = CONFIG_FILE) -> Path:
    """``history.path`` of ``config_file`` where it has one, else the schema's default."""
    from clusterbench.config import ConfigError, load_file, schema_default

    path = schema_default("history", "path")
    if config_file.is_file():
        try:
            settings = load_file(config_file).get("history") or {}
        except ConfigError as exc:
            raise store.HistoryError(f"{config_file}: {exc}") from None
        if isinstance(settings, dict) and isinstance(settings.get("path"), str):
            path = settings["path"]
    try:
        return Path(expand(path, "history.path"))
    except PathError as exc:
        raise store.HistoryError(f"{config_file}: {exc}") from None


def status_text(row) -> str:
    """A point's status in words, a regression's with its change and threshold."""
    words = {
        "first": "first",
        "ok": f"ok ({row.change:+.1%})",
        "faster": f"faster ({row.change:+.1%}, beyond the noise)",
        "unjudged": "noise unknown",
    }
    if row.status != "regression":
        return words[row.status]
    return (
        f"REGRESSION ({row.change:+.1%} vs {row.ref_mean:,.0f}, threshold {row.threshold:,.0f}); "
        f"changed: {row.changed}"
    )


def series_lines(pts: pd.DataFrame, last: int) -> list[str]:
    """The points of every series, grouped by site, environment and workload."""
    lines = []
    for (site, environment, workload), panel in pts.groupby(
        ["site", "environment", "workload"], sort=False, dropna=False
    ):
        lines += ["", f"{site or 'no site'} \u00b7 {environment} \u00b7 {workload}"]
        for config, part in panel.groupby("config", sort=False):
            shown = part.tail(last)
            lines.append(
                f"  {config}" + (f" (last {last} of {len(part)})" if last < len(part) else "")
            )
            unit = part["unit"].iloc[0]  # images/s, a language model's tokens/s
            lines.append(f"    {'date':<17} {unit:>10} {'SE':>8} {'runs':>5} {'epochs':>6}  status")
            for row in shown.itertuples(index=False):
                se = f"{row.se:,.1f}" if pd.notna(row.se) else "n/a"
                lines.append(
                    f"    {row.date[:16].replace('T', ' '):<17} {row.mean:>10,.1f} {se:>8} "
                    f"{row.n_runs:>5} {row.epochs:>6}  {status_text(row)}"
                )
    return lines


def report(path: Path, last: int) -> tuple[list[str], int]:
    """The lines printed for the store at ``path``, and the number of regressed series."""
    rows = store.read_runs(path)
    pts = regression.points(regression.entries_frame(rows))
    appends = len({r["append_id"] for r in rows})
    dates = sorted(r["date"] for r in rows)
    lines = [
        f"history store {path}: {len(rows)} run(s) in {appends} append(s)"
        + (f", trained {dates[0][:10]} .. {dates[-1][:10]}" if dates else ""),
        f"rule: {regression.RULE}",
        *series_lines(pts, last),
    ]
    flagged = regression.newest_regressions(pts)
    lines += ["", f"regressions (newest points): {len(flagged)}"]
    for row in flagged.itertuples(index=False):
        lines.append(
            f"  {regression.series_name(row)}: {row.mean:,.0f} "
            f"{row.unit} on {row.date[:10]}, {-row.change:.1%} below {row.ref_mean:,.0f}; changed "
            f"since the last good entry: {row.changed}"
        )
    return lines, len(flagged)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="clusterbench-history", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="the history store (default: history.path of config/config.yaml here)",
    )
    parser.add_argument("--last", type=int, default=10, help="points per series (default 10)")
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when the newest point of a series is a regression",
    )
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}")
    try:
        path = Path(expand(str(args.path), "PATH")) if args.path else default_path()
        lines, flagged = report(path, args.last)
    except (store.HistoryError, PathError) as exc:
        print(f"clusterbench-history: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 1 if flagged and args.fail_on_regression else 0


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
