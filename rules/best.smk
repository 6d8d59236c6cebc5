# The best run, chosen on validation by the report's results.csv (rank 1), kept apart.
rule best:
    input:
        script=script("best"),
        code=stage_code("best"),
        results=f"{REPORT_DIR}/results.csv",
        runs=lambda wc: expand(
            "results/runs/{run}/{name}",
            run=PIPELINE.available_runs(),
            name=["run.json", "model.pt"],
        ),
        evals=lambda wc: expand(
            "results/eval/{run}/metrics.json", run=PIPELINE.available_runs()
        ),
    output:
        summary="results/best/summary.json",
        info="results/best/run.json",
        model="results/best/model.pt",
    log:
        "results/logs/best/best.log",
    priority: PIPELINE.priority("best")
    localrule: True
    conda:
        SOFTWARE
    params:
        run_dirs=lambda wc, input: dirs_of(input.runs),
        eval_dirs=lambda wc, input: dirs_of(input.evals),
        out_dir=lambda wc, output: dir_of(output.model),
    shell:
        "python {input.script:q} --results {input.results:q} --run-dirs {params.run_dirs:q} "
        "--eval-dirs {params.eval_dirs:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"
