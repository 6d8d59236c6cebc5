# clusterbench: dataset -> preprocess -> Horovod training -> evaluation -> PDF report.
#
#   snakemake --profile profiles/local      (or profiles/slurm, profiles/sge)
#
# The workflow never changes with the cluster: profiles choose the executor, and the train rule's
# launcher (clusterbench.launch) reads whatever allocation it runs in.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/download.smk"
include: "rules/preprocess.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        "results/report/report.pdf",
