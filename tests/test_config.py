"""Config validation: schema errors name the key; defaults and slices are resolved once."""

from __future__ import annotations

import copy
import re

import pytest
from clusterbench import config as cb
from conftest import default_config


def test_default_config_is_valid_and_fully_resolved():
    cfg = cb.validate(default_config())
    names = [r["name"] for r in cfg["runs"]]
    assert len(names) >= 2
    digits = [r for r in cfg["runs"] if r["dataset"] == "digits"]
    # the demo compares worker counts and backends on otherwise identical runs: same lr and
    # global batch (the global convention), nothing else differs
    assert sorted((r["workers"], r["backend"]) for r in digits) == [
        (1, "ddp"),
        (1, "horovod"),
        (2, "ddp"),
        (2, "horovod"),
    ]
    for a in digits:
        for b in digits:
            differing = {k for k in cb.TRAIN_KEYS if a[k] != b[k]} - {"name"}
            assert differing <= {"workers", "backend"}
    assert {(r["lr"], r["batch_size"], r["batch_scaling"]) for r in digits} == {
        (0.05, 128, "global")
    }
    for run in cfg["runs"]:
        assert set(cb.TRAIN_KEYS) | set(cb.RESOURCE_KEYS) <= run.keys()
    assert cfg["evaluate"]["split"] == "test"
    assert cfg["download"]["retries"] >= 0


@pytest.mark.parametrize(
    "key, value",
    [("backend", "mpi"), ("bn", "batch"), ("batch_scaling", "auto"), ("precision", "fp16")],
)
def test_unknown_training_convention_is_rejected_naming_the_key(key, value):
    cfg = default_config()
    cfg["runs"][1][key] = value
    with pytest.raises(cb.ConfigError, match=rf"runs\[1\]\.{key}: '{value}' is not one of"):
        cb.validate(cfg)
    cfg = default_config()
    cfg["run_defaults"][key] = value
    with pytest.raises(cb.ConfigError, match=rf"run_defaults\.{key}: '{value}' is not one of"):
        cb.validate(cfg)


def test_per_worker_convention_allows_a_batch_smaller_than_the_workers():
    cfg = default_config()
    cfg["runs"][1].update(batch_scaling="per_worker", batch_size=1)  # 1 per worker: fine
    cb.validate(cfg)
    cfg["runs"][1].update(batch_scaling="global")  # a global batch of 1 for 2 workers: not
    with pytest.raises(cb.ConfigError, match=r"runs\[1\]\.batch_size"):
        cb.validate(cfg)


def test_run_defaults_and_builtin_defaults_merge():
    cfg = cb.validate(
        {
            "run_defaults": {"epochs": 3},
            "runs": [{"name": "a", "dataset": "digits", "lr": 0.1}],
            "report": {"title": "t"},
        }
    )
    (run,) = cfg["runs"]
    assert run["epochs"] == 3 and run["lr"] == 0.1
    assert run["model"] == "small_cnn" and run["workers"] == 2  # schema defaults
    assert cfg["datasets"] == {
        "digits": {
            "mirror": None,
            "urls": {},
            "val_fraction": 0.1,
            "test_fraction": 0.2,
            "split_seed": 0,
            "min_split_size": 50,
            "check": "auto",
            "storage": "arrays",  # decided by its runs (none streams it)
        }
    }


def _base():
    return {"runs": [{"name": "a", "dataset": "digits"}], "report": {"title": "t"}}


