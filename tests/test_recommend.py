"""The recommendation (clusterbench.report.recommend, clusterbench.core.stats): the fastest
configuration of each workload, its margin over the runner-up and the noise rule, and the time
to a target accuracy. Pure pandas on synthetic tables; one rendered report checks that the
title page leads with it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clusterbench.core import stats
from clusterbench.report import recommend
from test_report import PAGE, PARAMS, make_fake_results, pdf_text, run_report


def run_row(name: str, ips: float, sd: float = 20.0, epochs: int = 10, **config) -> dict:
    """One runs.csv row as the recommendation reads it (every speed setting not given: its
    schema default)."""
    from clusterbench.config import load_schema
    from clusterbench.report.tables import SETTING_KEYS

    defaults = load_schema()["$defs"]["run_settings"]["properties"]
    row = {
        **{k: defaults[k].get("default") if k in defaults else "" for k in SETTING_KEYS},
        "run": name,
        "dataset": "digits",
        "model": "small_cnn",
        "site": "vm",
        "backend": "horovod",
        "bn": "aggregate",
        "workers": 2,
        "nodes": 1,
        "gpus_per_node": 0,
        "device": "cpu",
        "global_batch": 128,
        "precision": "fp32",
        "memory_format": "contiguous",
        "images_per_second": ips,
        "std_images_per_second": sd,
        "timed_epochs": epochs,
        "lr": 0.05,
    }
    row.update(config)
    return row


def test_the_standard_error_is_the_larger_of_the_epochs_and_the_repeats_share():
    # two runs 20 apart: the repeats' share sd(1000, 1020) / sqrt(2) = 10 beats the epochs'
    # sqrt(2 x 10^2 / 10) / 2 = 2.24
    est = stats.estimate([1000.0, 1020.0], [10.0, 10.0], [10, 10])
    assert est.mean == 1010.0 and est.runs == 2 and est.epochs == 20
    assert est.se == pytest.approx(10.0)
    # one run: its epochs alone, sd / sqrt(epochs)
    assert stats.estimate([1000.0], [30.0], [9]).se == pytest.approx(10.0)
    # a spread known from elsewhere counts as the repeats' (sigma / sqrt(runs))
    assert stats.estimate([1000.0], [30.0], [9], sigma=40.0).se == pytest.approx(40.0)
    # no spread at all (one run of one timed epoch): unknown, and so is any difference to it
    unknown = stats.estimate([1000.0], [math.nan], [1])
    assert math.isnan(unknown.se)
    assert stats.difference(stats.estimate([900.0], [30.0], [9]), unknown).beyond is None


def test_a_margin_beyond_three_standard_errors_is_beyond_the_noise():
    runs = pd.DataFrame(
        [
            run_row("ddp-a", 1100, backend="ddp"),
            run_row("ddp-b", 1104, backend="ddp", lr=0.1),  # another lr: a repeat
            run_row("hvd-a", 1000),
            run_row("hvd-b", 1006, lr=0.1),
        ]
    )
    configs = recommend.configurations(runs)
    assert list(configs["backend"]) == ["ddp", "horovod"] and list(configs["rank"]) == [1, 2]
    assert list(configs["n_runs"]) == [2, 2]
    rec = recommend.recommendations(configs).iloc[0]
    # SE: ddp max(sqrt(2 x 400/10)/2 = 4.47, sd(1100, 1104)/sqrt 2 = 2) = 4.47, horovod 4.47;
    # the difference 99 is 15.7 of their 6.32
    assert rec["margin"] == pytest.approx(99.0)
    assert rec["margin_se"] == pytest.approx(math.sqrt(2) * math.sqrt(80) / 2)
    assert rec["beyond_noise"] == True  # noqa: E712 (a numpy bool)
    assert rec["margin_pct"] == pytest.approx(99 / 1003)
    sentence = recommend.recommendation_sentence(rec)
    assert sentence.startswith("digits / small_cnn: fastest ddp, 2 workers on 1 node (2 per node)")
    assert "9.9 % ahead of the runner-up (horovod: 1,003)" in sentence
    assert "beyond the noise (15.7 standard errors > 3)" in sentence


def test_a_language_models_recommendation_is_in_tokens_per_second():
    lm = {"dataset": "text", "model": "gpt-tiny"}
    runs = pd.DataFrame(
        [
            run_row("a", 100, **lm, tokens_per_second=6400.0, std_tokens_per_second=64.0),
            run_row(
                "b", 90, **lm, backend="ddp", tokens_per_second=5760.0, std_tokens_per_second=64
            ),
            run_row("img", 500, tokens_per_second=math.nan, std_tokens_per_second=math.nan),
        ]
    )
    recs = recommend.recommendations(recommend.configurations(runs))
    recs = recs.set_index("workload", drop=False)
    text = recs.loc["text / gpt-tiny"]
    assert text["unit"] == "tokens/s" and text["mean"] == 6400 and text["runner_up_mean"] == 5760
    sentence = recommend.recommendation_sentence(text)
    assert ": 6,400 tokens/s, 11.1 % ahead of the runner-up (ddp: 5,760)" in sentence, sentence
    assert "500 images/s" in recommend.recommendation_sentence(recs.loc["digits / small_cnn"])


def test_a_margin_within_three_standard_errors_is_not_claimed():
    runs = pd.DataFrame(
        [run_row("one", 1010, sd=60, workers=1), run_row("two", 1000, sd=60, workers=2)]
    )
    rec = recommend.recommendations(recommend.configurations(runs)).iloc[0]
    # SE 60/sqrt(10) = 18.97 each; 10 < 3 x 26.8
    assert rec["beyond_noise"] == False  # noqa: E712 (a numpy bool)
    assert rec["runner_up"] == "2 workers on 1 node (2 per node)"  # what differs
    assert "within the noise (0.4 standard errors \u2264 3): as fast as measured" in (
        recommend.recommendation_sentence(rec)
    )


def test_unknown_noise_and_a_single_configuration_say_so():
    single_epoch = pd.DataFrame(
        [
            run_row("a", 1100, sd=np.nan, epochs=1),
            run_row("b", 1000, sd=np.nan, epochs=1, bn="local"),
        ]
    )
    rec = recommend.recommendations(recommend.configurations(single_epoch)).iloc[0]
    assert recommend.missing(rec["beyond_noise"])
    assert "noise unknown" in recommend.recommendation_sentence(rec)
    alone = recommend.recommendations(recommend.configurations(single_epoch.head(1))).iloc[0]
    assert "(the only configuration measured)" in recommend.recommendation_sentence(alone)


def test_configurations_are_per_workload_and_compression_and_skip_untimed_runs():
    runs = pd.DataFrame(
        [
            run_row("a", 1000),
            run_row("b", 1500, grad_compression="fp16"),
            run_row("c", 900, grad_compression=None),  # none, as a run without the key
            run_row("m", 300, dataset="mnist"),
            run_row("untimed", np.nan, sd=np.nan, epochs=0, backend="ddp"),
        ]
    )
    configs = recommend.configurations(runs)
    assert set(configs["workload"]) == {"digits / small_cnn", "mnist / small_cnn"}
    digits = configs[configs["workload"] == "digits / small_cnn"]
    assert list(digits["grad_compression"]) == ["fp16", "none"]
    assert list(digits["runs"]) == ["b", "a, c"]
    assert "untimed" not in ", ".join(configs["runs"])
    recs = recommend.recommendations(configs).set_index("workload")
    assert "fp16 compression" in recs.loc["digits / small_cnn", "config"]
    assert recs.loc["digits / small_cnn", "runner_up"] == "no compression"
    # runs without the column at all: no compression
    assert set(
        recommend.configurations(runs.drop(columns="grad_compression"))["grad_compression"]
    ) == {"none"}


def test_several_sites_are_separate_workloads():
    runs = pd.DataFrame([run_row("a", 1000, site="east"), run_row("b", 2000, site="west")])
    configs = recommend.configurations(runs)
    assert set(configs["workload"]) == {"digits / small_cnn on east", "digits / small_cnn on west"}


def epochs_table(runs: dict[str, tuple[list[float], list[float]]]) -> pd.DataFrame:
    rows = []
    for run, (seconds, accuracy) in runs.items():
        for i, (s, a) in enumerate(zip(seconds, accuracy, strict=True), start=1):
            rows.append({"run": run, "epoch": i, "epoch_seconds": s, "val_accuracy": a})
    return pd.DataFrame(rows)


def test_time_to_accuracy_is_the_training_time_to_the_first_epoch_that_reached_it():
    epochs = epochs_table(
        {
            # the warm-up epoch's 5 s count: the time the run took
            "slow-start": ([5.0, 1.0, 1.0, 1.0], [0.5, 0.96, 0.97, 0.98]),
            "steady": ([2.0, 2.0, 2.0, 2.0], [0.6, 0.9, 0.95, 0.99]),
            "never": ([1.0, 1.0], [0.5, 0.7]),
        }
    )
    tta = recommend.time_to_accuracy(epochs, 0.95).set_index("run")
    assert tta.loc["slow-start", "epoch"] == 2 and tta.loc["slow-start", "seconds"] == 6.0
    assert tta.loc["steady", "epoch"] == 3 and tta.loc["steady", "seconds"] == 6.0
    assert math.isnan(tta.loc["never", "seconds"]) and tta.loc["never", "best_val_accuracy"] == 0.7
    runs = pd.DataFrame(
        [
            run_row("slow-start", 1000, workers=1),
            run_row("steady", 900, backend="ddp"),
            run_row("never", 800, bn="local"),
        ]
    )
    tta = recommend.time_to_accuracy(epochs.assign(epoch_seconds=epochs["epoch_seconds"] / 2), 0.9)
    first = recommend.first_to_target(runs, tta).iloc[0]
    # at 0.9: slow-start at epoch 2 (3 s), steady at epoch 2 (2 s): steady, ddp, is first
    assert first["run"] == "steady" and first["seconds"] == 2.0 and first["epoch"] == 2
    assert first["reached"] == 2 and first["runs"] == 3
    assert first["config"].startswith("ddp, 2 workers on 1 node")
    text = recommend.first_sentence(first, 0.9)
    assert text.startswith(
        "First to 90.0 % validation accuracy on digits / small_cnn: steady (ddp,"
    )
    assert text.endswith("after 2.00 s of training (epoch 2; 2 of 3 runs reached it).")
    nobody = recommend.first_to_target(runs, recommend.time_to_accuracy(epochs, 0.999)).iloc[0]
    assert recommend.first_sentence(nobody, 0.999) == (
        "No run of digits / small_cnn reached 99.9 % validation accuracy (3 runs)."
    )


@pytest.mark.slow  # a whole report rendered (several seconds)
def test_the_title_page_leads_with_the_recommendation(tmp_path: Path):
    """A rendered report with report.target_accuracy: the title page's first section is the
    recommendation, the recommendation page shows the configurations and time to accuracy."""
    fake = make_fake_results(tmp_path)
    out = tmp_path / "report"
    assert run_report(fake, out, params={**PARAMS, "target_accuracy": 0.95}) == 0
    pages = [" ".join(p.split()) for p in pdf_text(out / "report.pdf").split("\f")]
    title = pages[PAGE["title"]]
    assert title.index("Recommendation") < title.index("Summary") < title.index("Provenance")
    assert (
        "digits / small_cnn: fastest horovod, 4 workers on 2 nodes (2 per node), BN aggregate, "
        "fp32, no compression: 6,923 images/s, 45.2 % ahead of the runner-up (ddp, 2 workers on "
        "1 node (2 per node): 4,768): beyond the noise" in title
    )
    assert "First to 95.0 % validation accuracy on digits / small_cnn: digits-4w-2n" in title
    page = pages[PAGE["recommendation"]]
    assert page.startswith("Recommendation: the fastest configuration of each workload")
    assert "Time to 95.0 %" in page and "first: digits-4w-2n" in page  # two title lines
    assert "Noise rule: a margin is beyond the noise when" in page
    assert (out / "figures" / "recommendation.png").is_file()
