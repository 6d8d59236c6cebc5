# clusterbench: dataset -> preprocess -> data-parallel training (Horovod or DDP) -> evaluation
# -> PDF report.
#
#   snakemake --profile profiles/local      (or profiles/slurm, profiles/sge, profiles/ssh)
#
# The workflow never changes with the cluster: profiles choose the executor, and the train rule's
# launcher (clusterbench.launch) reads whatever allocation it runs in.
from snakemake.utils import min_version

min_version("9.17")


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/download.smk"
include: "rules/preprocess.smk"
include: "rules/train.smk"
include: "rules/comm.smk"
include: "rules/evaluate.smk"
include: "rules/history.smk"
include: "rules/report.smk"
include: "rules/best.smk"


# The default target: the first rule of this file (rules from included files never are). No
# `default_target: True`: as a module of another workflow (README, "Use it as a module") that
# would take the including workflow's default target over.
rule all:
    input:
        "results/report/report.pdf",
        "results/best/summary.json",
