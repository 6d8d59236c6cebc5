"""The user guide holds together: every link and anchor in README.md, config/README.md, docs/
and benchmarks/README.md resolves, and every config key the pages name exists in the schema.

A key is recognised three ways: a dotted path in backticks whose first part is a top-level key
(`staging.dir`, `datasets.<name>.path`); a YAML block whose top-level keys are config keys (every
key of it, at any depth, must be in the schema: `runs` entries against a run's settings); and a
`key: value` in backticks whose key is a run setting's shape (snake_case), checked against every
key the schema has anywhere, beside the scheduler resources and profile keys the pages also name.

docs/report.md's list of the report's pages is the page modules of report/pages/, in the
report's order.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterbench.config.schema import load_schema

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        REPO / "README.md",
        REPO / "config" / "README.md",
        REPO / "benchmarks" / "README.md",
        *(REPO / "docs").glob("*.md"),
    ]
)

#: ``[text](target)``, not an image's ``![..](..)`` alt text alone (its target is checked too)
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^([a-z_]+)((?:\.(?:[a-z_0-9]+|<[a-z_]+>))+)$")
KEY_VALUE = re.compile(r"^([a-z]+(?:_[a-z0-9]+)+|[a-z]+): \S")

#: names in ``key: value`` spans that are no config keys: Snakemake resources and profile keys,
#: settings of the schedulers' own files, Python and YAML seen in prose
NOT_CONFIG = {
    # Snakemake resources the profiles and --set-resources set
    "mem_mb",
    "runtime",
    "slurm_partition",
    "slurm_account",
    "slurm_extra",
    "sge_pe",
    "sge_extra",
    "sge_export_env",
    "sge_queue",
    # the train rule's resources that place worker jobs (rules/train.smk)
    "grow_slurm_partition",
    "grow_qos",
    "grow_sge_queue",
    "constraint",
    "tasks",
    "cpus_per_task",
    # profile keys, settings of Slurm/SGE files
    "precommand",
    "retries",
    "jobs",
    "executor",
    "default",
    "allocation_rule",
    "control_slaves",
    "job_is_first_task",
    "consumable",
    "requestable",
    "slots",
    # prose
    "name",
    "e",
    "i",
    "python",
    "http",
    "https",
    "file",
    "note",
    "type",
    "enum",
    # fields of the stages' records (manifests, run.json)
    "stored",
}

#: spans that name files, not keys (`comm.csv`, `report.pdf`)
FILE_SUFFIXES = {"csv", "json", "jsonl", "py", "md", "yaml", "pdf", "png", "npz", "npy", "sqlite"}
PACKAGE = REPO / "workflow" / "clusterbench"


def text_outside_code(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def code_blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """``(first line number, info string, body)`` of every fenced code block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = FENCE.match(lines[i].strip())
        if start:
            info = lines[i].strip()[3:].strip()
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(start.group(1)):
                body.append(lines[j])
                j += 1
            yield i + 1, info, "\n".join(body)
            i = j
        i += 1


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but ``-`` and
    ``_`` removed, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_]{2,}", "", text).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings make (a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in text_outside_code(page.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> Iterator[tuple[int, str]]:
    for number, line in text_outside_code(page.read_text()):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def link_problem(page: Path, target: str, root: Path = REPO) -> str | None:
    """What is wrong with a link of ``page`` to ``target`` (None: it resolves inside
    ``root``)."""
    if re.match(r"^[a-z]+:", target):  # https:, mailto: ... (no network here)
        return None
    path_part, _, anchor = target.partition("#")
    dest = (page.parent / path_part).resolve() if path_part else page
    if not dest.is_relative_to(root):
        return f"{target}: leaves the repository"
    if not dest.exists():
        return f"{target}: {dest.relative_to(root)} does not exist"
    if anchor:
        if dest.suffix != ".md":
            return f"{target}: an anchor into {dest.name}, which is no Markdown page"
        if anchor not in anchors(dest):
            return f"{target}: {dest.relative_to(root)} has no heading with anchor #{anchor}"
    return None


# ---------------------------------------------------------------------------------- the schema


SCHEMA = load_schema()


