"""The report as a list of pages (clusterbench.report.pages, an extension point): a page is
added by one new module and nothing else; the captions Snakemake's HTML report shows are the
pages' own (the package's structure, the report's included: tests/test_architecture.py)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clusterbench.core.registry import Registry
from clusterbench.report import pages
from conftest import copy_checkout
from test_report import CONFIG_HASH, PAGE, PARAMS, make_fake_results, pdf_text

#: A page module as a new page would be written: its place, its page, its caption.
TOY_PAGE = '''"""A toy page: the fastest runs, drawn from the context alone."""

from clusterbench.report.context import Context

ORDER = 95  # after the time per epoch (90), before the throughput (100)


def draw(ctx: Context) -> None:
    book = ctx.book
    fastest = ctx.runs_df.sort_values("images_per_second", ascending=False)
    fig = book.new(
        f"Toy page: {len(ctx.runs_df)} runs",
        f"Toy caption: the fastest is {fastest['run'].iloc[0]}; best on validation "
        f"{ctx.runs_df['run'].iloc[0]}; {ctx.warmup} warm-up epoch(s); "
        f"{len(ctx.bench)} benchmark records.",
        png="toy",
    )
    ax = fig.add_subplot()
    ax.barh(book.order, [fastest.set_index("run").loc[n, "images_per_second"] for n in book.order],
            color=[book.colors[n] for n in book.order])
'''


def report_args(fake: dict, out: Path) -> list[str]:
    argv = ["--params", json.dumps(PARAMS), "--config-hash", CONFIG_HASH]
    argv += ["--run-dirs", *fake["run_dirs"], "--eval-dirs", *fake["eval_dirs"]]
    return [*argv, "--benchmarks", *fake["benchmarks"], "--out-dir", str(out)]


def render_caption(template: str, figure: str | None) -> str:
    """A caption as Snakemake's HTML report renders it (snakemake.report): a Jinja template
    given ``snakemake`` (the figure's pattern wildcards), then reStructuredText -> HTML; as
    plain text."""
    import jinja2
    from docutils.core import publish_parts
    from snakemake.iocontainers import Wildcards

    class Snakemake:
        wildcards = Wildcards(fromdict={"name": figure}) if figure else Wildcards()

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as snakemake.report's
    rst = env.from_string(template).render(snakemake=Snakemake)
    body = publish_parts(rst, writer="html")["body"]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow  # a whole report rendered, from a copy of the checkout (several seconds)
def test_a_page_is_added_by_one_new_module(tmp_path: Path):
    """The proof: one new module in the copy's clusterbench/report/pages/, nothing else
    edited, and the report stage run from the copy has the page in its place (by ORDER), its
    figure and its caption in the HTML report's captions."""
    checkout = copy_checkout(tmp_path / "checkout")
    module = checkout / "workflow" / "clusterbench" / "report" / "pages" / "toy.py"
    module.write_text(TOY_PAGE)
    fake = make_fake_results(tmp_path / "tree")
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, str(checkout / "scripts" / "report.py"), *report_args(fake, out)],
        env={**os.environ, "PYTHONPATH": str(checkout / "workflow")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(PAGE) + 1} pages" in proc.stdout

    texts = [one_line(p) for p in pdf_text(out / "report.pdf").split("\f")]
    toy = PAGE["epoch_time"] + 1
    assert texts[toy].startswith("Toy page: 5 runs Toy caption: the fastest is digits-4w-2n; ")
    assert "best on validation mnist-2w; 1 warm-up epoch(s); 14 benchmark records." in texts[toy]
    assert texts[toy - 1].startswith("Time per epoch")
    assert texts[toy + 1].startswith("Throughput")
    assert texts[-2].startswith("Snakemake jobs")  # the last page ([-1]: after the last \f)
    assert (out / "figures" / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    captions = (out / "captions.rst").read_text(encoding="utf-8")
    caption = render_caption(captions, "toy")
    assert caption.startswith("Toy page: 5 runs \u2014 Toy caption: the fastest is digits-4w-2n;")
    contents = render_caption(captions, None)
    assert f"page {toy + 1}: Toy page: 5 runs" in contents


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_each_figure_has_its_pages_caption_literally(tmp_path: Path):
    """captions.rst, rendered as Snakemake renders a caption: every figure gets its page's
    title, caption and note, report.pdf the list of its pages; user text with reStructuredText
    and Jinja markup in it is shown as it is."""
    name = "*x* _y_ `z` {{ a }} {% endraw %}"
    specs = [
        {"name": "plain-1w", "dataset": "digits", "workers": 1, "nodes": 1, "ips": 900, "acc": 0.9},
        {"name": name, "dataset": "digits", "workers": 2, "nodes": 1, "ips": 1600, "acc": 0.99},
    ]
    fake = make_fake_results(tmp_path, runs=specs, epochs=3)
    out = tmp_path / "report"
    from clusterbench.report import main

    assert main(report_args(fake, out)) == 0
    captions = (out / "captions.rst").read_text(encoding="utf-8")
    texts = [one_line(p) for p in pdf_text(out / "report.pdf").split("\f")]
    figures = sorted(p.stem for p in (out / "figures").glob("*.png"))
    assert len(figures) == 8
    for figure in figures:
        caption = render_caption(captions, figure)
        title = caption.split(" \u2014 ")[0]
        page = next(t for t in texts if t.startswith(title))
        # the caption is the page's text (the PDF wraps and hyphenates nothing of it)
        assert caption.split(" \u2014 ", 1)[1][:60] in page, figure
    best = render_caption(captions, "confusion_best")
    assert best.startswith(f"Confusion matrix of the best run: {name} \u2014 ")
    contents = render_caption(captions, None)
    assert contents.startswith("The complete benchmark report (A4 landscape PDF, 12 pages)")
    assert "page 1: the title page: recommendation, summary and provenance" in contents
    assert f"page 11: Confusion matrix of the best run: {name}" in contents
    assert render_caption(captions, "no-such-figure") == ""


def test_page_modules_are_ordered_and_a_bad_one_is_named(tmp_path: Path, monkeypatch):
    """The report's pages in their documented order; a page module whose ORDER is no number,
    or that has no draw, is an error naming it."""
    assert [name for _, name, _ in pages.ordered()] == [
        "title", "recommendation", "results", "skipped", "environments", "sweep", "repeats",
        "runs_table", "provenance", "datasets", "data_loading", "epoch_time", "throughput",
        "time_breakdown", "shares", "history", "scaling", "interconnect", "predicted_scaling",
        "world_size", "one_clock", "backends", "curves", "evaluations", "language_models",
        "confusion", "benchmarks",
    ]  # fmt: skip
    extra = (15, "sites", lambda ctx: None)
    assert [name for _, name, _ in pages.ordered([extra])][:4] == [
        "title", "recommendation", "sites", "results",
    ]  # fmt: skip

    def registry_of(package: str, module: str) -> Registry:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "late.py").write_text(module)
        return Registry(package, "report page", underscores=True)

    monkeypatch.syspath_prepend(str(tmp_path))
    bad_order = registry_of("toypages", "ORDER = 'last'\ndef draw(ctx):\n    pass\n")
    monkeypatch.setattr(pages, "PAGES", bad_order)
    with pytest.raises(TypeError, match=r"report page 'late' \(toypages\.late\): ORDER must be"):
        pages.ordered()
    monkeypatch.setattr(pages, "PAGES", registry_of("toypages2", "ORDER = 5\n"))
    with pytest.raises(AttributeError, match=r"report page plugin 'late' .* defines no 'draw'"):
        pages.ordered()
    for name in [m for m in sys.modules if m.startswith("toypages")]:
        del sys.modules[name]


