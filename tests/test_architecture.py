"""The package's structure, held to docs/ARCHITECTURE.md's map of its layers ("The package,
layer by layer"). The map places each part of the package in one layer: a top-level folder
(``core/``: every module under it) or a top-level module (``train.py``). A new module in a
folder needs no edit of the map; a new top-level folder or module that the map does not place
fails here, as does a part the map places that the package does not have. No import runs up the
layers, no circle between the parts of a layer nor between modules, no function over 80 lines.
Imports inside functions count as much as those at the top of a module."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "workflow" / "clusterbench"
DOC = REPO / "docs" / "ARCHITECTURE.md"
HEADING = "## The package, layer by layer"
LONGEST = 80


def documented_layers(text: str) -> dict[str, int]:
    """Part (``core/``, ``train.py``) -> its layer, from the first code block after
    :data:`HEADING` in ``text``: ``layer N  words`` lines, then the layer's ``  part  words``
    lines."""
    after = text.split(HEADING, 1)[1]
    block = after.split("```", 2)[1].partition("\n")[2]  # after the fence's info string
    layers: dict[str, int] = {}
    layer = None
    for line in block.splitlines():
        if match := re.match(r"^layer (\d+)\s", line):
            layer = int(match.group(1))
        elif match := re.match(r"^  (\w+/|\w+\.py)(\s|$)", line):
            assert layer is not None, f"{line!r} comes before any layer"
            assert match.group(1) not in layers, f"{match.group(1)} is listed twice"
            layers[match.group(1)] = layer
        elif line.strip():
            raise AssertionError(f"{DOC}: not a layer or part line: {line!r}")
    return layers


def module_name(relative: str) -> str:
    parts = Path(relative).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("clusterbench", *parts))


def part_of(relative: str) -> str:
    """The part a module belongs to, as the map names it: its top folder (``core/``), or
    itself at the package's top level (``train.py``)."""
    parts = Path(relative).parts
    return f"{parts[0]}/" if len(parts) > 1 else parts[0]


def package_files(package: Path = PACKAGE) -> set[str]:
    return {str(p.relative_to(package)) for p in package.rglob("*.py")}


def placement_problems(files: set[str], listed: dict[str, int]) -> list[str]:
    """The parts of the package that the map places in no layer, and the parts it places that
    the package does not have."""
    parts = {part_of(f) for f in files}
    return [f"{p}: in no layer of the map" for p in sorted(parts - set(listed))] + [
        f"{p}: in the map, not in the package" for p in sorted(set(listed) - parts)
    ]


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


class Layout(NamedTuple):
    layer: dict[str, int]  # module -> its layer (that of its part)
    graph: dict[str, set[str]]  # module -> the modules it imports
    files: dict[str, str]  # module -> its file, relative to the package


def read_layout(package: Path, listed: dict[str, int]) -> Layout:
    files = {module_name(f): f for f in package_files(package)}
    layer = {name: listed[part_of(f)] for name, f in files.items() if part_of(f) in listed}
    graph = {name: imports(package / f, set(files)) - {name} for name, f in files.items()}
    return Layout(layer, graph, files)


def upward_imports(layout: Layout) -> list[str]:
    layer, graph, files = layout
    return sorted(
        f"{files[a]} (layer {layer[a]}) imports {files[b]} (layer {layer[b]})"
        for a, deps in graph.items()
        for b in deps
        if a in layer and b in layer and layer[b] > layer[a]
    )


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


def part_cycles(layout: Layout) -> list[list[str]]:
    """Circles between the parts of one layer (its folders and top-level modules): they may
    import each other, but within a layer, too, one part stands on the other."""
    layer, graph, files = layout
    parts: dict[str, set[str]] = {}
    for a, deps in graph.items():
        pa = part_of(files[a])
        parts.setdefault(pa, set())
        same = {part_of(files[b]) for b in deps if b in layer and layer[b] == layer.get(a)}
        parts[pa] |= same - {pa}
    return cycles(parts)