def resolve(node: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in node:
        *_, name = node["$ref"].split("/")
        node = {**SCHEMA["$defs"][name], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def branches(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    node = resolve(node)
    yield node
    for combiner in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(combiner, ()):
            yield from branches(sub)
    if "items" in node and isinstance(node["items"], Mapping):
        yield from branches(node["items"])


def child(node: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The schema of key ``name`` under ``node`` (``<...>`` a name the user chooses); None when
    no branch has it."""
    for branch in branches(node):
        if name in branch.get("properties", {}):
            return branch["properties"][name]
        for pattern, sub in branch.get("patternProperties", {}).items():
            if name.startswith("<") or re.search(pattern, name):
                return sub
        extra = branch.get("additionalProperties")
        if isinstance(extra, Mapping) and (name.startswith("<") or not branch.get("properties")):
            return extra
    return None


def all_keys(node: Mapping[str, Any], seen: set[int] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    keys: set[str] = set()
    for branch in branches(node):
        if id(branch) in seen:
            continue
        seen.add(id(branch))
        for name, sub in branch.get("properties", {}).items():
            keys.add(name)
            keys |= all_keys(sub, seen)
        for sub in branch.get("patternProperties", {}).values():
            keys |= all_keys(sub, seen)
        if isinstance(branch.get("additionalProperties"), Mapping):
            keys |= all_keys(branch["additionalProperties"], seen)
    return keys


KEYS = all_keys(SCHEMA)
for definition in SCHEMA["$defs"].values():
    KEYS |= all_keys(definition)
TOP = set(SCHEMA["properties"])


def code_reference(path: str) -> bool:
    """Whether a dotted span names the package's code (`history.store.append`,
    `comm.bus_factor`: a module and a name it defines, or a submodule), or a file."""
    first, second, *_ = path.split(".")
    if second in FILE_SUFFIXES:
        return True
    modules = [*PACKAGE.rglob(f"{first}.py"), *PACKAGE.rglob(f"{first}/*.py")]
    if any(m.stem == second for m in modules if m.parent.name == first):
        return True
    defined = re.compile(rf"^\s*(?:def|class)\s+{second}\b|^{second}\s*[:=]", re.M)
    return any(defined.search(m.read_text()) for m in modules)


def path_problem(path: str) -> str | None:
    node: Mapping[str, Any] | None = SCHEMA
    parts = path.split(".")
    for i, part in enumerate(parts):
        node = child(node, part) if node is not None else None
        if node is None:
            return f"`{path}`: the schema has no key {'.'.join(parts[: i + 1])}"
    return None


def yaml_problems(value: Any, node: Mapping[str, Any], where: str) -> Iterator[str]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from yaml_problems(item, node, f"{where}[{i}]")
    elif isinstance(value, Mapping):
        if not any(b.get("properties") or b.get("additionalProperties") for b in branches(node)):
            return  # a free-form value (a mapping the schema does not describe)
        for key, sub in value.items():
            found = child(node, str(key))
            if found is None:
                yield f"{where}.{key}".lstrip(".") + ": no such key in the schema"
            else:
                yield from yaml_problems(sub, found, f"{where}.{key}")


def config_blocks(page: Path) -> Iterator[tuple[int, Any]]:
    """The YAML blocks of a page that are configs (top-level keys all config keys)."""
    for number, info, body in code_blocks(page.read_text()):
        if info not in ("yaml", "yml"):
            continue
        try:
            value = yaml.safe_load(body)
        except yaml.YAMLError:
            continue  # a fragment with ... elisions
        if isinstance(value, Mapping) and value and set(map(str, value)) <= TOP:
            yield number, value


def key_mentions(page: Path) -> Iterator[tuple[int, str, str]]:
    """``(line, kind, text)`` of every config key a page's prose names in backticks."""
    for number, line in text_outside_code(page.read_text()):
        for span in CODE_SPAN.findall(line):
            span = span.strip()
            dotted = DOTTED.match(span)
            if dotted and dotted.group(1) in TOP:
                yield number, "path", span
                continue
            kv = KEY_VALUE.match(span)
            if kv:
                yield number, "key", kv.group(1)


# ---------------------------------------------------------------------------------- the tests


def rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def test_the_guide_has_its_pages():
    """What the README's guide links to is there, and every docs page is reachable from it."""
    readme = REPO / "README.md"
    linked = {
        (readme.parent / target.partition("#")[0]).resolve()
        for _, target in links(readme)
        if not re.match(r"^[a-z]+:", target) and target.partition("#")[0]
    }
    for page in (REPO / "docs").glob("*.md"):
        reached = page.resolve() in linked or any(
            page.resolve() == (other.parent / t.partition("#")[0]).resolve()
            for other in (REPO / "docs").glob("*.md")
            if other.resolve() in linked
            for _, t in links(other)
            if t.partition("#")[0]
        )
        assert reached, (
            f"docs/{page.name} is linked neither from README.md nor from a page it links"
        )


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_link_and_anchor_resolves(page):
    problems = [
        f"{rel(page)}:{number}: {problem}"
        for number, target in links(page)
        if (problem := link_problem(page, target))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_config_key_named_exists_in_the_schema(page):
    problems = []
    for number, kind, text in key_mentions(page):
        if kind == "path":
            problem = None if code_reference(text) else path_problem(text)
        else:
            problem = (
                None
                if text in KEYS or text in NOT_CONFIG
                else f"`{text}: ...`: no key {text} in the schema"
            )
        if problem:
            problems.append(f"{rel(page)}:{number}: {problem}")
    for number, value in config_blocks(page):
        problems += [f"{rel(page)}:{number} (yaml): {p}" for p in yaml_problems(value, SCHEMA, "")]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------- report pages


REPORT_PAGE = REPO / "docs" / "report.md"
PAGES_DIR = PACKAGE / "report" / "pages"
PAGES_HEADING = "## The report's pages"


def page_modules(folder: Path = PAGES_DIR) -> list[str]:
    """The report's page modules in the report's order (``ORDER``, then name, as
    :func:`clusterbench.report.pages.ordered` draws them), each ``ORDER`` read from its source:
    a page module imports matplotlib, this test does not."""
    found = []
    for path in folder.glob("*.py"):
        if path.name.startswith("_"):
            continue  # the package itself, and helpers: the registry skips them too
        orders = [
            node.value.value
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["ORDER"]
            and isinstance(node.value, ast.Constant)
        ]
        assert len(orders) == 1, f"{path}: no literal ORDER = <number> at its top level"
        found.append((orders[0], path.stem))
    return [name for _, name in sorted(found)]


def listed_pages(text: str) -> list[str]:
    """The page modules a page lists: the second cell (a module in backticks) of each row of
    the table under :data:`PAGES_HEADING`, in order."""
    section = text.split(PAGES_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [m.group(1) for row in rows if (m := re.match(r"^\|[^|]*\|\s*`(\w+)`\s*\|", row))]


def page_list_problems(listed: list[str], modules: list[str]) -> list[str]:
    problems = [
        f"page module {m}: not in docs/report.md's list" for m in modules if m not in listed
    ]
    problems += [
        f"{m}: listed in docs/report.md, no page module" for m in listed if m not in modules
    ]
    if not problems and listed != modules:
        problems.append(f"docs/report.md lists the pages out of the report's order: {modules}")
    return problems


def test_report_md_lists_every_page_in_order():
    """docs/report.md's page list is the report's pages: a page added to the report and not to
    the list, or listed and gone, or out of order, fails here."""
    modules = page_modules()
    assert len(modules) >= 20  # the pages are read
    assert page_list_problems(listed_pages(REPORT_PAGE.read_text()), modules) == []


# ---------------------------------------------------------------------------------- the checker


def test_the_checker_finds_what_it_is_for(tmp_path):
    """A broken link, a missing anchor, an unknown key (dotted, key: value, in YAML) are found;
    their good forms are not."""
    page = tmp_path / "p.md"
    (tmp_path / "other.md").write_text(
        "# A `code` heading, with punctuation!\n## Twice\n## Twice\n"
    )
    page.write_text("# Top\n")
    assert link_problem(page, "other.md#a-code-heading-with-punctuation", tmp_path) is None
    assert link_problem(page, "other.md#twice-1", tmp_path) is None
    assert "no heading" in link_problem(page, "other.md#twice-2", tmp_path)
    assert "does not exist" in link_problem(page, "missing.md", tmp_path)
    assert link_problem(page, "#top", tmp_path) is None
    assert "no heading" in link_problem(page, "#bottom", tmp_path)
    assert "leaves" in link_problem(page, "../x.md", tmp_path)
    assert code_reference("comm.bus_factor") and code_reference("history.store.append")
    assert code_reference("runs.csv") and not code_reference("comm.max_bytez")
    assert path_problem("staging.dir") is None
    assert path_problem("datasets.<name>.path") is None
    assert path_problem("history.nope") is not None
    assert path_problem("datasets.<name>.nope") is not None
    page.write_text(
        "`comm.max_bytes` and `comm.nope`, `lr_schedule: cosine`, `lr_shedule: cosine`\n"
        "```yaml\nruns:\n  - {name: a, dataset: digits, model: resnet, workerz: 2}\n```\n"
    )
    mentions = list(key_mentions(page))
    assert (1, "path", "comm.nope") in mentions and (1, "key", "lr_shedule") in mentions
    assert "lr_shedule" not in KEYS and "lr_schedule" in KEYS
    ((number, value),) = config_blocks(page)
    assert list(yaml_problems(value, SCHEMA, "")) == ["runs[0].workerz: no such key in the schema"]


def test_the_page_list_check_finds_what_it_is_for(tmp_path):
    """A page module missing from the list, a listed page that is gone and a list out of order
    are each found; page modules are read in ORDER, then name."""
    for name, order in (("title", 10), ("b", 20), ("a", 20), ("_helper", 1)):
        (tmp_path / f"{name}.py").write_text(f'"""A page."""\n\nORDER = {order}\n')
    (tmp_path / "__init__.py").write_text("")
    modules = page_modules(tmp_path)
    assert modules == ["title", "a", "b"]
    text = f"# R\n\n{PAGES_HEADING}\n\n| page | module |\n|---|---|\n| t | `title` |\n| a | `a` |\n"
    assert listed_pages(text + "\n## Next\n\n| x | `b` |\n") == ["title", "a"]
    assert page_list_problems(["title", "a"], modules) == [
        "page module b: not in docs/report.md's list"
    ]
    assert page_list_problems(["title", "a", "b", "gone"], modules) == [
        "gone: listed in docs/report.md, no page module"
    ]
    assert "out of the report's order" in page_list_problems(["a", "title", "b"], modules)[0]
    assert page_list_problems(modules, modules) == []
