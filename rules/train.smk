# One Horovod rank per worker, started by clusterbench.launch in whatever allocation the job runs
# in (local subprocesses, srun steps, qrsh -inherit). The command is the same in every profile;
# resources (clusterbench.resources) size the job for each executor and are no rerun trigger.
# A run's `priority` orders the local train jobs (Snakemake picks the highest first) and becomes
# Slurm's --nice / SGE's -p through the resources; neither it nor `qos` is a rerun trigger.
# `--lock`: one job at a time trains a run (a requeued Slurm job and Snakemake's retry of it
# could both be alive; clusterbench.launch.exclusive).
rule train:
    input:
        script=script("train"),
        # the stage's code and its training loop's (one stamp: clusterbench.pipeline.code)
        code=stage_code("train", "training"),
        # the run's dataset; a name the config has no run of is a missing input
        data=PIPELINE.run_data,
    output:
        info="results/runs/{run}/run.json",
        metrics="results/runs/{run}/metrics.jsonl",
        tensorboard=directory("results/runs/{run}/tensorboard"),
        model="results/runs/{run}/model.pt",
        # the sizes and sha256s of the files above, written last (clusterbench.integrity)
        checksums="results/runs/{run}/checksums.json",
    log:
        "results/logs/train/{run}.log",
    benchmark:
        "results/benchmarks/train/{run}.tsv"
    # the run's priority; also the checks before any job, the refusal of a training job that
    # cannot run here among them (clusterbench.pipeline, Pipeline.priority)
    priority: PIPELINE.priority("train")
    conda:
        SOFTWARE
    threads: PIPELINE.train_threads
    resources:
        **{key: PIPELINE.train_resource(key) for key in TRAIN_RESOURCE_KEYS},
    params:
        run=lambda wc: cbconfig.canonical_json(cbconfig.train_slice(run_of(wc))),
        workers=lambda wc: run_of(wc)["workers"],
        # elastic runs: the launcher's bounds (also in the run's slice, so no new trigger)
        elastic=PIPELINE.elastic_options,
        data_dir=lambda wc, input: dir_of(input.data[-1]),
        out_dir=lambda wc, output: dir_of(output.info),
        # how the data is read (loading, loader_workers, staging): no result changes with it,
        # so no rerun trigger. Snakemake counts a param whose function takes `output` as
        # derived from the outputs and leaves it out of the params it compares.
        data=lambda wc, output: cbconfig.canonical_json(
            cbconfig.data_settings(run_of(wc), CFG)
        ),
    shell:
        "python -m clusterbench.launch --np {params.workers} {params.elastic}"
        "--lock {params.out_dir:q}/train.lock -- "
        "python {input.script:q} --data-dir {params.data_dir:q} --run {params.run:q} "
        "--data-settings {params.data:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"
