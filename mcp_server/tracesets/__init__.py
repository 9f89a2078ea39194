"""Multi-rank trace sets: one trace per rank, analysed in parallel and read across ranks.

``analyze_trace_set`` finds the rank of every trace (``distributedInfo``, else the
file name), runs the single-trace analyzer on each in its own worker process (or a
Ray task), and combines the per-rank summaries: per module and per layer the time
on every rank, the slowest rank and the imbalance, whether one rank is the
straggler or the slow rank moves. ``compare_trace_sets`` reads two runs rank by
rank. See docs/ARCHITECTURE.md, "Trace sets".
"""
