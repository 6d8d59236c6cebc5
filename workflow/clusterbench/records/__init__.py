"""What the stages wrote, read back: one reader of each record, for every reader of results
(the report, the history, ``clusterbench-compare``).

==========  ======================================================================================
module      the records it reads (and, for their writers, their formats)
==========  ======================================================================================
``runs``    a run's ``run.json`` and ``metrics.jsonl`` (the train stage), its evaluation's
            ``metrics.json`` (the evaluate stage)
``comm``    a comm job's ``comm.json`` (the comm stage), whose format the stage writes from here
==========  ======================================================================================

Every reader checks what it reads and raises an error naming the file, the line or field and
what is wrong. The standard library only: the readers give plain values, each caller makes its
own tables of them.
"""
