# The interconnect: allreduce, allgather and broadcast timed across the ranks of each
# multi-worker environment and backend the runs use (PIPELINE.comm_jobs, clusterbench.pipeline.comm_jobs:
# one job each, named like 2w-1n-cpu-horovod), started by clusterbench.launch as a train job of
# that size is, with a train job's resources (clusterbench.pipeline.resources) for the first run of that
# environment and backend. `comm.enabled: false`: no job. Params: the job's environment and
# backend and the comm settings that change what it measures (clusterbench.pipeline.comm_jobs.job_params).
from clusterbench.pipeline import comm_jobs
from clusterbench.pipeline.commands import network_options


wildcard_constraints:
    comm=alternatives(PIPELINE.comm_jobs),


rule comm:
    input:
        script=script("comm"),
        # the stage's code (one stamp: clusterbench.pipeline.code)
        code=stage_code("comm"),
    output:
        json="results/comm/{comm}/comm.json",
        csv="results/comm/{comm}/comm.csv",
    log:
        "results/logs/comm/{comm}.log",
    benchmark:
        "results/benchmarks/comm/{comm}.tsv"
    # the checks before any job run from every rule's priority (clusterbench.pipeline)
    priority: PIPELINE.priority("comm")
    conda:
        SOFTWARE
    threads: PIPELINE.comm_threads
    resources:
        **{key: PIPELINE.comm_resource(key) for key in TRAIN_RESOURCE_KEYS},
    params:
        params=lambda wc: cbconfig.canonical_json(
            comm_jobs.job_params(PIPELINE.comm_of(wc), CFG["comm"])
        ),
        workers=lambda wc: PIPELINE.comm_of(wc).workers,
        backend=lambda wc: PIPELINE.comm_of(wc).backend,
        # the interface and log level of its runs (their iface and log_level; none: the
        # launcher's variables work)
        network=lambda wc: network_options(vars(PIPELINE.comm_of(wc))),
        out_dir=lambda wc, output: dir_of(output.json),
    shell:
        "python -m clusterbench.launch --np {params.workers} --backend {params.backend} "
        "{params.network}-- "
        "python {input.script:q} --params {params.params:q} --out-dir {params.out_dir:q} "
        "> {log:q} 2>&1"
