"""experiments: (clusterbench.config.experiments, through clusterbench.config.validate): names,
points,
repeats, environment presets, and errors that name their key path."""

from __future__ import annotations

import os

import pytest
from clusterbench import config as cb
from clusterbench.config import experiments as ex
from conftest import default_config


def config_with(experiments: dict, **top) -> dict:
    cfg = default_config()
    cfg["experiments"] = experiments
    cfg.update(top)
    return cfg


def expanded(cfg: dict) -> dict[str, dict]:
    return {run["name"]: run for run in cb.validate(cfg)["runs"] if run["experiment"]}


def test_matrix_is_the_cartesian_product_in_the_order_written():
    runs = expanded(
        config_with(
            {"sweep": {"dataset": "digits", "matrix": {"lr": [0.01, 0.1], "bn": ["sync", "local"]}}}
        )
    )
    assert list(runs) == [
        "sweep--lr=0.01,bn=sync",
        "sweep--lr=0.01,bn=local",
        "sweep--lr=0.1,bn=sync",
        "sweep--lr=0.1,bn=local",
    ]
    run = runs["sweep--lr=0.1,bn=local"]
    assert (run["lr"], run["bn"]) == (0.1, "local")
    assert run["point"] == {"lr": 0.1, "bn": "local"}
    assert (run["experiment"], run["environment"], run["repeat"]) == ("sweep", None, 0)


def test_expanded_runs_merge_over_run_defaults_and_the_experiments_base():
    cfg = config_with({"s": {"dataset": "digits", "epochs": 3, "matrix": {"momentum": [0.0]}}})
    (run,) = expanded(cfg).values()
    assert run["epochs"] == 3  # the experiment's base
    assert run["batch_size"] == cfg["run_defaults"]["batch_size"]  # run_defaults
    assert run["precision"] == "fp32"  # the built-in default
    assert run["momentum"] == 0.0  # the point


def test_hand_written_runs_stay_and_have_no_origin():
    cfg = cb.validate(config_with({"s": {"dataset": "digits", "matrix": {"lr": [0.1]}}}))
    hand = [run for run in cfg["runs"] if run["experiment"] is None]
    assert [r["name"] for r in hand] == [r["name"] for r in default_config()["runs"]]
    for run in hand:
        assert {k: run[k] for k in ex.ORIGIN_KEYS} == dict.fromkeys(ex.ORIGIN_KEYS)
        assert "experiment" not in cb.train_slice(run)  # their slice is what it was


def test_runs_may_be_absent_when_experiments_give_runs():
    cfg = config_with({"s": {"dataset": "digits", "matrix": {"lr": [0.1, 0.2]}}})
    del cfg["runs"]
    assert len(cb.validate(cfg)["runs"]) == 2
    cfg["runs"] = []
    assert len(cb.validate(cfg)["runs"]) == 2
    del cfg["experiments"]
    with pytest.raises(cb.ConfigError, match="runs: no training runs"):
        cb.validate(cfg)


def test_repeats_give_seeds_from_the_base_seed():
    cfg = config_with(
        {"r": {"dataset": "digits", "seed": 5, "repeats": 3, "matrix": {"lr": [0.1]}}}
    )
    runs = expanded(cfg)
    assert list(runs) == ["r--lr=0.1,seed=5", "r--lr=0.1,seed=6", "r--lr=0.1,seed=7"]
    assert [r["seed"] for r in runs.values()] == [5, 6, 7]
    assert [r["repeat"] for r in runs.values()] == [0, 1, 2]
    # repeats alone (no matrix) are enough
    assert len(expanded(config_with({"r": {"dataset": "digits", "repeats": 2}}))) == 2


def test_environments_are_one_more_dimension_with_the_shipped_presets():
    cfg = config_with(
        {"e": {"dataset": "digits", "environments": ["cpu", "gpu", "multi-gpu", "multi-node"]}},
        environment_defaults={"gpus_per_node": 2, "nodes": 3},
    )
    runs = expanded(cfg)
    sizes = {
        r["environment"]: (r["workers"], r["nodes"], r["gpus_per_node"]) for r in runs.values()
    }
    assert sizes == {
        "cpu": (1, 1, 0),
        "gpu": (1, 1, 1),
        "multi-gpu": (2, 1, 2),
        "multi-node": (6, 3, 2),
    }
    assert "e--env=multi-node" in runs


def test_cpu_parallel_takes_the_cores_per_node_over_cpus_per_worker():
    cfg = config_with({"e": {"dataset": "digits", "environments": ["cpu-parallel"]}})
    (run,) = expanded(cfg).values()
    assert run["workers"] == os.cpu_count()  # cores_per_node null: this machine's
    cfg["environment_defaults"] = {"cores_per_node": 16}
    cfg["experiments"]["e"]["cpus_per_worker"] = 4
    (run,) = expanded(cfg).values()
    assert run["workers"] == 4


