"""One rank's work: the single-trace analysis cut to what the set needs (runs in a worker process).

Everything here crosses a process (or Ray) boundary as plain data: a task is a
dict, the answer is ``RankSummary.model_dump()``, an error is re-raised in the
parent from its message (docs/ARCHITECTURE.md, "Trace sets").
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Optional

from mcp_server.tracesets.models import LayerTime, RankSummary

#: module types that are a model's repeated layer (decoder layers, transformer blocks)
_LAYER_TYPE = re.compile(r"(DecoderLayer|EncoderLayer|TransformerBlock|Layer|Block)$")


@dataclass(frozen=True)
class RankTask:
    rank: int
    path: str
    categories: Optional[str] = None
    reference_trace: Optional[str] = None
    output_xlsx: Optional[str] = None
    overwrite: bool = False
    #: ``KERNELSCOPE_TRACE_SPLIT`` for this rank: "off" where the ranks already fill the cores (a large
    #: trace would otherwise start a second decode process per rank); None leaves it as it is
    trace_split: Optional[str] = None


def layer_instances(tree: list[Any]) -> tuple[list[LayerTime], str]:
    """The model's layers in order: the repeated sibling module type holding the most kernel time.

    A type counts when at least two of its instances share one parent; a name ending in Layer/Block
    wins over other repeated types (the Linears inside an attention block repeat too)."""
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for n in tree:
        parent = n.path.rpartition("/")[0]
        groups[(parent, n.type)].append(n)
    repeated = [nodes for nodes in groups.values() if len(nodes) >= 2]
    if not repeated:
        return [], ""
    nodes = max(repeated, key=lambda ns: (bool(_LAYER_TYPE.search(ns[0].type)), sum(n.total_us for n in ns)))
    return [LayerTime(index=i, name=n.name, us=n.total_us) for i, n in enumerate(nodes)], f"module type {nodes[0].type}"


def graph_layers(res: Any) -> tuple[list[LayerTime], str]:
    """Layers of CUDA-graph replays from the analyzer's layer cut (the kernel table's ``layer`` column)."""
    if not res.graph.layers_found:
        return [], ""
    df = res.kernels
    if df is None or "layer" not in df.columns:
        return [], ""
    sums = df[df["layer"] >= 0].groupby("layer")["dur_us"].sum()
    return ([LayerTime(index=int(k), name=f"layer {int(k)}", us=float(v)) for k, v in sums.items()],
            f"CUDA-graph layer cut ({res.graph.layer_cut})")


def summarize_rank(task: dict[str, Any]) -> dict[str, Any]:
    """Analyse one rank's trace; the ``RankSummary`` as a plain dict."""
    from mcp_server.core.atomic import forced_writes
    from mcp_server.traces import analyze_trace  # the public entry: its read-ahead starts before the imports

    t = RankTask(**task)
    if t.trace_split is not None:
        import os

        os.environ["KERNELSCOPE_TRACE_SPLIT"] = t.trace_split  # a worker process of its own
    with forced_writes(t.overwrite):
        res = analyze_trace(t.path, output_xlsx=t.output_xlsx, categories=t.categories,
                            reference_trace=t.reference_trace)
    from mcp_server.tracesets.collectives import rank_collectives

    layers, source = layer_instances(res.tree)
    if not layers:
        layers, source = graph_layers(res)
    comm_source, comm, comm_meta, overlap = rank_collectives(res, layers)
    summary = RankSummary(
        rank=t.rank, path=t.path, device=res.device, total_kernel_us=res.total_kernel_us,
        kernel_count=res.kernel_count, unattributed_us=res.unattributed_us,
        modules={n.path: (n.name, n.type, n.depth, n.total_us) for n in res.tree},
        layers=layers, layer_source=source, categories={c.category: c.total_us for c in res.categories},
        warnings=res.warnings, output_xlsx=res.output_xlsx, collective_source=comm_source, collectives=comm,
        collective_meta=comm_meta, collective_overlap=overlap, breakdown=res.breakdown)
    return summary.model_dump(mode="json")
