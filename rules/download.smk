rule download:
    input:
        script=script("download"),
    output:
        manifest="results/raw/{dataset}/MANIFEST.json",
    log:
        "results/logs/download/{dataset}.log",
    benchmark:
        "results/benchmarks/download/{dataset}.tsv"
    conda:
        SOFTWARE
    params:
        source=lambda wc: cbconfig.canonical_json(
            cbconfig.download_slice(CFG["datasets"][wc.dataset])
        ),
    shell:
        "python {input.script} --dataset {wildcards.dataset} --params {params.source:q} "
        "--out {output.manifest} > {log} 2>&1"