def test_user_presets_are_merged_over_the_shipped_ones():
    cfg = config_with(
        {"e": {"dataset": "digits", "environments": ["cpu", "pair"], "matrix": {"lr": [0.1]}}},
        environments={"pair": {"workers": 2}, "cpu": {"workers": 1, "nodes": 1}},
    )
    runs = expanded(cfg)
    assert runs["e--env=pair,lr=0.1"]["workers"] == 2
    assert runs["e--env=pair,lr=0.1"]["environment"] == "pair"
    assert runs["e--env=cpu,lr=0.1"]["gpus_per_node"] == 0


def test_names_are_file_names_and_wildcard_values_and_reach_the_train_stage():
    cfg = config_with(
        {
            "s": {
                "dataset": "digits",
                "matrix": {"weight_decay": [1.0e-5], "deterministic": [True], "epochs": [None]},
                "minutes": 1,
            }
        }
    )
    (run,) = cb.validate(cfg)["runs"][-1:]
    assert run["name"] == "s--weight_decay=1e-05,deterministic=true,epochs=null"
    assert ex.NAME_PATTERN.match(run["name"]) and "/" not in run["name"]
    # the train stage takes the slice, and the experiment block with it
    from clusterbench.train import validate_run

    checked = validate_run(cb.canonical_json(cb.train_slice(run)))
    assert checked["experiment"] == {
        "name": "s",
        "environment": None,
        "point": {"weight_decay": 1.0e-5, "deterministic": True, "epochs": None},
        "repeat": 0,
    }


@pytest.mark.parametrize(
    ("experiment", "message"),
    [
        (
            {"matrix": {"lr": 0.1}},
            r"experiments\.x\.matrix\.lr: expected a list of values, got 0\.1",
        ),
        ({"matrix": {}}, r"experiments\.x\.matrix: empty"),
        ({"matrix": {"lr": []}}, r"experiments\.x\.matrix\.lr: an empty list of values"),
        ({"matrix": {"rate": [1]}}, r"experiments\.x\.matrix\.rate: not a run key"),
        ({"matrix": {"name": ["a"]}}, r"experiments\.x\.matrix\.name: run names are made"),
        ({"matrix": {"lr": [0.1, -1]}}, r"experiments\.x\.matrix\.lr\[1\]: -1 is less than"),
        ({"matrix": {"workers": [1, 1.5]}}, r"experiments\.x\.matrix\.workers\[1\]: 1\.5 is not"),
        ({"matrix": {"lr": [0.5, 0.50]}}, r"experiments\.x\.matrix\.lr\[1\]: 0\.5 repeats lr\[0\]"),
        (
            {"matrix": {"lr": [1, 0.5, 1.0]}},
            r"experiments\.x\.matrix\.lr\[2\]: 1\.0 repeats lr\[0\] \(1\): equal values would "
            r"train the same run twice, as lr=1 and lr=1\.0",
        ),
        ({"matrix": {"workers": [2, 2.0]}}, r"matrix\.workers\[1\]: 2\.0 repeats workers\[0\]"),
        ({"matrix": {"seed": [1, 2]}, "repeats": 2}, r"experiments\.x\.matrix\.seed: repeats"),
        ({"environments": ["cpu", "cpu"]}, r"experiments\.x\.environments\[1\]: 'cpu' is listed"),
        ({"environments": ["tpu"]}, r"experiments\.x\.environments\[0\]: unknown environment"),
        ({"environments": ["gpu"], "matrix": {"nodes": [1]}}, r"matrix\.nodes: also set"),
        ({"environments": ["cpu"], "workers": 4}, r"experiments\.x\.workers: also set by"),
        ({"name": "n", "matrix": {"lr": [1]}}, r"experiments\.x: Additional properties"),
        ({"repeats": 0}, r"experiments\.x\.repeats: 0 is less than the minimum of 1"),
        ({}, r"experiments\.x: nothing to expand"),
        (
            {"matrix": {"batch_size": list(range(1, 102))}, "repeats": 100},
            r"experiments\.x: expands to 10100 runs, more than the limit of 10000",
        ),
        (
            {"matrix": {"workers": [1, 4]}, "batch_size": 2},
            r"experiments\.x\[x--workers=4\]\.batch_size: global batch 2",
        ),
        ({"dataset": "imagenet", "matrix": {"lr": [1]}}, r"experiments\.x\[x--lr=1\]\.dataset"),
        ({"dataset": None, "matrix": {"lr": [1]}}, r"experiments\.x\.dataset: None is not of type"),
    ],
)
def test_bad_experiments_are_refused_naming_the_key(experiment, message):
    cfg = config_with({"x": {"dataset": "digits", **experiment}})
    with pytest.raises(cb.ConfigError, match=message):
        cb.validate(cfg)


