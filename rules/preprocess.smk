rule preprocess:
    input:
        script=script("preprocess"),
        code=stage_module("preprocess"),
        manifest=rules.download.output.manifest,
    output:
        data_files("{dataset}"),
    log:
        "results/logs/preprocess/{dataset}.log",
    benchmark:
        "results/benchmarks/preprocess/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives([d for d in DATASETS if d not in SYNTHETIC]),
    conda:
        SOFTWARE
    params:
        split=lambda wc: cbconfig.canonical_json(
            cbconfig.preprocess_slice(CFG["datasets"][wc.dataset])
        ),
        out_dir=lambda wc, output: dir_of(output[-1]),
    shell:
        "python {input.script:q} --dataset {wildcards.dataset:q} "
        "--manifest {input.manifest:q} --params {params.split:q} "
        "--out-dir {params.out_dir:q} > {log:q} 2>&1"


# Synthetic data is generated where it trains: its preprocessing writes meta.json alone.
use rule preprocess as preprocess_synthetic with:
    output:
        f"{data_dir('{dataset}')}/meta.json",
    wildcard_constraints:
        dataset=alternatives(SYNTHETIC),
