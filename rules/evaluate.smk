rule evaluate:
    input:
        script=script("evaluate"),
        code=stage_code("evaluate"),
        model=rules.train.output.model,
        data=PIPELINE.run_data,
    output:
        per_class="results/eval/{run}/per_class.csv",
        confusion="results/eval/{run}/confusion.csv",
        metrics="results/eval/{run}/metrics.json",
        # the sizes and sha256s of the files above, written last (clusterbench.integrity)
        checksums="results/eval/{run}/checksums.json",
    log:
        "results/logs/evaluate/{run}.log",
    benchmark:
        "results/benchmarks/evaluate/{run}.tsv"
    priority: PIPELINE.priority("evaluate")
    conda:
        SOFTWARE
    params:
        settings=lambda wc: cbconfig.canonical_json(CFG["evaluate"]),
        data_dir=lambda wc, input: dir_of(input.data[-1]),
        out_dir=lambda wc, output: dir_of(output.metrics),
    shell:
        "python {input.script:q} --data-dir {params.data_dir:q} --model {input.model:q} "
        "--params {params.settings:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"