def test_an_experiment_needs_a_dataset_from_somewhere():
    cfg = config_with({"x": {"matrix": {"lr": [0.1]}}})
    with pytest.raises(cb.ConfigError, match=r"experiments\.x\.dataset: required"):
        cb.validate(cfg)
    cfg["run_defaults"]["dataset"] = "digits"
    assert list(expanded(cfg)) == ["x--lr=0.1"]
    del cfg["run_defaults"]["dataset"]
    cfg["experiments"]["x"]["matrix"]["dataset"] = ["digits"]
    assert list(expanded(cfg)) == ["x--lr=0.1,dataset=digits"]


def test_a_name_made_twice_is_refused_naming_both_places():
    # the per-list check catches equal values; the name check catches what is left (here: a
    # hand-written run given the name through an experiment-made config, as a merger might)
    runs, problems = ex.expand(
        {
            "x": {"matrix": {"lr": [0.1]}, "repeats": 1},
            "y": {"matrix": {"lr": [0.1]}, "repeats": 1},
        },
        base={"seed": 1, "dataset": "digits"},
        presets=ex.environments({}, {"gpus_per_node": 1, "nodes": 1}),
        run_keys={"lr": {}, "seed": {}},
        cores_per_node=2,
    )
    assert not problems and [r["name"] for _, r in runs] == ["x--lr=0.1", "y--lr=0.1"]
    cfg = default_config()
    cfg["runs"].append(dict(cfg["runs"][0]))
    with pytest.raises(cb.ConfigError, match=r"runs\[4\]\.name: 'digits-cnn-1w' is already used"):
        cb.validate(cfg)


def test_a_too_long_name_is_refused():
    cfg = config_with({"x" * 60: {"dataset": "digits", "matrix": {"qos": ["q" * 64, "r" * 64]}}})
    cfg["experiments"]["x" * 60]["matrix"]["priority"] = [-5]
    cfg["experiments"]["x" * 60]["matrix"]["mem_mb"] = [123456789]
    cfg["experiments"]["x" * 60]["matrix"]["lr"] = [0.012345678901234567]
    cfg["experiments"]["x" * 60]["matrix"]["weight_decay"] = [0.00012345678901234567]
    with pytest.raises(cb.ConfigError, match="characters, more than 200"):
        cb.validate(cfg)


def test_format_value():
    assert [ex.format_value(v) for v in (True, None, 0.1, 1e-5, 3, "ddp")] == [
        "true",
        "null",
        "0.1",
        "1e-05",
        "3",
        "ddp",
    ]


def _expand_tags(values: list) -> tuple[list[str], list[str]]:
    runs, problems = ex.expand(
        {"x": {"matrix": {"tag": values}, "repeats": 1}},
        base={"seed": 1, "dataset": "digits"},
        presets=ex.environments({}, {"gpus_per_node": 1, "nodes": 1}),
        run_keys={"tag": {}, "seed": {}},
        cores_per_node=2,
    )
    return [run["name"] for _, run in runs], problems


def test_values_are_sanitised_for_file_names_and_collisions_refused():
    names, problems = _expand_tags(["a/b c", "d=e,f", "ok-1.5+x"])
    assert not problems
    assert names == ["x--tag=a_b_c", "x--tag=d_e_f", "x--tag=ok-1.5+x"]
    assert all(ex.NAME_PATTERN.match(name) for name in names)
    names, problems = _expand_tags(["a/b", "a b"])
    assert names == [] and problems == [
        "experiments.x.matrix.tag[1]: 'a b' repeats tag[0] ('a/b'): both would give runs "
        "named tag=a_b"
    ]


def test_equal_numbers_are_one_value_but_a_boolean_is_not_a_number():
    assert ex.repeated_values("m.k", "k", [True, 1, 0, False]) == []
    assert ex.repeated_values("m.k", "k", [1, True, 1.0]) == [
        "m.k[2]: 1.0 repeats k[0] (1): equal values would train the same run twice, as k=1 and "
        "k=1.0"
    ]


def test_the_keys_experiments_knows_are_the_schemas():
    """An experiment's own keys and a preset's keys are defined in the schema file."""
    import yaml

    defs = yaml.safe_load(cb.SCHEMA_PATH.read_text())["$defs"]
    assert ex.EXPERIMENT_KEYS == tuple(defs["experiment"]["properties"])
    assert ex.ENVIRONMENT_KEYS == tuple(defs["environment"]["properties"])
