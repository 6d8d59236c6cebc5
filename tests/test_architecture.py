"""The package's structure, held to docs/ARCHITECTURE.md's list of its layers ("The package,
layer by layer"): every module listed, in one layer; no import up the layers, no circle between
the parts of a layer nor between modules; no function over 80 lines. Imports inside functions
count as much as those at the top of a module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "workflow" / "clusterbench"
DOC = REPO / "docs" / "ARCHITECTURE.md"
HEADING = "## The package, layer by layer"


def documented_layers(text: str) -> dict[str, int]:
    """Module file (relative to the package) -> its layer, from the first code block after
    :data:`HEADING` in ``text``: ``layer N  words`` lines, then the layer's ``  path.py  words``
    lines."""
    after = text.split(HEADING, 1)[1]
    block = after.split("```", 2)[1]
    layers: dict[str, int] = {}
    layer = None
    for line in block.splitlines():
        if match := re.match(r"^layer (\d+)\s", line):
            layer = int(match.group(1))
        elif match := re.match(r"^  (\S+\.py)(\s|$)", line):
            assert layer is not None, f"{line!r} comes before any layer"
            assert match.group(1) not in layers, f"{match.group(1)} is listed twice"
            layers[match.group(1)] = layer
        elif line.strip():
            raise AssertionError(f"{DOC}: not a layer or module line: {line!r}")
    return layers


def module_name(relative: str) -> str:
    parts = Path(relative).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("clusterbench", *parts))


def part_of(relative: str) -> str:
    """The part a module belongs to: its top folder, or itself at the package's top level."""
    parts = Path(relative).parts
    return parts[0] if len(parts) > 1 else Path(relative).stem


def package_files() -> set[str]:
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports, anywhere in it: ``from a.b import c`` is
    ``a.b.c`` where that is a module, else ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        found |= {t for t in targets if t in modules}
    return found


@pytest.fixture(scope="module")
def layout() -> tuple[dict[str, int], dict[str, set[str]], dict[str, str]]:
    """(module -> layer, module -> the modules it imports, module -> file)."""
    listed = documented_layers(DOC.read_text(encoding="utf-8"))
    files = {module_name(f): f for f in package_files()}
    layer = {module_name(f): n for f, n in listed.items()}
    graph = {name: imports(PACKAGE / f, set(files)) - {name} for name, f in files.items()}
    return layer, graph, files


def test_the_documented_list_is_the_package():
    listed = set(documented_layers(DOC.read_text(encoding="utf-8")))
    assert len(listed) > 150  # the list is read
    assert sorted(package_files() - listed) == [], "modules docs/ARCHITECTURE.md does not list"
    assert sorted(listed - package_files()) == [], "listed modules that do not exist"


def test_no_import_runs_up_the_layers(layout):
    layer, graph, files = layout
    assert "clusterbench.config.schema" in graph["clusterbench.config.validate"]  # it sees
    upward = sorted(
        f"{files[a]} (layer {layer[a]}) imports {files[b]} (layer {layer[b]})"
        for a, deps in graph.items()
        for b in deps
        if layer[b] > layer[a]
    )
    assert upward == []


def test_the_config_is_a_foundation(layout):
    """config imports the core and the extension points' registries, nothing above them."""
    layer, graph, files = layout
    config = {
        m for m in graph if m == "clusterbench.config" or m.startswith("clusterbench.config.")
    }
    above = sorted(
        f"{files[a]} imports {files[b]}"
        for a in config
        for b in graph[a]
        if b not in config and layer[b] >= layer["clusterbench.config"]
    )
    assert above == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules(layout):
    _, graph, _ = layout
    assert cycles(graph) == []


def test_no_cycle_between_the_parts_of_a_layer(layout):
    """The parts of one layer (its folders and top-level modules) may import each other, but
    not in a circle: within a layer, too, one part stands on the other."""
    layer, graph, files = layout
    parts: dict[str, set[str]] = {}
    for a, deps in graph.items():
        pa = part_of(files[a])
        parts.setdefault(pa, set())
        parts[pa] |= {part_of(files[b]) for b in deps if layer[b] == layer[a]} - {pa}
    assert cycles(parts) == []


def test_no_function_over_80_lines():
    lengths = {
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert len(lengths) > 1000  # every module is read
    assert {f: n for f, n in lengths.items() if n > 80} == {}


def private_imports(path: Path) -> list[str]:
    """The underscored names ``path`` imports from other modules (``from m import _x``)."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clusterbench")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_no_module_imports_another_modules_private_name():
    found = {
        str(path.relative_to(PACKAGE)): names
        for path in PACKAGE.rglob("*.py")
        if (names := private_imports(path))
    }
    assert found == {}


def test_an_upward_import_is_seen(tmp_path):
    """The checks see an import inside a function, by module and by name."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from clusterbench.report import tables\n    import x\n")
    modules = {"clusterbench.report", "clusterbench.report.tables"}
    assert imports(source, modules) == {"clusterbench.report.tables"}
    source.write_text("from clusterbench.config.schema import _x, y\n")
    assert private_imports(source) == ["clusterbench.config.schema._x"]
