"""The captions of Snakemake's HTML report (``snakemake --report``), written by the report
stage beside the PDF as ``captions.rst`` from the pages it drew: a figure's caption is its
page's (title, caption and note, as the PDF prints them), report.pdf's lists its pages. So a
new page's figure is shown with its caption without any file naming it.

The rule registers every figure and report.pdf with this one file as their caption. Snakemake
renders a caption as a Jinja template, with a figure's name (``figures/{name}.png``) in
``snakemake.wildcards.name``; the file picks the caption by that name (report.pdf has none).
Every text is reStructuredText-escaped (:func:`~clusterbench.report.text.rst_literal`: titles
and run names are user text) and kept out of Jinja's reach in ``{% raw %}`` blocks.
"""

from __future__ import annotations

import re

from clusterbench.report.book import Page
from clusterbench.report.text import rst_literal

#: The end of a title of a page of a family: ' (2 of 3)'.
PART_OF = re.compile(r" \(\d+ of \d+\)$")


def figure_caption(page: Page) -> str:
    """The caption of ``page``'s figure, as reStructuredText: its title (bold), then its
    caption and note."""
    title = f"**{rst_literal(page.title)}**"
    text = rst_literal(" ".join(filter(None, [page.caption, page.note])))
    return f"{title} \u2014 {text}" if text else title


def contents(pages: list[Page]) -> list[str]:
    """The pages of the PDF, one line each as 'pages 2-3: Results, best first': a family of
    pages (one title, numbered '(k of n)') on one line."""
    groups: list[tuple[int, int, str]] = []  # first page, last page, what
    for number, page in enumerate(pages, start=1):
        what = page.contents or PART_OF.sub("", page.title)
        if groups and groups[-1][2] == what and groups[-1][1] == number - 1:
            groups[-1] = (groups[-1][0], number, what)
        else:
            groups.append((number, number, what))
    return [
        f"page {first}: {what}" if first == last else f"pages {first}-{last}: {what}"
        for first, last, what in groups
    ]


def pdf_caption(pages: list[Page]) -> str:
    """The caption of report.pdf, as reStructuredText: what it is and its pages."""
    lines = "\n".join(f"- {rst_literal(line)}" for line in contents(pages))
    return (
        f"The complete benchmark report (A4 landscape PDF, {len(pages)} pages), every page "
        "footed with the title, config hash and the commit of the report's code. The figures "
        "shown here are its pages' figures, with the same captions. Its pages:\n\n" + lines
    )


def raw(text: str) -> str:
    """``text`` in a Jinja ``{% raw %}`` block (its escaped braces can never close it)."""
    return "{% raw %}\n" + text + "\n{% endraw %}\n"


def jinja_string(name: str) -> str:
    """``name`` as a Jinja string literal."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def captions_template(pages: list[Page]) -> str:
    """The caption file: report.pdf's caption where no figure is named, else the caption of
    the named figure's page."""
    branches = ["{% if snakemake.wildcards.name is not defined %}\n" + raw(pdf_caption(pages))]
    for page in pages:
        if page.png:
            test = f"snakemake.wildcards.name == {jinja_string(page.png)}"
            branches.append(f"{{% elif {test} %}}\n" + raw(figure_caption(page)))
    return "".join(branches) + "{% endif %}\n"
