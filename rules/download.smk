# On the submit host unless CLUSTERBENCH_REMOTE_DOWNLOAD=1 (see rules/common.smk): compute nodes
# often have no internet.
rule download:
    input:
        script=script("download"),
        code=stage_code("download"),
        # a missing or damaged raw file makes this step due (clusterbench.pipeline); no file
        intact=PIPELINE.raw_files_intact,
    output:
        manifest="results/raw/{dataset}/MANIFEST.json",
    log:
        "results/logs/download/{dataset}.log",
    benchmark:
        "results/benchmarks/download/{dataset}.tsv"
    # every rule's: the checks before any job (clusterbench.pipeline, Pipeline.priority)
    priority: PIPELINE.priority("download")
    localrule: LOCAL_DOWNLOAD
    conda:
        SOFTWARE
    params:
        source=lambda wc: cbconfig.canonical_json(
            cbconfig.download_slice(CFG["datasets"][wc.dataset])
        ),
    shell:
        "python {input.script:q} --dataset {wildcards.dataset:q} --params {params.source:q} "
        "--out {output.manifest:q} > {log:q} 2>&1"