@pytest.mark.parametrize(
    "mutate, key, words",
    [
        (lambda c: c["runs"][0].update(workers=0), "runs[0].workers", "minimum"),
        (lambda c: c["runs"][0].update(model="vgg"), "runs[0].model", "vgg"),
        (lambda c: c["runs"][0].update(lr="fast"), "runs[0].lr", "fast"),
        (lambda c: c["runs"][0].update(name="bad name"), "runs[0].name", "does not match"),
        (lambda c: c["runs"][0].update(bogus=1), "runs[0]", "bogus"),
        (lambda c: c.update(typo={}), "<top level>", "typo"),
        (lambda c: c["report"].update(title=7), "report.title", "7"),
        (lambda c: c.update(datasets={"imagenet": {}}), "datasets.imagenet", "not a built-in"),
        (lambda c: c.update(evaluate={"split": "train"}), "evaluate.split", "train"),
        (lambda c: c["runs"].append({"name": "a", "dataset": "digits"}), "runs[1].name", "already"),
        (lambda c: c["runs"][0].update(dataset="mnist"), "runs[0].dataset", "not declared"),
        (lambda c: c["runs"][0].update(epochs=None), "runs[0]", "'epochs' or 'minutes'"),
        (lambda c: c["runs"][0].update(batch_size=2, workers=3), "runs[0].batch_size", "workers=3"),
        (lambda c: c["runs"][0].update(nodes=3, workers=2), "runs[0].nodes", "idle"),
        (
            lambda c: c.update(datasets={"digits": {"val_fraction": 0.5, "test_fraction": 0.5}}),
            "datasets.digits",
            "no training data",
        ),
    ],
)
def test_invalid_values_are_rejected_naming_the_key(mutate, key, words):
    cfg = _base()
    mutate(cfg)
    with pytest.raises(cb.ConfigError) as err:
        cb.validate(cfg)
    msg = str(err.value)
    assert f"  {key}:" in msg and words in msg, msg


def test_a_config_of_datasets_and_runs_alone_is_complete():
    """A user's config needs only its datasets and runs: the defaults fill the rest, the
    report's title included (README, "Your first benchmark")."""
    cfg = cb.validate({"datasets": {"digits": {}}, "runs": [{"name": "a", "dataset": "digits"}]})
    assert cfg["report"]["title"] == "clusterbench"
    assert cfg["scheduler"] == "auto" and cfg["comm"]["enabled"] is True
    assert cfg["runs"][0]["backend"] == "horovod"


def test_validate_does_not_mutate_its_input():
    cfg = _base()
    before = copy.deepcopy(cfg)
    cb.validate(cfg)
    assert cfg == before


def test_slices_hold_only_their_own_keys():
    cfg = cb.validate(default_config())
    run = cfg["runs"][0]
    train = cb.train_slice(run)
    assert set(train) == set(cb.TRAIN_KEYS)
    assert not set(train) & set(cb.RESOURCE_KEYS)  # resources never trigger a retrain
    assert cb.preprocess_slice(cfg["datasets"]["digits"]) == {
        "val_fraction": 0.1,
        "test_fraction": 0.2,
        "split_seed": 0,
        "min_split_size": 50,  # in the slice: a change reruns preprocess
    }


DECLARED = {
    "format": "npz",
    "files": [{"url": "https://example.org/s.npz", "sha256": "a" * 64}],
    "mirror": None,
    "urls": {},
    "val_fraction": 0.1,
    "test_fraction": 0.2,
    "split_seed": 0,
    "min_split_size": 50,
}
CHANGED = {  # another valid value of each dataset key
    "format": "idx",
    "files": [{"url": "https://example.org/t.npz", "sha256": "b" * 64, "name": "t.npz"}],
    "image_size": [8, 8],
    "mirror": "https://mirror/",
    "urls": {"x": "file:///x"},
    "val_fraction": 0.2,
    "test_fraction": 0.3,
    "split_seed": 7,
    "min_split_size": 10,
    "shape": [3, 8, 8],
    "classes": 3,
    "samples": 100,
    "seq_len": 16,
    "storage": "files",
    "path": "/data/x",
    "check": "files",
}


