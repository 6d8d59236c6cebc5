# Evaluating while training (evaluate.every_minutes): a job of its own beside each training,
# started when its training's is (it reads the same data and code stamps, none of the training's
# outputs), that asks the running training for its newest weights every every_minutes and
# evaluates them (clusterbench.watch; the training's side: clusterbench.training.lending).
# Locally (the local and ssh profiles) it takes no core and no timing slot, so it runs beside
# the timed training, which they keep from everything else: the training waits while it
# evaluates (they share the node), and that time counts neither in its epochs nor in its time
# box. On Slurm and SGE it is a one-CPU job sized to outlast its training (the run's runtime and
# half an hour); the training waits only where the two land on one node. Its rerun trigger is
# the run's training slice (it reruns with its training) and the evaluate settings.
from clusterbench.pipeline.commands import watch_command


rule watch:
    input:
        script=script("watch"),
        code=stage_code("watch"),
        # the training's code stamps: a training to come is one made from newer files
        train_code=stage_code("train", "training"),
        known=lambda wc: [local(path) for path in PIPELINE.known_run(wc)],
        data=PIPELINE.data_input(),
    output:
        "results/watch/{run}/watch.json",
    log:
        "results/logs/watch/{run}.log",
    benchmark:
        "results/benchmarks/watch/{run}.tsv"
    priority: PIPELINE.priority("watch")
    conda:
        SOFTWARE
    threads: PIPELINE.watch_threads
    resources:
        timing_slot=0,
        runtime=PIPELINE.watch_runtime,
        mem_mb=2000,
    params:
        run=lambda wc: cbconfig.canonical_json(cbconfig.train_slice(run_of(wc))),
        settings=lambda wc: cbconfig.canonical_json(CFG["evaluate"]),
        # the job's paths and its deadline: no rerun trigger
        command=lambda wc, input, output: watch_command(
            input.data[-1], output[0], PIPELINE.watch_runtime(wc) - 5
        ),
        inputs=lambda wc, input: [input.train_code, *input.known, *input.data],
    shell:
        "python {input.script:q} --run {params.run:q} --params {params.settings:q} "
        "{params.command} --inputs {params.inputs:q} > {log:q} 2>&1"
