"""Reading a config file (clusterbench.config.files): what yaml.safe_load reads, with keys given
twice, oversized input and values that hold themselves refused, naming the line."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clusterbench import config as cb
from clusterbench.config import files as cf
from test_bad_input import expected_message

REPO = Path(__file__).resolve().parent.parent
CDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

DOCUMENTS = [
    "base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\n",
    "a: &a [1, 2]\nb: &b {x: 1}\nc: [*a, *b]\nd:\n  <<: [*b, {x: 2, y: 3}]\n  z: 0\n",
    "d:\n  z: 0\n  <<: [{x: 2, y: 3}, {y: 4, w: 5}]\n",
    "s: !!str 001\nf: !!float 1\nd: 2024-01-02\nt: 2024-01-02 10:00:00\nn: ~\ne: ''\nq: '1'\n",
    "inf: -.inf\nhex: 0x1f\noct: 0o17\nb: yes\nbin: !!binary aGVsbG8=\nx: 1e-3\ny: 1.0e-3\n",
    "",
    "# only a comment\n",
    "---\na: 1\n...\n",
    "[1, 2, {a: b}]",
    "key: |\n  text\n  more\nother: >-\n  folded\n  text\n",
    "1: a\n'1': b\n",
    "? a\n: 1\n",
    '{"json": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "anchor: &x 5\nsame: *x\n",
]


def repository_yaml() -> list[Path]:
    folders = ("config", "profiles", "workflow/schemas", "tests/bad_configs")
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.yaml"))


@pytest.mark.parametrize("text", DOCUMENTS)
def test_reads_what_safe_load_reads(text):
    assert repr(cf.read(text)) == repr(yaml.safe_load(text))


def test_reads_every_yaml_file_of_the_repository_as_safe_load_does():
    files = repository_yaml()
    assert len(files) > 100
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        try:
            expected = yaml.safe_load(text)
        except (yaml.YAMLError, ValueError, RecursionError):  # a date that is none; deep
            with pytest.raises((yaml.YAMLError, cf.ReadError)):
                cf.read(text)
            continue
        try:
            assert repr(cf.read(text)) == repr(expected), path
        except cf.ReadError as exc:  # only a bad config, with the message it expects
            message = f"config/config.yaml, line {exc.line}: {exc}"
            assert re.search(expected_message(path), message), (path, message)


def test_nan_is_read_as_nan():
    assert math.isnan(cf.read("x: .nan\n")["x"])


@pytest.mark.parametrize(
    "text, message, line",
    [
        (
            "runs:\n  - name: a\n    epochs: 1\n    epochs: 3\n",
            r"runs\[0\]\.epochs is given twice \(lines 3 and 4\)",
            4,
        ),
        ("runs: []\nreport: {title: t}\nruns: [1]\n", r"^runs is given twice \(lines 1 and 3\)", 3),
        ("a: {x: 1, y: 2, x: 3}\n", r"a\.x is given twice \(lines 1 and 1\)", 1),
        ('{"runs": [],\n\t"runs": [1]}', r"runs is given twice \(lines 1 and 2\)", 2),
        ("b: &b {x: 1}\na:\n  <<: *b\n  <<: *b\n", r"a\.'<<' is given twice", 4),
        ("a: 1\n1: 2\n1.0: 3\n", r"1\.0 is given twice \(lines 2 and 3\)", 3),
    ],
)
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(text, message, line):
    with pytest.raises(cf.ReadError, match=message) as caught:
        cf.read(text)
    assert caught.value.line == line


def test_a_key_a_merge_gives_too_is_no_duplicate():
    assert cf.read("b: &b {x: 1, y: 2}\na:\n  <<: *b\n  x: 3\n")["a"] == {"x": 3, "y": 2}


@pytest.mark.parametrize(
    "text, message, line",
    [
        ("a: &a [1, *a]\n", r"\*a stands inside the value its anchor &a marks", 1),
        ("a: *x\n", r"\*x: no anchor &x before it", 1),
        ("a: 1\n---\nb: 2\n", r"a second YAML document", 2),
        ("x: 1\nd: 2024-13-01\n", r"YAML reads '2024-13-01' as a timestamp.*quote it", 2),
        ("a: [<<]\n", r"'<<' \(YAML's merge key\) stands for a value; quote it", 1),
        ("a:\n  <<: [1]\n", r"a: '<<' merges a mapping or a list of mappings", 2),
        ("? [1]\n: 2\n", r"a key must be a single value, not a list", 1),
    ],
)
def test_what_yaml_would_read_oddly_is_refused_naming_the_line(text, message, line):
    with pytest.raises(cf.ReadError, match=message) as caught:
        cf.read(text)
    assert caught.value.line == line


@pytest.mark.slow  # about 5 s: validating 10,000 runs
def test_the_limits_are_generous_for_a_10000_run_config(tmp_path):
    """10,000 runs, every run key written out: read and valid, within every limit with at
    least a quarter of it to spare (each new run key takes about 1 % of the values' limit)."""
    keys = cb.load_schema()["$defs"]["run_settings"]["properties"]
    run = {key: sub.get("default") for key, sub in keys.items()}
    runs = [{**run, "name": f"run-{i:05d}", "dataset": "digits"} for i in range(10_000)]
    path = tmp_path / "config.yaml"
    with open(path, "w") as fh:
        yaml.dump({"runs": runs, "report": {"title": "t"}}, fh, Dumper=CDumper, sort_keys=False)
    assert path.stat().st_size < cf.MAX_BYTES * 0.75
    assert len(runs) * (1 + 2 * len(run)) < cf.MAX_VALUES * 0.75  # the values it holds
    assert len(cb.validate(cb.load_file(path))["runs"]) == 10_000


@pytest.mark.parametrize("as_json", [False, True])
def test_a_list_or_mapping_of_too_many_entries_is_refused_naming_it(as_json):
    entries = cf.MAX_ENTRIES + 1
    value = {"environments": {f"e{i}": {"workers": 1} for i in range(entries)}}
    text = (
        json.dumps(value)
        if as_json
        else "environments:\n" + "".join(f"  e{i}: {{workers: 1}}\n" for i in range(entries))
    )
    with pytest.raises(cf.ReadError, match=f"environments has more than {cf.MAX_ENTRIES} entries"):
        cf.read(text)
    with pytest.raises(cf.ReadError, match=rf"^runs\[0\] has more than {cf.MAX_ENTRIES} entries"):
        cf.read("runs:\n  - [" + "1," * entries + "]\n")


@pytest.mark.parametrize("depth", [cf.MAX_DEPTH + 1, 5000])
@pytest.mark.parametrize("as_json", [False, True])
def test_deep_nesting_is_refused(depth, as_json):
    text = "[" * depth + "]" * depth
    text = f'{{"runs": {text}}}' if as_json else f"runs: {text}"
    with pytest.raises(cf.ReadError, match=f"nested more than {cf.MAX_DEPTH} deep"):
        cf.read(text)
    cf.read(f"runs: {'[' * (cf.MAX_DEPTH - 1)}{']' * (cf.MAX_DEPTH - 1)}")  # the limit: fine


def test_deep_block_nesting_is_refused_naming_the_line():
    text = "a:\n" + "".join(" " * i + "-\n" for i in range(1, 100))
    with pytest.raises(cf.ReadError, match="nested more than") as caught:
        cf.read(text)
    assert caught.value.line == cf.MAX_DEPTH + 1


def test_an_alias_counts_as_the_values_it_repeats():
    """A billion laughs: 10 aliases of 10 aliases of ... is refused, not expanded."""
    text = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]\n"
        for i in range(8)
    )
    with pytest.raises(cf.ReadError, match=f"more than {cf.MAX_VALUES} values in all"):
        cf.read(text)


