# One rank per worker (Horovod or DDP), started by clusterbench.launch in whatever allocation the
# job runs in (local subprocesses, srun steps, qrsh -inherit, ssh to the hosts file's hosts). The
# command is the same in every profile; resources (clusterbench.pipeline.resources) size the job
# for each executor and are no rerun trigger.
# A run's `priority` orders the local train jobs (Snakemake picks the highest first) and becomes
# Slurm's --nice / SGE's -p through the resources; neither it nor `qos` is a rerun trigger.
# `--lock`: one job at a time trains a run (a requeued Slurm job and Snakemake's retry of it
# could both be alive; clusterbench.launch.exclusive).
rule train:
    input:
        script=script("train"),
        # the stage's code and its training loop's (one stamp: clusterbench.pipeline.code)
        code=stage_code("train", "training"),
        # the run's dataset
        data=PIPELINE.data_input(),
        # your own model's code stamp (editing its module retrains the run); a missing file
        # for a name the config has no run of
        known=lambda wc: [local(path) for path in PIPELINE.known_run(wc)],
    output:
        info="results/runs/{run}/run.json",
        metrics="results/runs/{run}/metrics.jsonl",
        tensorboard=directory("results/runs/{run}/tensorboard"),
        model="results/runs/{run}/model.pt",
        # the sizes and sha256s of the files above, written last (clusterbench.core.integrity)
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
        # where a run that grows through worker jobs (grow: jobs) sends them, site-wide: a
        # profile's `set-resources: {train: {grow_slurm_partition: scavenger}}` (a preemptible
        # partition), `grow_qos` (a preemptible QOS), `grow_sge_queue` (a subordinate queue);
        # a run's own `grow_resources` wins (docs/elastic.md, "Sharing a cluster")
        grow_slurm_partition="",
        grow_qos="",
        grow_sge_queue="",
    # Two param functions: Snakemake calls each of every job's functions while it builds the
    # graph, and a sweep has thousands of jobs (clusterbench.pipeline.commands).
    params:
        # the rerun trigger: the run's training slice (its workers and an elastic run's
        # bounds included)
        run=lambda wc: cbconfig.canonical_json(cbconfig.train_slice(run_of(wc))),
        # the launcher's and the stage's other options: the workers, the lock, where the data
        # and outputs are, how the data is read. No rerun trigger: Snakemake leaves a param whose
        # function takes `output` out of the params it compares.
        command=PIPELINE.train_command,
    shell:
        "python -m clusterbench.launch {params.command.launch} "
        "--grow-site slurm_partition={resources.grow_slurm_partition:q} "
        "--grow-site qos={resources.grow_qos:q} --grow-site sge_queue={resources.grow_sge_queue:q} -- "
        "python {input.script:q} --run {params.run:q} {params.command.stage} > {log:q} 2>&1"
