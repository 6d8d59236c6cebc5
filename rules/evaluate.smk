rule evaluate:
    input:
        script=script("evaluate"),
        code=stage_code("evaluate"),
        model=rules.train.output.model,
        data=PIPELINE.data_input(),
    output:
        per_class="results/eval/{run}/per_class.csv",
        confusion="results/eval/{run}/confusion.csv",
        metrics="results/eval/{run}/metrics.json",
        # the sizes and sha256s of the files above, written last (clusterbench.core.integrity)
        checksums="results/eval/{run}/checksums.json",
    log:
        "results/logs/evaluate/{run}.log",
    benchmark:
        "results/benchmarks/evaluate/{run}.tsv"
    priority: PIPELINE.priority("evaluate")
    conda:
        SOFTWARE
    params:
        # the evaluation's settings (not every_minutes: the watch stage's, rules/watch.smk)
        settings=lambda wc: cbconfig.canonical_json(
            {k: CFG["evaluate"][k] for k in cbconfig.EVALUATE_KEYS}
        ),
        # derived from the job's paths: no rerun trigger
        dirs=lambda wc, input, output: evaluate_dirs(input.data[-1], output.metrics),
    shell:
        "python {input.script:q} {params.dirs} --model {input.model:q} "
        "--params {params.settings:q} > {log:q} 2>&1"
