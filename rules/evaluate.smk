rule evaluate:
    input:
        script=script("evaluate"),
        code=stage_module("evaluate"),
        model=rules.train.output.model,
        data=lambda wc: data_files(run_of(wc)["dataset"]),
    output:
        per_class="results/eval/{run}/per_class.csv",
        confusion="results/eval/{run}/confusion.csv",
        metrics="results/eval/{run}/metrics.json",
    log:
        "results/logs/evaluate/{run}.log",
    benchmark:
        "results/benchmarks/evaluate/{run}.tsv"
    conda:
        SOFTWARE
    params:
        settings=lambda wc: cbconfig.canonical_json(CFG["evaluate"]),
        data_dir=lambda wc, input: dir_of(input.data[0]),
        out_dir=lambda wc, output: dir_of(output.metrics),
    shell:
        "python {input.script} --data-dir {params.data_dir} --model {input.model} "
        "--params {params.settings:q} --out-dir {params.out_dir} > {log} 2>&1"