@pytest.mark.parametrize(
    "make, keys",
    [(cb.preprocess_slice, cb.PREPROCESS_KEYS), (cb.download_slice, cb.DOWNLOAD_KEYS)],
)
def test_a_dataset_slice_changes_with_exactly_the_keys_tagged_for_it(make, keys):
    """The keys of each dataset slice are the schema's x-slice tags: changing any of them
    changes the slice (a rerun), changing another leaves it as it was."""
    schema_keys = cb.load_schema()["properties"]["datasets"]["additionalProperties"]["properties"]
    assert set(CHANGED) == set(schema_keys)  # a new dataset key: give it a value above
    for key in schema_keys:
        changed = make({**DECLARED, key: CHANGED[key]}) != make(DECLARED)
        assert changed == (key in keys), key


def test_defaults_of_experiments_and_presets_are_the_schemas():
    schema = cb.load_schema()
    cfg = default_config()
    cfg["environments"] = {"mine": {"workers": 3}}
    cfg["experiments"] = {"x": {"dataset": "digits", "environments": ["mine"]}}
    resolved = cb.validate(cfg)
    assert (
        resolved["experiments"]["x"]["repeats"]
        == (schema["$defs"]["experiment"]["properties"]["repeats"]["default"])
    )
    preset = schema["$defs"]["environment"]["properties"]
    (run,) = [run for run in resolved["runs"] if run["experiment"] == "x"]
    assert (run["workers"], run["nodes"], run["gpus_per_node"]) == (
        3,
        preset["nodes"]["default"],
        preset["gpus_per_node"]["default"],
    )


def test_a_stage_takes_the_schemas_default_once():
    """The preprocess stage's min_split_size default is the dataset setting's (one line)."""
    datasets = cb.load_schema()["properties"]["datasets"]["additionalProperties"]["properties"]
    params = cb.stage_params(
        "preprocess", {"val_fraction": 0.1, "test_fraction": 0.2, "split_seed": 0}
    )
    assert params["min_split_size"] == datasets["min_split_size"]["default"]
    assert (
        cb.schema_default("report", "timing_warmup_epochs")
        == (cb.stage_params("report", {"title": "t"})["timing_warmup_epochs"])
    )


def test_an_untagged_run_key_is_an_error_of_the_schema():
    with pytest.raises(RuntimeError, match=r"run_settings\.new_key: x-slice must name one of"):
        cb.slices_of({"new_key": {"type": "integer"}}, ("train", "job"), "run_settings")


def test_config_hash_is_deterministic_and_sensitive():
    a = cb.validate(default_config())
    b = cb.validate(default_config())
    assert cb.config_hash(a) == cb.config_hash(b)
    b["download"]["retries"] += 1
    b["runs"][0]["mem_mb"] += 1
    assert cb.config_hash(a) == cb.config_hash(b)  # changes no result
    b["runs"][0]["lr"] *= 2
    assert cb.config_hash(a) != cb.config_hash(b)
    c = cb.validate(default_config())
    c["report"]["title"] = "other"
    assert cb.config_hash(a) != cb.config_hash(c)
    assert cb.canonical_json({"b": 1, "a": 2}) == '{"a":2,"b":1}'


def test_script_safe_json_is_the_same_json_with_no_character_that_can_end_a_script_block():
    import json

    from snakemake.logging import format_dict

    text = {"title": "</script><!--<script>x & y</SCRIPT>", "author": "\\<b>\u2028"}
    safe = cb.script_safe_json(text)
    assert json.loads(safe) == text
    assert not set("<>&") & set(safe)
    # text without them is written as before: an ordinary title reruns nothing
    plain = {"title": "clusterbench: digits, 1 vs 2 workers", "author": "A. N. Author"}
    assert cb.script_safe_json(plain) == cb.canonical_json(plain)
    # as Snakemake's HTML report embeds a job's params in its results block
    # (snakemake/report/html_reporter/data/results.py, FileRecord.params)
    embedded = json.dumps({"params": format_dict({"settings": safe}).replace('"', r"\"")})
    assert "<" not in embedded


