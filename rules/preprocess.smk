# Two rules, one per storage (clusterbench.data.storage): they write different files. The
# same stage (scripts/preprocess.py) decodes into arrays, or extracts an image folder's files
# (its params say `storage: files`).
rule preprocess:
    input:
        script=script("preprocess"),
        code=stage_module("preprocess"),
        manifest=rules.download.output.manifest,
    output:
        stored_files("{dataset}", "arrays"),
    log:
        "results/logs/preprocess/{dataset}.log",
    benchmark:
        "results/benchmarks/preprocess/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives(ARRAY_DATASETS) or "(?!)",
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


rule preprocess_files:
    input:
        script=script("preprocess"),
        code=stage_module("preprocess"),
        manifest=rules.download.output.manifest,
    output:
        files=directory("results/data/{dataset}/files"),
        index="results/data/{dataset}/index.json",
        meta="results/data/{dataset}/meta.json",
    log:
        "results/logs/preprocess/{dataset}.log",
    benchmark:
        "results/benchmarks/preprocess/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives(FILE_DATASETS) or "(?!)",  # none: matches nothing
    conda:
        SOFTWARE
    params:
        split=lambda wc: cbconfig.canonical_json(
            cbconfig.preprocess_slice(CFG["datasets"][wc.dataset])
        ),
        out_dir=lambda wc, output: dir_of(output.meta),
    shell:
        "python {input.script:q} --dataset {wildcards.dataset:q} "
        "--manifest {input.manifest:q} --params {params.split:q} "
        "--out-dir {params.out_dir:q} > {log:q} 2>&1"
