"""config/README.md documents every setting the schema defines, with the schema's default.

Each ``## `key` ...`` section documents the top-level setting ``key``: its tables of ``| key |
default | meaning |`` (or ``| key | meaning |``, for keys without a default) list exactly the
keys of that setting's object, each once, with the schema's default (``–``: none); a setting
without keys (``site``) says ``Default `<value>``` in its text. Under ``run_defaults`` and
``runs``, each table lists exactly the run keys of one slice (the schema's ``x-slice``): adding
a run key is the schema's line and one row in its slice's table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from clusterbench import config as cb

README = Path(__file__).resolve().parent.parent / "config" / "README.md"
SCHEMA = yaml.safe_load(cb.SCHEMA_PATH.read_text(encoding="utf-8"))
DEFS = SCHEMA["$defs"]
NO_DEFAULT = "–"


def sections(text: str) -> dict[str, str]:
    """``## `` heading -> the text under it (its ``###`` subsections included)."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def key_tables(body: str) -> list[dict[str, str | None]]:
    """Each table of ``body`` whose first column is ``key``: key -> its default cell (None: the
    table has no default column)."""
    tables = []
    for block in re.findall(r"(?:^\|.*\|\n)+", body, flags=re.M):
        rows = [
            [c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()
        ]
        header, *rest = rows
        if header[0] != "key":
            continue
        keys = [row[0].strip("`") for row in rest[1:]]  # rest[0]: the |---| line
        assert len(set(keys)) == len(keys), f"a key listed twice in {keys}"
        has_default = len(header) > 1 and header[1] == "default"
        tables.append({row[0].strip("`"): row[1] if has_default else None for row in rest[1:]})
    return tables


def object_of(node: dict) -> dict | None:
    """The schema object whose ``properties`` a setting's keys are (None: a plain value)."""
    while "properties" not in node:
        if "$ref" in node:
            node = DEFS[node["$ref"].removeprefix("#/$defs/")]
        elif "allOf" in node:
            node = node["allOf"][0]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif node.get("type") == "array":
            node = node["items"]
        else:
            return None
    return node


def documented(heading: str) -> str:
    """The top-level setting a README heading documents: its first `name`."""
    match = re.match(r"`(\w+)`", heading)
    return match.group(1) if match else ""


SECTIONS = sections(README.read_text(encoding="utf-8"))
SETTINGS = {
    documented(h): body for h, body in SECTIONS.items() if documented(h) in SCHEMA["properties"]
}


def test_every_top_level_setting_has_a_section():
    headings = " ".join(SECTIONS)
    missing = [key for key in SCHEMA["properties"] if f"`{key}`" not in headings]
    assert not missing, f"config/README.md has no '## `key`' section for {missing}"


def check_default(where: str, cell: str | None, schema: dict) -> None:
    if cell is None:  # a table without defaults: for keys that have none
        assert "default" not in schema, f"{where}: give its default ({schema['default']!r})"
        return
    if cell == NO_DEFAULT:
        assert "default" not in schema, f"{where}: the schema's default is {schema['default']!r}"
        return
    assert "default" in schema, f"{where}: README says {cell}, the schema has no default"
    written = yaml.safe_load(cell.strip("`"))
    same = written == schema["default"] and isinstance(written, bool) == isinstance(
        schema["default"], bool
    )
    assert same, f"{where}: README says {cell}, the schema's default is {schema['default']!r}"


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_each_sections_tables_list_the_settings_keys_with_their_defaults(setting):
    obj = object_of(SCHEMA["properties"][setting])
    tables = key_tables(SETTINGS[setting])
    if obj is None:  # a plain value: its default in the text
        default = yaml.safe_dump(SCHEMA["properties"][setting]["default"]).split("\n")[0]
        assert not tables and f"Default `{default}`" in SETTINGS[setting], setting
        return
    rows = [(key, cell) for table in tables for key, cell in table.items()]
    keys = [key for key, _ in rows]
    assert sorted(keys) == sorted(obj["properties"]), (
        f"config/README.md, '{setting}': the tables list {sorted(keys)}, the schema defines "
        f"{sorted(obj['properties'])}"
    )
    for key, cell in rows:
        check_default(f"config/README.md, {setting}.{key}", cell, obj["properties"][key])


def test_each_run_key_table_is_one_slice():
    run_keys = DEFS["run_settings"]["properties"]
    for table in key_tables(SETTINGS["run_defaults"]):
        slices = {run_keys[key]["x-slice"] for key in table}
        assert len(slices) == 1, f"one table mixes the slices {slices}: {sorted(table)}"
        (name,) = slices
        expected = [k for k, sub in run_keys.items() if sub["x-slice"] == name]
        assert sorted(table) == sorted(expected), f"the {name} table: {sorted(table)}"


def test_the_rerun_table_names_every_run_key_that_reruns_nothing():
    row = next(line for line in README.read_text().splitlines() if "a run's `" in line)
    named = re.findall(r"`(\w+)`", row.split("a run's", 1)[1])
    assert sorted(named) == sorted(cb.RESOURCE_KEYS + cb.WORKFLOW_KEYS)


def test_the_slices_are_the_schemas_tags():
    run_keys = DEFS["run_settings"]["properties"]
    by_tag = {
        name: tuple(k for k, sub in run_keys.items() if sub["x-slice"] == name)
        for name in ("train", "job", "workflow")
    }
    assert (cb.TRAIN_KEYS, cb.RESOURCE_KEYS, cb.WORKFLOW_KEYS) == tuple(by_tag.values())
    assert sorted(cb.TRAIN_KEYS + cb.RESOURCE_KEYS + cb.WORKFLOW_KEYS) == sorted(run_keys)
    assert cb.LATER_TRAIN_KEYS == tuple(
        k for k in cb.TRAIN_KEYS if run_keys[k].get("x-added-later")
    )