def test_download_slice_maps_overrides_and_leaves_out_operational_settings(tmp_path):
    cfg = cb.validate(
        {
            "download": {"retries": 9, "cache_dir": str(tmp_path / "somewhere")},
            "datasets": {
                "mnist": {"mirror": "http://m/", "urls": {"t10k-labels-idx1-ubyte.gz": "file:///x"}}
            },
            "runs": [{"name": "a", "dataset": "mnist"}],
            "report": {"title": "t"},
        }
    )
    assert cb.download_slice(cfg["datasets"]["mnist"]) == {
        "source": {
            "mirror": "http://m/",
            "files": {"t10k-labels-idx1-ubyte.gz": {"url": "file:///x"}},
        }
    }
    assert cb.download_slice({"mirror": None, "urls": {}}) == {"source": {}}


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("run", "lr", float("nan"), r"runs\[0\]\.lr: nan is not a finite number"),
        ("run", "lr", float("inf"), r"runs\[0\]\.lr: inf is not a finite number"),
        ("run", "minutes", float("inf"), r"runs\[0\]\.minutes: inf is not a finite number"),
        ("run", "lr", "1e-3", r"runs\[0\]\.lr: .*YAML read 1e-3 as a string.*e\.g\. 1\.0e-3"),
        ("run", "model", False, r"runs\[0\]\.model: .*YAML read an unquoted yes/no"),
        ("run", "name", "r" * 101, r"runs\[0\]\.name: 'r{39}\.\.\.' \(101 characters\) is longer"),
        # the schema's own words for a value of several forms (x-hint)
        ("run", "shares", "even", r"runs\[0\]\.shares: 'even' is not auto, null, or a list of"),
        ("run", "shares", [3, 0], r"runs\[0\]\.shares: \[3, 0\] is not auto, null, or a list"),
        ("report", "title", "   ", r"report\.title: '   ' is blank"),
        ("report", "author", "x" * 301, r"report\.author: .* is longer than the limit of 300"),
    ],
)
def test_bad_values_are_named_with_how_yaml_read_them(section, key, value, message):
    cfg = default_config()
    (cfg["runs"][0] if section == "run" else cfg[section])[key] = value
    with pytest.raises(cb.ConfigError, match=message):
        cb.validate(cfg)


def test_non_finite_numbers_are_refused_in_a_stage_params_too():
    run = cb.train_slice(cb.validate(default_config())["runs"][0])
    with pytest.raises(cb.ConfigError, match=r"--run\.lr: nan is not a finite number"):
        cb.stage_params("train", {**run, "lr": float("nan")}, what="--run")


def test_a_run_name_snakemake_would_take_for_a_cycle_is_refused():
    cfg = default_config()
    cfg["runs"][0]["name"] = "run-" + "0" * 20
    with pytest.raises(cb.ConfigError, match=r"runs\[0\]\.name: .* ends in '0' repeated 20"):
        cb.validate(cfg)
    cfg["runs"][0]["name"] = "run-" + "0" * 19  # one short of Snakemake's detector: fine
    cb.validate(cfg)


def test_stage_params_fill_the_schema_defaults_and_name_unknown_keys():
    assert cb.stage_params("evaluate", "{}") == {"batch_size": 512, "split": "test"}
    with pytest.raises(cb.ConfigError, match=r"--params: .*'epochs' was unexpected"):
        cb.stage_params("evaluate", '{"epochs": 1}')
    with pytest.raises(cb.ConfigError, match=r"--params is not valid JSON"):
        cb.stage_params("evaluate", "{")


def test_a_time_box_must_end_before_the_jobs_runtime_limit():
    cfg = default_config()
    cfg["runs"][0].update(epochs=None, minutes=30, runtime=30)
    with pytest.raises(cb.ConfigError, match=r"runs\[0\]\.minutes: a time box of 30 min .*30 min"):
        cb.validate(cfg)
    cfg["runs"][0].update(minutes=25)
    cb.validate(cfg)