def test_a_thousand_class_confusion_page_is_an_image_and_names_the_worst_classes(tmp_path):
    """ImageNet's 1,000 classes: the matrix is one image, not a million vector cells (the page
    was 16 MB and took a minute), and the scores are those of the 30 classes of lowest F1."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    import pandas as pd
    import seaborn as sns
    from clusterbench.report.pages import confusion
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    k = 1000
    names = [f"n{i:08d}" for i in range(k)]
    counts = np.diag(np.full(k, 5)) + np.eye(k, k=1, dtype=int)  # every class once mistaken
    cm = pd.DataFrame(counts, index=names, columns=names)
    f1 = np.linspace(1.0, 0.5, k)  # the last classes the worst
    per_class = pd.DataFrame({"class": names, "precision": f1, "recall": f1, "f1": f1})
    fig = Figure(figsize=(11.7, 8.3))
    heat_ax, dot_ax = fig.subplots(1, 2, width_ratios=[1.45, 1])
    confusion.confusion_heatmap(type("Book", (), {"sns": sns})(), heat_ax, cm)
    confusion.class_scores(dot_ax, per_class, cm.index)
    with PdfPages(tmp_path / "page.pdf") as pdf:
        pdf.savefig(fig)
    assert (tmp_path / "page.pdf").stat().st_size < 1_000_000
    shown = [t.get_text() for t in dot_ax.get_yticklabels()]
    assert shown == names[::-1][: confusion.MANY_CLASSES]  # lowest F1 first
    assert dot_ax.get_ylabel() == "True class, lowest F1 first"
