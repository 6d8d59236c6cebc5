# Three rules, one per storage (clusterbench.config.storage): they write different files. The
# same stage (scripts/preprocess.py) decodes into arrays, extracts an image folder's files (its
# params say `storage: files`), or describes synthetic data (meta.json alone).
rule preprocess:
    input:
        script=script("preprocess"),
        code=stage_code("preprocess"),
        manifest=rules.download.output.manifest,
        # damaged arrays, or arrays whose meta.json is gone, stop the workflow; no file
        intact=PIPELINE.arrays_intact,
    output:
        stored_files("{dataset}", "arrays"),
    log:
        "results/logs/preprocess/{dataset}.log",
    benchmark:
        "results/benchmarks/preprocess/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives(ARRAY_DATASETS),
    priority: PIPELINE.priority("preprocess")
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
        stored_files("{dataset}", "synthetic"),
    wildcard_constraints:
        dataset=alternatives(SYNTHETIC),


# An image folder stored as files: its index (index.npz), the images read where they are (a
# folder, a .zip's or .tar's members at their offsets): nothing is copied.
rule preprocess_files:
    input:
        script=script("preprocess"),
        code=stage_code("preprocess"),
        manifest=rules.download.output.manifest,
        # a damaged index, or an index whose meta.json is gone, stops the workflow; a folder
        # read in place that changed since it was indexed makes this step due; no file
        intact=PIPELINE.files_intact,
    output:
        index="results/data/{dataset}/index.npz",
        meta="results/data/{dataset}/meta.json",
    log:
        "results/logs/preprocess/{dataset}.log",
    benchmark:
        "results/benchmarks/preprocess/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives(FILE_DATASETS),
    priority: PIPELINE.priority("preprocess_files")
    conda:
        SOFTWARE
    params:
        split=lambda wc: cbconfig.canonical_json(
            cbconfig.preprocess_slice(CFG["datasets"][wc.dataset])
        ),
        out_dir=lambda wc, output: dir_of(output.meta),
        # `check: content`: each image's sha256 into the index. No rerun trigger (it takes
        # `output`): an index without them is made again by the check (Checks.in_place)
        check=PIPELINE.preprocess_check,
    shell:
        "python {input.script:q} --dataset {wildcards.dataset:q} "
        "--manifest {input.manifest:q} --params {params.split:q} "
        "--out-dir {params.out_dir:q} --check {params.check:q} > {log:q} 2>&1"


# A .tar.gz's images (a gzip stream cannot be read at an offset): extracted into files/ first.
use rule preprocess_files as preprocess_extracted with:
    output:
        files=directory("results/data/{dataset}/files"),
        index="results/data/{dataset}/index.npz",
        meta="results/data/{dataset}/meta.json",
    wildcard_constraints:
        dataset=alternatives(EXTRACTED_DATASETS),
    priority: PIPELINE.priority("preprocess_extracted")
