# clusterbench, run in its checkout: `snakemake --profile profiles/local` (or profiles/slurm,
# profiles/sge, profiles/ssh). The workflow is workflow/Snakefile, Snakemake's standard place,
# where a module deployed from git finds it (docs/running.md); this file includes it, its `all`
# the default target (an included file's rules are not, unless the include says so).
workflow.include("workflow/Snakefile", overwrite_default_target=True)
