REPORT_DIR = "results/report"

#: The captions of report.pdf and of every figure in Snakemake's HTML report: written by the
#: report stage from the pages it drew (clusterbench.report.captions), so a new page needs no
#: caption file here. An absolute path: Snakemake reads a caption relative to this file, in the
#: checkout, and this one is in the working directory (under a module's prefix).
PAGE_CAPTIONS = os.path.abspath(IN_WORKDIR(f"{REPORT_DIR}/captions.rst"))


# On the submit host: the report needs no compute-node resources.
rule report:
    input:
        script=script("report"),
        # every module of the report package, its pages included: editing one, or adding a
        # page, reruns the report
        code=stage_code("report"),
        # functions: the runs skipped here drop out (clusterbench.pipeline.runs)
        runs=lambda wc: expand(
            "results/runs/{run}/{name}",
            run=PIPELINE.available_runs(),
            name=["run.json", "metrics.jsonl"],
        ),
        evals=lambda wc: expand(
            "results/eval/{run}/{name}",
            run=PIPELINE.available_runs(),
            name=["metrics.json", "confusion.csv", "per_class.csv"],
        ),
        # the interconnect measured for the runs' environments (rules/comm.smk)
        comm=lambda wc: PIPELINE.comm_files(
            "results/comm/{name}/comm.json", PIPELINE.available_runs()
        ),
        # with their comm jobs' (clusterbench.pipeline, Pipeline.report_benchmarks)
        benchmarks=lambda wc: PIPELINE.report_benchmarks(PIPELINE.available_runs()),
        # the history of these runs' series (rules/history.smk: appended first)
        history="results/history/series.csv",
        # the runs' datasets: where each is read from, what the workflow added for it
        datasets=lambda wc: PIPELINE.dataset_records(PIPELINE.available_runs()),
        # the evaluations while training (evaluate.every_minutes; rules/watch.smk), if any
        watch=lambda wc: PIPELINE.watch_files(PIPELINE.available_runs()),
    output:
        runs=report(
            f"{REPORT_DIR}/runs.csv",
            caption="../workflow/report/runs.rst",
            category="Tables",
        ),
        results=report(
            f"{REPORT_DIR}/results.csv",
            caption="../workflow/report/results.rst",
            category="Tables",
        ),
        epochs=report(
            f"{REPORT_DIR}/epochs.csv",
            caption="../workflow/report/epochs.rst",
            category="Tables",
        ),
        scaling_model=report(
            f"{REPORT_DIR}/scaling_model.csv",
            caption="../workflow/report/scaling_model.rst",
            category="Tables",
        ),
        benchmarks=report(
            f"{REPORT_DIR}/benchmarks.csv",
            caption="../workflow/report/benchmarks.rst",
            category="Tables",
        ),
        # every page's figure, each with its page's caption
        figures=report(
            directory(f"{REPORT_DIR}/figures"),
            patterns=["{name}.png"],
            caption=PAGE_CAPTIONS,
            category="Figures",
        ),
        # the runs skipped here, and why (columns: run, experiment, environment, reason)
        skipped=f"{REPORT_DIR}/skipped.csv",
        captions=f"{REPORT_DIR}/captions.rst",
        pdf=report(
            f"{REPORT_DIR}/report.pdf",
            caption=PAGE_CAPTIONS,
            category="Report",
        ),
    log:
        "results/logs/report/report.log",
    benchmark:
        "results/benchmarks/report/report.tsv"
    priority: PIPELINE.priority("report")
    localrule: True
    conda:
        SOFTWARE
    params:
        # functions: Snakemake expands wildcards in a plain string, and a title may hold braces.
        # Script-safe JSON (no < > &): the HTML report embeds these params in an inline
        # <script> block as they are, and the title, author and skip reasons are user text.
        settings=lambda wc: cbconfig.script_safe_json(CFG["report"]),
        config_hash=lambda wc: cbconfig.config_hash(CFG),
        skipped=lambda wc: cbconfig.script_safe_json(PIPELINE.skipped_runs()),
        run_dirs=lambda wc, input: dirs_of(input.runs),
        eval_dirs=lambda wc, input: dirs_of(input.evals),
        out_dir=lambda wc, output: dir_of(output.pdf),
    shell:
        "python {input.script:q} --params {params.settings:q} "
        "--config-hash {params.config_hash:q} --skipped {params.skipped:q} "
        "--run-dirs {params.run_dirs:q} --eval-dirs {params.eval_dirs:q} "
        "--benchmarks {input.benchmarks:q} --history {input.history:q} "
        "--comm {input.comm:q} --datasets {input.datasets:q} --watch {input.watch:q} "
        "--out-dir {params.out_dir:q} > {log:q} 2>&1"