def function_lengths(package: Path = PACKAGE) -> dict[str, int]:
    """``file:line name`` -> the length in lines of every function of the package."""
    return {
        f"{path.relative_to(package)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def private_imports(path: Path) -> list[str]:
    """The underscored names ``path`` imports from other modules (``from m import _x``)."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clusterbench")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


# ---------------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def listed() -> dict[str, int]:
    return documented_layers(DOC.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def layout(listed) -> Layout:
    return read_layout(PACKAGE, listed)


def test_the_map_places_every_part_of_the_package(listed):
    assert len(listed) > 15 and len(set(listed.values())) >= 8  # the map is read
    assert placement_problems(package_files(), listed) == []


def test_no_import_runs_up_the_layers(layout):
    assert "clusterbench.config.schema" in layout.graph["clusterbench.config.validate"]  # it sees
    assert len(layout.files) > 150  # every module is read
    assert upward_imports(layout) == []


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


def test_no_import_cycle_between_modules(layout):
    assert cycles(layout.graph) == []


def test_no_cycle_between_the_parts_of_a_layer(layout):
    assert part_cycles(layout) == []


def test_no_function_over_80_lines():
    lengths = function_lengths()
    assert len(lengths) > 1000  # every module is read
    assert {f: n for f, n in lengths.items() if n > LONGEST} == {}


def test_no_module_imports_another_modules_private_name():
    found = {
        str(path.relative_to(PACKAGE)): names
        for path in PACKAGE.rglob("*.py")
        if (names := private_imports(path))
    }
    assert found == {}


#: The one module that uses Horovod's runner (its rendezvous, its elastic driver): the launcher
#: starts every rank itself, and an install without Horovod trains DDP runs.
HOROVOD_RUNNER = "launch/horovod_runner.py"


def horovod_runner_users(package: Path) -> dict[str, list[str]]:
    """Module -> the ``horovod.runner`` modules it imports (and ``horovod`` names it
    patches: an assignment to an attribute of a module of ``horovod.runner``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        names = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "horovod.runner"
            ):
                names.append(node.module)
            elif isinstance(node, ast.ImportFrom) and node.module == "horovod":
                names += [f"horovod.{a.name}" for a in node.names if a.name == "runner"]
            elif isinstance(node, ast.Import):
                names += [a.name for a in node.names if a.name.startswith("horovod.runner")]
        if names:
            found[str(path.relative_to(package))] = names
    return found


def test_horovods_runner_is_used_in_one_module_only():
    users = horovod_runner_users(PACKAGE)
    assert set(users) == {HOROVOD_RUNNER}, users


def test_the_horovod_runner_check_sees_every_way_of_importing_it(tmp_path):
    for text in (
        "from horovod.runner.gloo_run import launch_gloo",
        "import horovod.runner.common.util.safe_shell_exec as s",
        "from horovod import runner",
        "def f():\n    from horovod.runner import gloo_run\n",
    ):
        (tmp_path / "m.py").write_text(text + "\n")
        assert list(horovod_runner_users(tmp_path)) == ["m.py"], text
    (tmp_path / "m.py").write_text("import horovod.torch as hvd\n")
    assert horovod_runner_users(tmp_path) == {}


# ---------------------------------------------------------------------------------- the checker


def test_cycles_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_an_upward_import_is_seen(tmp_path):
    """The checks see an import inside a function, by module and by name."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from clusterbench.report import tables\n    import x\n")
    modules = {"clusterbench.report", "clusterbench.report.tables"}
    assert imports(source, modules) == {"clusterbench.report.tables"}
    source.write_text("from clusterbench.config.schema import _x, y\n")
    assert private_imports(source) == ["clusterbench.config.schema._x"]


TOY_MAP = f"""{HEADING}

```
layer 1  the bottom
  __init__.py    the version
  low/           a folder
  side/          another
layer 2  the top
  high/          a folder above
  top.py         a module
  gone/          a folder the package does not have
```
"""

TOY_PACKAGE = {
    "__init__.py": "",
    "low/__init__.py": "",
    "low/a.py": "def f():\n    from clusterbench.high import b\n",  # up the layers
    "low/e.py": "from clusterbench.side import d\n",  # low/ -> side/ ...
    "low/new.py": "from clusterbench.side import d\n",  # a new module in a placed folder
    "side/d.py": "import clusterbench.low.a\n",  # ... and side/ -> low/: a circle of parts
    "high/b.py": "from clusterbench.high import c\n",  # b -> c ...
    "high/c.py": "import clusterbench.high.b\n",  # ... and c -> b: a circle of modules
    "top.py": "def long():\n" + "    x = 1\n" * LONGEST,
    "extra/__init__.py": "",  # a new folder, in no layer
}


def test_the_checker_finds_what_it_is_for(tmp_path):
    """On a toy package: an unplaced folder and a placed one that is gone, an upward import, a
    circle of modules, a circle of one layer's parts and a long function are each found; a new
    module in a placed folder is no problem."""
    for relative, text in TOY_PACKAGE.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    listed = documented_layers(TOY_MAP)
    assert listed == {"__init__.py": 1, "low/": 1, "side/": 1, "high/": 2, "top.py": 2, "gone/": 2}
    assert placement_problems(package_files(tmp_path), listed) == [
        "extra/: in no layer of the map",
        "gone/: in the map, not in the package",
    ]
    toy = read_layout(tmp_path, listed)
    assert toy.layer["clusterbench.low.new"] == 1
    assert upward_imports(toy) == ["low/a.py (layer 1) imports high/b.py (layer 2)"]
    assert cycles(toy.graph) == [["clusterbench.high.b", "clusterbench.high.c"]]
    assert part_cycles(toy) == [["low/", "side/"]]
    long = {f: n for f, n in function_lengths(tmp_path).items() if n > LONGEST}
    assert long == {"top.py:1 long": LONGEST + 1}
    with pytest.raises(AssertionError, match="not a layer or part line"):
        documented_layers(TOY_MAP.replace("  top.py", "top.py"))
