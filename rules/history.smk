# The history: every workflow run appends its runs to the SQLite store at `history.path`
# (clusterbench.history), before the report, which draws the history of their series.
from clusterbench.history import store as history_store

HISTORY_PATH = history_store.workflow_path(CFG["history"]["path"], IN_WORKDIR)
# the config's hash, recorded with each append: passed in the environment, as no param (a
# rerun trigger: a new report title would append again)
os.environ.update(CLUSTERBENCH_CONFIG_HASH=cbconfig.config_hash(CFG))

# Before any job, when the history job runs: a store that cannot be appended to (not writable,
# or of a schema this clusterbench cannot use) stops the workflow, naming it; dry runs included.
# It opens the store at most (to read its schema version), and only then: not at every parse.
PIPELINE.check_before_jobs(
    "history",
    lambda: history_store.unwritable_message(
        Path(HISTORY_PATH), CFG["history"]["path"]
    ),
)


# On the submit host, like the report: it reads the runs and writes one small file. The store
# is no output: it is shared, and Snakemake deletes a job's outputs before it runs.
rule history:
    input:
        script=script("history"),
        code=stage_code("history"),
        runs=lambda wc: expand(
            "results/runs/{run}/{name}",
            run=PIPELINE.available_runs(),
            name=["run.json", "metrics.jsonl"],
        ),
        evals=lambda wc: expand(
            "results/eval/{run}/metrics.json", run=PIPELINE.available_runs()
        ),
    output:
        # every entry of the store in the series of this workflow's runs (the report's page)
        series="results/history/series.csv",
    log:
        "results/logs/history/history.log",
    priority: PIPELINE.priority("history")
    localrule: True
    conda:
        SOFTWARE
    params:
        # a change of the path (or of the timing) appends again, to that store
        path=HISTORY_PATH,
        warmup=CFG["report"]["timing_warmup_epochs"],
        run_dirs=lambda wc, input: dirs_of(input.runs),
        eval_dirs=lambda wc, input: dirs_of(input.evals),
    shell:
        "python {input.script:q} --history {params.path:q} --warmup-epochs {params.warmup} "
        "--run-dirs {params.run_dirs:q} "
        "--eval-dirs {params.eval_dirs:q} --out {output.series:q} > {log:q} 2>&1"
