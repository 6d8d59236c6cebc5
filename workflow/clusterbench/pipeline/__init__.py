"""The workflow's own logic, out of rules/*.smk: testable without a Snakemake run.

```
pipeline/core.py     Pipeline: what the rules call (runs, comm jobs, input, priority and
                     resource functions, the environment for the jobs, the stage code inputs)
pipeline/runs.py     RunPlan: the runs skipped under the executor, those refused
pipeline/checks.py   Checks: files checked against their records before any job
pipeline/code.py     a stage's code as one input (its code stamp)
pipeline/commands.py the train and evaluate jobs' options, one param function each
pipeline/adapter.py  Adapter: what is read from Snakemake's `workflow` (SnakemakeAdapter)
pipeline/layout.py   where the files are
pipeline/software.py what the runs need installed (Horovod), refused at parse time
```

rules/common.smk makes ``Pipeline(config, SnakemakeAdapter(workflow, rules), checkout)``; tests
give it a fake adapter. Imported by the Snakefile: the standard library, yaml and jsonschema
only (no torch: the Snakefile is parsed again in every cluster job).
"""

from clusterbench.pipeline.adapter import Adapter, PlannedJob, SnakemakeAdapter
from clusterbench.pipeline.core import Pipeline

__all__ = ["Adapter", "Pipeline", "PlannedJob", "SnakemakeAdapter"]