def test_an_unwritable_cache_dir_is_refused_at_once(tmp_path):
    cfg = default_config()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg["download"]["cache_dir"] = str(blocker / "cache")
    with pytest.raises(cb.ConfigError, match=r"download\.cache_dir: .*file is a file, not a"):
        cb.validate(cfg)
    cfg["download"]["cache_dir"] = str(tmp_path / "new" / "cache")  # creatable: fine
    cb.validate(cfg)
    cfg["download"]["cache_dir"] = str(tmp_path)  # writable: fine
    cb.validate(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing left behind


@pytest.mark.parametrize("cache_dir", ["/proc/nope", "/proc/nope/deeper", "/proc"])
def test_a_cache_dir_nothing_can_be_made_in_is_refused_even_for_root(cache_dir):
    """os.access grants root /proc: the check makes a folder there instead."""
    cfg = default_config()
    cfg["download"]["cache_dir"] = cache_dir
    made = "written" if cache_dir == "/proc" else "created"
    with pytest.raises(
        cb.ConfigError,
        match=rf"download\.cache_dir: {cache_dir} cannot be {made} by this user \(no folder can "
        r"be made in /proc: ",
    ):
        cb.validate(cfg)


# --------------------------------------------------------------------------- split sizes


def test_split_sizes_count_as_preprocess_splits():
    """The sizes the config check predicts are those of the arrays preprocess writes."""
    import numpy as np
    from clusterbench import preprocess

    for n, val, test in ((1797, 0.1, 0.2), (101, 0.15, 0.25), (10, 0.05, 0.05), (7, 0.5, 0.3)):
        decoded = preprocess.Decoded(np.zeros((n, 1, 1, 1), np.uint8), np.arange(n), None, None, ())
        try:
            splits = preprocess.make_splits(decoded, preprocess.SplitParams(val, test, 0))
        except preprocess.PreprocessError:  # an empty split
            assert 0 in cb.split_sizes(n, None, val, test).values()
            continue
        assert cb.split_sizes(n, None, val, test) == {k: len(y) for k, (_, y) in splits.items()}
        official = preprocess.Decoded(*(np.arange(n),) * 2, np.arange(3), np.arange(3), ())
        splits = preprocess.make_splits(official, preprocess.SplitParams(val, None, 0))
        assert cb.split_sizes(n, 3, val, test) == {k: len(y) for k, (_, y) in splits.items()}


SPLIT = {"val_fraction": 0.1, "test_fraction": 0.2, "min_split_size": 50}


@pytest.mark.parametrize(
    "split, samples, expected",
    [
        (SPLIT, (1797, None), []),
        (SPLIT, (500, None), []),  # 350 / 50 / 100: exactly the minimum is enough
        (
            SPLIT,
            (400, None),
            ["d.val_fraction: the val split would hold 40 sample(s) (val_fraction 0.1 of 400)"],
        ),
        (
            {**SPLIT, "test_fraction": 0.02},
            (1797, None),
            ["d.test_fraction: the test split would hold 36 sample(s) (test_fraction 0.02 of"],
        ),
        (
            {**SPLIT, "val_fraction": 0.5, "test_fraction": 0.48},
            (1797, None),
            ["d: the train split would hold 36 sample(s) (what val_fraction + test_fraction"],
        ),
        (
            {**SPLIT, "val_fraction": 0.99},
            (1000, 100),
            ["d.val_fraction: the train split would hold 10 sample(s) (what val_fraction 0.99"],
        ),
        (
            SPLIT,
            (1000, 20),
            ["d.min_split_size: the test split would hold 20 sample(s) (the official test split"],
        ),
        (
            {"val_fraction": 0.34, "test_fraction": 0.33, "min_split_size": 1},
            (3, None),  # every split rounds to one sample
            [],
        ),
    ],
)
def test_split_size_problems_name_the_key_the_split_its_size_and_the_minimum(
    split, samples, expected
):
    problems = cb.split_size_problems("d", split, *samples)
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(f"datasets.{start}"), problem
        assert problem.endswith(f"fewer than min_split_size = {split['min_split_size']}")


@pytest.mark.parametrize(
    "dataset, entry, message",
    [
        (
            "digits",
            {"val_fraction": 0.02},
            "datasets.digits.val_fraction: the val split would hold 36",
        ),
        (
            "digits",
            {"min_split_size": 400},
            "datasets.digits.val_fraction: the val split would hold 180",
        ),
        (
            "mnist",
            {"min_split_size": 10001},
            "datasets.mnist.min_split_size: the test split would hold 10000",
        ),
        (
            "cifar10",
            {"val_fraction": 0.0005},
            "datasets.cifar10.val_fraction: the val split would hold 25",
        ),
    ],
)
def test_a_built_in_split_below_the_minimum_is_refused_before_any_job(dataset, entry, message):
    cfg = _base()
    cfg["datasets"] = {dataset: entry}
    cfg["runs"][0]["dataset"] = dataset
    with pytest.raises(cb.ConfigError, match=re.escape(message)):
        cb.validate(cfg)


def test_the_built_in_datasets_pass_with_the_default_split_settings():
    for dataset in ("digits", "mnist", "cifar10"):
        cfg = _base()
        cfg["datasets"] = {dataset: {}}
        cfg["runs"][0]["dataset"] = dataset
        assert cb.validate(cfg)["datasets"][dataset]["min_split_size"] == 50


def test_the_preprocess_stage_defaults_to_the_config_minimum():
    """Two defaults in the schema (a dataset's key, the stage's --params): the same value."""
    params = cb.stage_params(
        "preprocess", {"val_fraction": 0.1, "test_fraction": 0.2, "split_seed": 0}
    )
    assert params["min_split_size"] == cb.validate(_base())["datasets"]["digits"]["min_split_size"]


def test_priority_and_qos_are_checked_and_no_training_setting():
    """A run's priority (-1023..1024) and qos (safe characters) size no result: defaults 0 and
    null, outside the train slice (the train rule's params, its rerun trigger) and the config
    hash; bad values name the key."""
    cfg = _base()
    cfg["runs"].append({"name": "b", "dataset": "digits", "priority": -1023, "qos": "high.prio-1"})
    cfg["runs"].append({"name": "c", "dataset": "digits", "priority": 1024})
    runs = cb.validate(cfg)["runs"]
    assert [(r["priority"], r["qos"]) for r in runs] == [
        (0, None),
        (-1023, "high.prio-1"),
        (1024, None),
    ]
    assert cb.train_slice(runs[0]) == {**cb.train_slice(runs[1]), "name": "a"}
    assert {"priority", "qos"} <= set(cb.RESOURCE_KEYS)
    plain = cb.validate(_base())
    assert cb.config_hash(plain) == cb.config_hash(
        cb.validate({**_base(), "run_defaults": {"priority": 9, "qos": "x"}})
    )
    for value, words in [(1025, "maximum of 1024"), (-1024, "minimum of -1023"), (True, "type")]:
        with pytest.raises(cb.ConfigError, match=rf"runs\[0\]\.priority: .*{words}"):
            cb.validate(
                {**_base(), "runs": [{"name": "a", "dataset": "digits", "priority": value}]}
            )
    for qos in ["a b", "-x", "x;y", "", "q" * 65]:
        with pytest.raises(cb.ConfigError, match=r"runs\[0\]\.qos"):
            cb.validate({**_base(), "runs": [{"name": "a", "dataset": "digits", "qos": qos}]})


def test_each_run_with_an_unknown_model_is_named_though_each_model_is_looked_up_once():
    from clusterbench import models

    cfg = default_config()
    for run in cfg["runs"][:2]:
        run["model"] = "vgg"
    with pytest.raises(cb.ConfigError) as caught:
        cb.validate(cfg)
    named = [line.strip() for line in str(caught.value).splitlines() if "unknown model" in line]
    assert named == [models.problems("vgg", f"runs[{i}].model")[0] for i in (0, 1)]


def _run(**keys):
    return {"name": "a", "dataset": "digits", "workers": 1, "epochs": 2, **keys}


def test_run_defaults_give_a_dataset_as_the_docs_say_and_a_runs_own_wins():
    """`run_defaults: {dataset: digits}` was accepted by the schema and then every run was told
    "'dataset' is a required property"."""
    cfg = {
        "report": {"title": "t"},
        "datasets": {"digits": {}, "mnist": {}},
        "run_defaults": {"dataset": "digits"},
        "runs": [{"name": "a", "epochs": 1}, {"name": "b", "epochs": 1, "dataset": "mnist"}],
    }
    assert [r["dataset"] for r in cb.validate(cfg)["runs"]] == ["digits", "mnist"]


def test_a_key_for_many_runs_that_acts_on_some_is_kept_and_a_default_value_is_harmless():
    """The rule of clusterbench.config.effects: refused only where a key can act on none of the
    runs it is given to, and only when set to something other than its default."""
    some = {
        "report": {"title": "t"},
        "run_defaults": {"lr_min": 0.001},  # acts on b (cosine), not on a: kept
        "runs": [_run(), _run(name="b", lr_schedule="cosine")],
    }
    resolved = cb.validate(some)
    assert [r["lr_min"] for r in resolved["runs"]] == [0.001, 0.001]
    swept = {
        "report": {"title": "t"},
        "experiments": {
            "s": {
                "dataset": "digits",
                "epochs": 2,
                "workers": 1,
                "lr_min": 0.001,
                "matrix": {"lr_schedule": ["constant", "cosine"]},
            }
        },
    }
    assert len(cb.validate(swept)["runs"]) == 2
    default = {"report": {"title": "t"}, "runs": [_run(lr_min=0, on_bad_file="fail")]}
    cb.validate(default)
    for key, value in (("lr_decay", 0.1), ("lr_gamma", 0.5), ("on_bad_file", "skip")):
        with pytest.raises(cb.ConfigError, match=rf"runs\[0\]\.{key}: .* can have no effect"):
            cb.validate({"report": {"title": "t"}, "runs": [_run(**{key: value})]})


def test_channels_last_on_a_language_model_is_recorded_as_what_it_did():
    """A run_defaults channels_last: true reaching a language model (kept: it acts on the image
    runs) is recorded as the contiguous format it trains in, not channels-last."""
    from clusterbench.training.memory_format import CONTIGUOUS, choose

    run = {"model": "gpt-tiny", "channels_last": True}
    assert choose(run, "cpu", "language-model") == (
        CONTIGUOUS,
        "channels_last: true: the inputs are no images",
    )


def test_a_path_key_is_expanded_one_way_and_a_user_or_variable_that_is_not_there_is_named():
    import pwd

    from clusterbench.core.paths import PathError, expand

    env = {"HOME": "/home/me", "SCRATCH": "/scratch/me"}
    assert expand("~/h.sqlite", "history.path", env) == "/home/me/h.sqlite"
    assert expand("${SCRATCH}/x/$SCRATCH", "k", env) == "/scratch/me/x//scratch/me"
    assert expand("~root", "k", env) == pwd.getpwnam("root").pw_dir
    assert expand("a~b/$$", "k", env) == "a~b/$$"  # no name after $: left as written
    with pytest.raises(PathError, match=r"^history.path: '\$NOPE/h' names .* \$NOPE, not set"):
        expand("$NOPE/h", "history.path", env)
    with pytest.raises(PathError, match=r"^k: '~nosuchuser_cb/s' names the home of user"):
        expand("~nosuchuser_cb/s", "k", env)
