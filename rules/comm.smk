# The interconnect: allreduce, allgather and broadcast timed across the ranks of each
# multi-worker environment and backend the runs use (COMM_JOBS, rules/common.smk: one job each,
# named like 2w-1n-cpu-horovod), started by clusterbench.launch as a train job of that size is,
# with a train job's resources (clusterbench.resources) for the first run of that environment
# and backend. `comm.enabled: false`: no job. Params: the job's environment and backend and the
# comm settings that change what it measures (clusterbench.comm_jobs.job_params).


wildcard_constraints:
    comm=alternatives(COMM_JOBS),


rule comm:
    input:
        script=script("comm"),
        code=stage_module("comm"),
    output:
        json="results/comm/{comm}/comm.json",
        csv="results/comm/{comm}/comm.csv",
    log:
        "results/logs/comm/{comm}.log",
    benchmark:
        "results/benchmarks/comm/{comm}.tsv"
    conda:
        SOFTWARE
    threads: lambda wc: comm_jobs.threads(COMM_JOBS[wc.comm], RUNS)
    resources:
        **{key: comm_resource(key) for key in TRAIN_RESOURCE_KEYS},
    params:
        params=lambda wc: cbconfig.canonical_json(
            comm_jobs.job_params(COMM_JOBS[wc.comm], CFG["comm"])
        ),
        workers=lambda wc: COMM_JOBS[wc.comm].workers,
        out_dir=lambda wc, output: dir_of(output.json),
    shell:
        "python -m clusterbench.launch --np {params.workers} -- "
        "python {input.script:q} --params {params.params:q} --out-dir {params.out_dir:q} "
        "> {log:q} 2>&1"