def test_too_many_values_in_all_are_refused(monkeypatch):
    monkeypatch.setattr(cf, "MAX_VALUES", 100)
    cf.read("a: [" + "1," * 97 + "]\n")  # the mapping, its key, the list and 97 entries
    cf.read(json.dumps({"a": [1] * 97}))
    with pytest.raises(cf.ReadError, match="more than 100 values in all"):
        cf.read("a: [" + "1," * 98 + "]\n")
    with pytest.raises(cf.ReadError, match="more than 100 values in all"):
        cf.read(json.dumps({"a": [1] * 98}))


def test_a_file_too_large_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "w") as fh:
        fh.write("# a comment\n" * (cf.MAX_BYTES // 12 + 1))
    with pytest.raises(
        cb.ConfigError, match=rf"big\.yaml: \d+ bytes, more than the {cf.MAX_BYTES}"
    ):
        cb.load_file(path)


def test_load_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("report: {title: t}\nruns:\n  - name: a\n    epochs: 1\n    epochs: 3\n")
    with pytest.raises(
        cb.ConfigError, match=r"c\.yaml, line 5: runs\[0\]\.epochs is given twice \(lines 4 and 5\)"
    ):
        cb.load_file(path)


def test_the_checker_refuses_a_key_given_twice(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("runs: []\nreport: {title: t}\nruns: []\n")
    proc = subprocess.run(
        [sys.executable, "-m", "clusterbench.config", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert f"{path}, line 3: runs is given twice (lines 1 and 3)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_files_reads_each_and_passes_over_a_missing_one(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("report: {title: t}\n")
    bad.write_text("report: {title: t}\nreport: {title: u}\n")
    cb.check_files([tmp_path / "missing.yaml", good])
    with pytest.raises(cb.ConfigError, match=r"bad\.yaml, line 2: report is given twice"):
        cb.check_files([good, bad])


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run_defaults={epochs: 2}"], {"epochs": 2, "lr": 0.1}),
        (["run_defaults={lr: 1.0e-3, deterministic: true}"], {"lr": 0.001, "deterministic": True}),
        (["report={title: '2024'}"], None),  # quoted: stays text
        (["site=x"], None),  # a plain value: Snakemake's own typing
    ],
)
def test_config_args_lists_and_mappings_are_read_as_yaml(args, expected):
    """What Snakemake's --config gave (nested values as text), merged as Snakemake merges."""
    config = {"run_defaults": {"epochs": "2", "lr": 0.1}, "report": {"title": "2024"}, "site": "x"}
    if args[0].startswith("run_defaults") and "lr" in args[0]:
        config["run_defaults"] = {"epochs": 5, "lr": "1.0e-3", "deterministic": "true"}
        expected = {"epochs": 5, **expected}
    resolved = cb.with_config_args(config, args)
    if expected is None:
        assert resolved == config
    else:
        assert resolved["run_defaults"] == expected
    assert config["run_defaults"] != resolved["run_defaults"] or expected is None  # no mutation


def test_config_args_with_a_key_given_twice_are_refused():
    with pytest.raises(
        cb.ConfigError, match=r"--config run_defaults=\.\.\.: epochs is given twice"
    ):
        cb.with_config_args({}, ["run_defaults={epochs: 1, epochs: 2}"])
