"""Multi-rank trace sets on the committed four-rank H200 sets (tests/fixtures/tracesets, made with gloo).

Planted by tools/make_rank_traces.py: `straggler` (rank 1 does extra work in every decoder layer's MLP),
`moving` (layer L's extra work on rank L % 4), `tokens` (rank 3 has 8x the tokens), `balanced`.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from mcp_server.core.errors import TraceSetError
from mcp_server.traces import analyze_trace
from mcp_server.tracesets.analyze import analyze_trace_set, compare_trace_sets, rank_report_path
from mcp_server.tracesets.discover import resolve_ranks

SETS = FIXTURES / "tracesets"


def _set(name: str) -> list[str]:
    return [str(SETS / name)]


@pytest.fixture(scope="module")
def results():
    return {name: analyze_trace_set(_set(name)) for name in ("balanced", "straggler", "moving", "tokens")}


def _rewrite(src: Path, dst: Path, edit) -> Path:
    data = json.loads(gzip.decompress(src.read_bytes()))
    edit(data)
    dst.write_bytes(gzip.compress(json.dumps(data).encode(), compresslevel=1))
    return dst


# --------------------------------------------------------------------------- finding ranks


def test_ranks_from_distributed_info():
    refs, world, warnings = resolve_ranks(_set("balanced"))
    assert [r.rank for r in refs] == [0, 1, 2, 3]
    assert world == 4 and warnings == []
    assert all(r.rank_source == "distributedInfo" and Path(r.path).name == f"llama-TP-{r.rank}.trace.json.gz"
               for r in refs)


def test_glob_and_files_give_the_same_set():
    by_glob, _, _ = resolve_ranks([str(SETS / "tokens" / "llama-TP-*.trace.json.gz")])
    by_files, _, _ = resolve_ranks([str(p) for p in sorted((SETS / "tokens").iterdir()) if p.name.endswith(".gz")])
    assert [r.path for r in by_glob] == [r.path for r in by_files]
    assert len(by_glob) == 4


def test_rank_from_file_name_with_a_warning(tmp_path):
    for rank in (0, 2):
        _rewrite(SETS / "balanced" / f"llama-TP-{rank}.trace.json.gz", tmp_path / f"run-TP-{rank}.trace.json.gz",
                 lambda d: d.pop("distributedInfo"))
    refs, world, warnings = resolve_ranks([str(tmp_path)])
    assert [(r.rank, r.rank_source) for r in refs] == [(0, "file name"), (2, "file name")]
    assert world is None
    assert [w.code for w in warnings] == ["rank_from_filename"]
    assert "run-TP-2.trace.json.gz -> 2" in warnings[0].message


def test_partial_set_warns_which_ranks_are_missing(tmp_path):
    for rank in (0, 3):
        shutil.copy(SETS / "moving" / f"llama-TP-{rank}.trace.json.gz", tmp_path)
    refs, world, warnings = resolve_ranks([str(tmp_path)])
    assert world == 4 and [r.rank for r in refs] == [0, 3]
    assert [w.code for w in warnings] == ["ranks_missing"]
    assert warnings[0].message.endswith("missing: 1, 2")


def test_duplicate_rank_refused(tmp_path):
    shutil.copy(SETS / "balanced" / "llama-TP-1.trace.json.gz", tmp_path / "a.json.gz")
    shutil.copy(SETS / "straggler" / "llama-TP-1.trace.json.gz", tmp_path / "b.json.gz")
    with pytest.raises(TraceSetError, match="rank 1 appears twice"):
        resolve_ranks([str(tmp_path)])


def test_mixed_world_sizes_refused(tmp_path):
    shutil.copy(SETS / "balanced" / "llama-TP-0.trace.json.gz", tmp_path)

    def eight(d):
        d["distributedInfo"]["world_size"] = 8

    _rewrite(SETS / "balanced" / "llama-TP-1.trace.json.gz", tmp_path / "llama-TP-1.trace.json.gz", eight)
    with pytest.raises(TraceSetError, match="different world sizes"):
        resolve_ranks([str(tmp_path)])


def test_no_rank_anywhere_refused(tmp_path):
    _rewrite(SETS / "balanced" / "llama-TP-0.trace.json.gz", tmp_path / "trace.json.gz",
             lambda d: d.pop("distributedInfo"))
    with pytest.raises(TraceSetError, match="no distributedInfo.rank and its file name carries no rank"):
        resolve_ranks([str(tmp_path)])


def test_empty_directory_and_unmatched_glob_refused(tmp_path):
    with pytest.raises(TraceSetError, match="no trace files"):
        resolve_ranks([str(tmp_path)])
    with pytest.raises(TraceSetError, match="matches no file"):
        resolve_ranks([str(tmp_path / "*.json.gz")])


# --------------------------------------------------------------------------- the planted cases


def test_fixed_straggler_named(results):
    st = results["straggler"].straggler
    assert (st.rank, st.kind) == (1, "fixed")
    assert st.slow_layers == {0: 1, 1: 1, 2: 1, 3: 1}
    mlps = [m for m in results["straggler"].modules if m.type == "LlamaMLP"]
    assert len(mlps) == 4 and all(m.slowest_rank == 1 and m.imbalance > 1.8 for m in mlps)


def test_more_tokens_is_a_fixed_straggler_too(results):
    st = results["tokens"].straggler
    assert (st.rank, st.kind) == (3, "fixed")
    assert results["tokens"].ranks[0].rank == 3  # slowest first


def test_moving_slow_rank_named(results):
    res = results["moving"]
    assert (res.straggler.rank, res.straggler.kind) == (None, "moving")
    assert res.straggler.slow_layers == {0: 0, 1: 1, 2: 2, 3: 3}
    for layer in res.layers:
        assert layer.slowest_rank == layer.index and layer.imbalance > 1.2
    # the rank totals barely differ: only the per-layer view shows it
    assert max(r.vs_mean for r in res.ranks) < 1.01


def test_lists_are_largest_first(results):
    res = results["tokens"]
    for rows in (res.layers, res.modules):
        assert [r.excess_us for r in rows] == sorted((r.excess_us for r in rows), reverse=True)
    assert [c.mean_us for c in res.categories] == sorted((c.mean_us for c in res.categories), reverse=True)


def test_balanced_set_has_no_straggler(results):
    st = results["balanced"].straggler
    assert (st.rank, st.kind) == (None, None)
    assert max(x.imbalance for x in results["balanced"].layers) < 1.05
    assert "no layer over the 1.05x threshold" in st.evidence


def test_per_rank_figures_are_the_single_trace_analysis(results):
    res = results["straggler"]
    for row in res.ranks:
        one = analyze_trace(row.path)
        assert row.total_kernel_us == one.total_kernel_us and row.kernel_count == one.kernel_count
        layer_nodes = [n for n in one.tree if n.type == "LlamaDecoderLayer"]
        in_order = sorted(res.layers, key=lambda x: x.index)
        assert [x.per_rank_us[row.rank] for x in in_order] == [n.total_us for n in layer_nodes]
        by_cat = {c.category: c.per_rank_us[row.rank] for c in res.categories}
        assert by_cat == {c.category: c.total_us for c in one.categories}
    assert res.total_kernel_us == pytest.approx(sum(r.total_kernel_us for r in res.ranks))
    assert res.layer_source == "module type LlamaDecoderLayer"


def test_executors_agree(results):
    inline = analyze_trace_set(_set("moving"), executor="inline")
    one_worker = analyze_trace_set(_set("moving"), workers=1)
    drop = {"executor", "workers"}
    assert inline.model_dump(exclude=drop) == results["moving"].model_dump(exclude=drop)
    assert one_worker.model_dump(exclude=drop) == results["moving"].model_dump(exclude=drop)
    assert (inline.executor, inline.workers, one_worker.workers) == ("inline", 1, 1)


def test_progress_per_rank():
    seen = []
    analyze_trace_set(_set("tokens"), progress=lambda d, t, m=None: seen.append((d, t, m)))
    assert seen[0][0] == 0 and seen[-1][:2] == (4, 4)
    assert sorted(m for d, _t, m in seen if d) == [f"rank {r} done" for r in range(4)]


# --------------------------------------------------------------------------- failures stay per rank


def test_one_bad_rank_is_reported_and_the_others_analysed(tmp_path):
    for rank in (0, 1, 3):
        shutil.copy(SETS / "straggler" / f"llama-TP-{rank}.trace.json.gz", tmp_path)
    whole = gzip.decompress((SETS / "straggler" / "llama-TP-2.trace.json.gz").read_bytes())
    (tmp_path / "llama-TP-2.trace.json.gz").write_bytes(gzip.compress(whole[: len(whole) // 2]))  # cut mid-events
    res = analyze_trace_set([str(tmp_path)])
    assert [f.rank for f in res.failed] == [2]
    assert "trace" in res.failed[0].error.lower()
    assert sorted(r.rank for r in res.ranks) == [0, 1, 3]
    assert "rank_failed" in [w.code for w in res.warnings]
    assert (res.straggler.rank, res.straggler.kind) == (1, "fixed")


def test_worker_memory_limit_bounds_each_rank():
    with pytest.raises(TraceSetError, match="no rank could be analysed; rank 0: out of memory under the worker's "
                                            "address-space limit"):
        analyze_trace_set(_set("balanced"), worker_memory="64M", workers=2)


# --------------------------------------------------------------------------- outputs


def test_summary_workbook_rank_reports_and_heat_map(tmp_path):
    from openpyxl import load_workbook

    out = tmp_path / "set.xlsx"
    res = analyze_trace_set(_set("straggler"), output_xlsx=str(out), output_html=str(tmp_path / "set.html"))
    wb = load_workbook(out, read_only=True)
    assert wb.sheetnames == ["Ranks", "Straggler", "Layers", "Modules", "Categories", "GPU Time"]
    rows = list(wb["Layers"].iter_rows(values_only=True))
    assert rows[0][:6] == ("Layer", "Name", "rank 0 (us)", "rank 1 (us)", "rank 2 (us)", "rank 3 (us)")
    assert [r[7] for r in rows[1:]] == [1, 1, 1, 1]  # slowest rank of every layer
    for rank in range(4):
        p = Path(rank_report_path(out, rank))
        assert p.name == f"set.rank{rank}.xlsx" and p.stat().st_size > 0
        assert "Module Tree" in load_workbook(p, read_only=True).sheetnames
    assert {r.output_xlsx for r in res.ranks} == {rank_report_path(out, r) for r in range(4)}
    page = (tmp_path / "set.html").read_text()
    assert page.count("<th>rank ") == 8  # the layer and module heat maps, 4 rank columns each
    assert "straggler: rank 1 (fixed)" in page


# --------------------------------------------------------------------------- two runs


def test_compare_runs_rank_by_rank():
    cmp = compare_trace_sets(str(SETS / "balanced"), str(SETS / "straggler"))
    assert cmp.labels == ["balanced", "straggler"]
    assert cmp.ranks[0].rank == 1  # the largest change first
    a = {r.rank: r.total_kernel_us for r in cmp.a.ranks}
    b = {r.rank: r.total_kernel_us for r in cmp.b.ranks}
    assert {r.rank: r.delta_us for r in cmp.ranks} == {k: b[k] - a[k] for k in a}
    top_mlp = next(m for m in cmp.modules if m.type == "LlamaMLP")
    assert top_mlp.b_slowest_rank == 1 and top_mlp.delta_max_us > 25
    assert cmp.slowest_rank_delta_us == pytest.approx(max(b.values()) - max(a.values()))
    assert (cmp.a.straggler.kind, cmp.b.straggler.rank) == (None, 1)


def test_compare_refuses_the_same_run_twice():
    with pytest.raises(TraceSetError, match="share trace files"):
        compare_trace_sets(str(SETS / "moving"), str(SETS / "moving" / "*.gz"))


# --------------------------------------------------------------------------- Ray


def test_ray_executor_equals_the_process_pool(results):
    """A local Ray instance (two CPUs) gives the process pool's result, with progress as tasks finish."""
    pytest.importorskip("ray")
    seen = []
    res = analyze_trace_set(_set("straggler"), executor="ray", workers=2,
                            progress=lambda d, t, m=None: seen.append(m))
    drop = {"executor", "workers"}
    assert res.model_dump(exclude=drop) == results["straggler"].model_dump(exclude=drop)
    assert (res.executor, res.workers) == ("ray", 2)
    assert sorted(m for m in seen if m and m.endswith("done")) == [f"rank {r} done" for r in range(4)]


def test_ray_task_failure_keeps_the_others(tmp_path):
    pytest.importorskip("ray")
    for rank in (0, 2, 3):
        shutil.copy(SETS / "tokens" / f"llama-TP-{rank}.trace.json.gz", tmp_path)
    whole = gzip.decompress((SETS / "tokens" / "llama-TP-1.trace.json.gz").read_bytes())
    (tmp_path / "llama-TP-1.trace.json.gz").write_bytes(gzip.compress(whole[: len(whole) // 3]))
    res = analyze_trace_set([str(tmp_path)], executor="ray", workers=2)
    assert [f.rank for f in res.failed] == [1]
    assert "\n" not in res.failed[0].error and "trace" in res.failed[0].error.lower()
    assert (res.straggler.rank, res.straggler.kind) == (3, "fixed")


def test_summary_of_many_ranks_keeps_the_slowest_in_the_rank_maps(tmp_path):
    """40 ranks: the default answer keeps per-rank figures for the 10 slowest ranks and the fastest only."""
    from mcp_server.faces.registry import operations, shape
    for r in range(40):
        src = SETS / ("tokens" if r == 0 else "balanced") / f"llama-TP-{3 if r == 0 else r % 4}.trace.json.gz"

        def renumber(d, r=r):
            d["distributedInfo"].update(rank=r, world_size=40)

        _rewrite(src, tmp_path / f"big-TP-{r}.trace.json.gz", renumber)
    op = next(o for o in operations() if o.tool == "analyze_trace_set")
    req = op.make_request({"paths": [str(tmp_path / "*.trace.json.gz")]})
    full = op.call(req)
    assert full.rank_count == 40 and all(len(m.per_rank_us) == 40 for m in full.modules)
    answer = shape(full, req)
    assert len(answer.model_dump_json()) < 16 * 1024
    shown = {r.rank for r in full.ranks[:10]} | {full.ranks[-1].rank}
    assert 0 in shown and all(set(m.per_rank_us) == shown for m in answer.modules)
    assert answer.modules[0].imbalance == pytest.approx(full.modules[0].imbalance, rel=1e-5)  # over all ranks
    note = answer.warnings[-1]
    assert note.code == "summary_truncated" and "per_rank_us maps keep 11 of 40 ranks" in note.message
    assert answer.straggler.rank == 0 and answer.straggler.kind == "fixed"


def test_ray_address_nothing_listens_on_fails_fast():
    pytest.importorskip("ray")
    from mcp_server.core.errors import SourceError

    with pytest.raises(SourceError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        analyze_trace_set(_set("balanced"), executor="ray", ray_address="127.0.0.1:1")


# --------------------------------------------------------------------------- over MCP


def test_tools_answer_a_summary_under_16_kb():
    import anyio
    from mcp import Client

    from mcp_server.faces.server import mcp

    async def go():
        async with Client(mcp) as c:
            one = await c.call_tool("analyze_trace_set", {"paths": [str(SETS / "moving")]})
            two = await c.call_tool("compare_trace_sets", {"a": str(SETS / "balanced"), "b": str(SETS / "tokens")})
            bad = await c.call_tool("analyze_trace_set", {"paths": [str(SETS / "nope")]})
            return one, two, bad

    one, two, bad = anyio.run(go)
    assert not one.is_error and not two.is_error
    for answer in (one, two):
        assert len(json.dumps(answer.structured_content)) < 16 * 1024
    assert one.structured_content["straggler"]["kind"] == "moving"
    assert one.structured_content["modules"][0]["per_rank_us"].keys() == {"0", "1", "2", "3"}
    assert two.structured_content["b"]["straggler"]["rank"] == 3
    assert bad.is_error and "trace file not found" in bad.content[0].text


# --------------------------------------------------------------------------- the CLI routes sets to these verbs


def test_cli_analyze_and_compare_route_sets(capsys):
    from mcp_server.faces.cli import main

    assert main(["analyze", str(SETS / "tokens"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["straggler"]["rank"] == 3
    two = [str(SETS / "moving" / f"llama-TP-{r}.trace.json.gz") for r in (0, 1)]
    assert main(["analyze", *two, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rank_count"] == 2
    # one file and an option that takes a file: still the single-trace verb
    assert main(["analyze", two[0], "--reference-trace", two[1], "--json"]) == 0
    assert "tree" in json.loads(capsys.readouterr().out)
    assert main(["compare", str(SETS / "balanced"), str(SETS / "moving"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labels"] == ["balanced", "moving"] and out["b"]["straggler"]["kind"] == "moving"
    assert main(["compare", two[0], two[1], "--json"]) == 0  # two files: the module diff
    assert "blocks" in json.loads(capsys.readouterr().out)


# --------------------------------------------------------------------------- a stopped call takes its ranks along


def _children(pid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_a_stopped_call_takes_its_rank_workers_along(tmp_path):
    """The server stops a call (cancel or time limit: both kill its worker); the rank workers it started die too."""
    import os
    import threading
    import time

    from mcp_server.faces.registry import operations
    from mcp_server.faces.workers import WorkerLimitError, WorkerPool

    src = SETS / "balanced" / "llama-TP-0.trace.json.gz"
    stripped = _rewrite(src, tmp_path / "one.json.gz", lambda d: d.pop("distributedInfo"))
    for r in range(160):
        shutil.copy(stripped, tmp_path / f"run-TP-{r}.trace.json.gz")
    stripped.unlink()
    op = next(o for o in operations() if o.tool == "analyze_trace_set")
    pool = WorkerPool(size=1)
    seen: set[int] = set()
    errors: list[BaseException] = []

    def call():
        try:
            pool.call(op, {"paths": [str(tmp_path)], "workers": 2}, cancelled=lambda: bool(seen))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    while t.is_alive():
        for worker in _children(os.getpid()):
            seen |= _children(worker)  # the rank workers (and the pool's resource tracker)
        time.sleep(0.05)
    t.join()
    pool.close()
    assert errors and isinstance(errors[0], WorkerLimitError) and "its worker was stopped" in str(errors[0])
    assert seen, "the rank workers were never seen"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in seen):
        time.sleep(0.1)
    alive = [p for p in seen if Path(f"/proc/{p}").exists()
             and "Z" not in (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[:1])]
    assert alive == []


def test_cuda_graph_decode_ranks_use_the_layer_cut(tmp_path):
    """Graph replays carry no module spans: layers come from the analyzer's layer cut (graph.layers_found)."""
    from conftest import TRACES

    for rank in (0, 1):
        shutil.copy(TRACES / "llama_decode_graph.json.gz", tmp_path / f"decode-TP-{rank}.trace.json.gz")
    res = analyze_trace_set([str(tmp_path)])
    one = analyze_trace(TRACES / "llama_decode_graph.json.gz")
    assert res.layer_source == "CUDA-graph layer cut (period)"
    assert len(res.layers) == one.graph.layers_found == 2
    per_layer = one.kernels[one.kernels["layer"] >= 0].groupby("layer")["dur_us"].sum()
    assert [x.per_rank_us[1] for x in sorted(res.layers, key=lambda x: x.index)] == [float(v) for v in per_layer]
    assert (res.straggler.rank, res.straggler.kind) == (None, None)  # the same trace twice: balanced
    assert [w.code for w in res.warnings][:1] == ["rank_from_filename"]


# --------------------------------------------------------------------------- collectives (tp4_gloo sets: host-side gloo all-reduces)


def test_collectives_name_the_late_rank_and_the_others_wait_after_its_slow_layers():
    """Rank 2 does ~3 ms of host work at the start of every layer: it arrives last at each layer's first
    all-reduce, and the other ranks wait there."""
    res = analyze_trace_set(_set("tp4_gloo_straggler"))
    c = res.collectives
    assert c is not None and c.source == "host c10d ops (gloo)"
    assert (c.matched, c.unmatched, c.ranks) == (8, 0, 4)  # 2 all-reduces x 4 layers on every rank
    assert c.straggler_rank == 2 and "in 4 of 4 layers" in c.evidence
    for layer in c.layers:
        assert layer.late_rank == 2
        assert all(layer.per_rank_wait_us[r] > 2000 for r in (0, 1, 3))  # microseconds
        assert layer.per_rank_wait_us[2] < 1000
    firsts = [i for i in c.instances if i.index % 2 == 0]  # o_proj's all-reduce opens each layer
    assert len(firsts) == 4 and all(i.last_rank == 2 and i.lateness_us > 2000 for i in firsts)
    rank2 = next(r for r in c.per_rank if r.rank == 2)
    assert rank2.last_count >= 4 and rank2.transfer_us is None and rank2.overlap is None
    # the module-time reading sees nothing: the extra work is on the host, the kernels are the same
    assert res.straggler.kind is None


def test_collectives_without_a_planted_straggler():
    c = analyze_trace_set(_set("tp4_gloo")).collectives
    assert c is not None and c.straggler_rank is None
    # rank 3 started its step late (the profiler's start on it), seen at the first layer only
    late = [x for x in c.layers if x.late_rank is not None]
    assert [(x.index, x.late_rank) for x in late] == [(0, 3)]
    assert "a local delay, not a straggler rank" in c.evidence


def test_collectives_of_communication_kernels_match_across_ranks(tmp_path):
    """The NCCL path on the one NCCL trace there is (rank 0 of a TP=2 run) given twice: 32 all-reduce
    kernels per rank matched in order, none late, transfer = kernel time."""
    from conftest import TRACES

    for rank in (0, 1):
        _rewrite(TRACES / "tp2_decode_mixed.json.gz", tmp_path / f"tp-TP-{rank}.trace.json.gz",
                 lambda d: d.pop("distributedInfo", None))
    c = analyze_trace_set([str(tmp_path)]).collectives
    one = analyze_trace(TRACES / "tp2_decode_mixed.json.gz").kernels
    comm = one[one["category"] == "communication"]
    assert c is not None and c.source == "communication kernels"
    assert c.matched == len(comm) == 32 and c.unmatched == 0
    assert {i.kind for i in c.instances} == {"AllReduce"}
    assert c.straggler_rank is None and all(i.max_wait_us == 0 for i in c.instances)
    for r in c.per_rank:
        assert r.transfer_us == pytest.approx(float(comm["dur_us"].sum()), abs=0.01)  # us; ts at 5e12 us
        assert r.overlap is not None and 0 <= r.overlap <= 1
    assert sorted(x.index for x in c.layers) == [0, 1, 2, 3]


def test_sets_without_collectives_have_none(results):
    assert results["straggler"].collectives is None


def test_overlap_share_matches_a_direct_sum():
    """The vectorised overlap (union of compute kernels on other streams, prefix sums) against a plain loop."""
    import numpy as np
    import pandas as pd

    from mcp_server.tracesets.collectives import _overlap

    rng = np.random.default_rng(7)
    n = 400
    ts = np.sort(rng.uniform(0, 10_000, n))
    df = pd.DataFrame({"ts_us": ts, "dur_us": rng.uniform(1, 80, n), "stream": rng.choice([7, 20, 21], n),
                       "category": np.where(rng.random(n) < 0.2, "communication", "gemm"), "kind": "kernel"})
    comm = df[df["category"] == "communication"]
    covered = 0.0
    for s, d, st in zip(comm["ts_us"], comm["dur_us"], comm["stream"]):
        other = df[(df["category"] != "communication") & (df["stream"] != st)].sort_values("ts_us")
        union: list[list[float]] = []
        for a, b in zip(other["ts_us"], other["ts_us"] + other["dur_us"]):
            if union and a <= union[-1][1]:
                union[-1][1] = max(union[-1][1], b)
            else:
                union.append([a, b])
        covered += sum(max(0.0, min(s + d, b) - max(s, a)) for a, b in union)
    expected = covered / comm["dur_us"].sum()
    assert 0.05 < expected < 0.95  # the random layout really overlaps, partly
    assert _overlap(df, comm) == pytest.approx(expected, rel=1e-9)


def test_heat_map_shows_the_collective_waits(tmp_path):
    page_path = tmp_path / "gloo.html"
    analyze_trace_set(_set("tp4_gloo_straggler"), output_html=str(page_path))
    page = page_path.read_text()
    assert "<h2>Collective wait per layer (us)</h2>" in page and "<th>late rank</th>" in page
    assert "rank 2 arrives last, by at least 834.8 us, in 4 of 4 layers" in page
    assert "padding-left:20px" in page  # module rows indented by depth (depth 1: LlamaModel_0)


def test_rank_report_paths_follow_the_output_rules(tmp_path):
    out = tmp_path / "set.xlsx"
    (tmp_path / "set.rank2.xlsx").write_text("my notes, not a workbook")
    from mcp_server.core.errors import InputError

    with pytest.raises(InputError, match="set.rank2.xlsx exists and is not xlsx output"):
        analyze_trace_set(_set("balanced"), output_xlsx=str(out))
    assert (tmp_path / "set.rank2.xlsx").read_text() == "my notes, not a workbook" and not out.exists()
    analyze_trace_set(_set("balanced"), output_xlsx=str(out), overwrite=True)
    assert (tmp_path / "set.rank2.xlsx").read_bytes()[:2] == b"PK"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "set.rank3.xlsx").unlink()
    (tmp_path / "set.rank3.xlsx").symlink_to(elsewhere / "x.xlsx")
    with pytest.raises(InputError, match="is a link out of"):
        analyze_trace_set(_set("balanced"), output_xlsx=str(out), overwrite=True)


def test_rank_warnings_name_the_ranks_compactly():
    from mcp_server.tracesets.combine import rank_ranges

    assert rank_ranges([0, 1, 2, 3, 7]) == "0-3, 7" and rank_ranges([9, 1, 3, 4, 5, 10]) == "1, 3-5, 9-10"
    res = analyze_trace_set(_set("tp4_gloo"))
    unattributed = next(w for w in res.warnings if w.code == "unattributed_kernels")
    assert unattributed.message.startswith("ranks 0-3: ")


@pytest.mark.parametrize("dist", [{"rank": "1", "world_size": 4}, {"rank": -1, "world_size": 4}, {"rank": True},
                                  {"rank": 1.0, "world_size": 0}, [1, 2], "rank 1", None])
def test_odd_distributed_info_falls_back_to_the_file_name(tmp_path, dist):
    def odd(d):
        d["distributedInfo"] = dist

    _rewrite(SETS / "balanced" / "llama-TP-1.trace.json.gz", tmp_path / "odd-TP-1.trace.json.gz", odd)
    refs, world, warnings = resolve_ranks([str(tmp_path)])
    assert [(r.rank, r.rank_source) for r in refs] == [(1, "file name")]
    assert world in (None, 4) and [w.code for w in warnings][:1] == ["rank_from_filename"]


# --------------------------------------------------------------------------- collectives matched with evidence (issue 23)


def test_two_ranks_of_a_128_rank_job_give_a_warning_not_waits():
    """Point-to-point SendRecv kernels of two ranks of a 128-rank job, profiled in windows sampled apart
    (tools/make_collective_traits.py): each k-th kernel of rank 1 starts after rank 0's ended, and the other
    126 ranks of the group are absent. Matched by kind and order these gave rank 0 a 2,400 us wait against
    720 us of NCCL time; now nothing is computed and the warning says why."""
    for sub, code in (("p2p_2of128", "collective_group_incomplete"), ("p2p_2of128_bare", "collective_set_unverified")):
        res = analyze_trace_set(_set(sub), executor="inline")
        assert res.collectives is None, sub
        w = next(w for w in res.warnings if w.code == code)
        assert w.count == 6 and "no wait is computed" in w.message
        assert "ranks_missing" in {x.code for x in res.warnings}
    w = next(w for w in analyze_trace_set(_set("p2p_2of128"), executor="inline").warnings
             if w.code == "collective_group_incomplete")
    assert "the set holds 2 of its ranks" in w.message and "ranks 0-1" in w.message


def _tp2_pair(tmp_path, shift_us: float) -> Path:
    """Rank 0's TP=2 NCCL trace as both ranks of a complete 2-rank set, rank 1's clock shifted by ``shift_us``."""
    from conftest import TRACES

    for rank in (0, 1):
        def edit(d, rank=rank):
            d["distributedInfo"]["rank"] = rank
            for e in d["traceEvents"]:
                if rank and "ts" in e:
                    e["ts"] = e["ts"] + shift_us
        _rewrite(TRACES / "tp2_decode_mixed.json.gz", tmp_path / f"tp-{rank}.trace.json.gz", edit)
    return tmp_path


def test_collective_waits_never_exceed_the_kernels(tmp_path):
    """Rank 1 runs 2 us behind: each of rank 0's all-reduce kernels waits 2 us for it, within its own kernel,
    and wait + transfer is exactly rank 0's NCCL kernel time."""
    from conftest import TRACES

    res = analyze_trace_set([str(_tp2_pair(tmp_path, 2.0))], executor="inline")
    c = res.collectives
    one = analyze_trace(TRACES / "tp2_decode_mixed.json.gz").kernels
    nccl_us = float(one[one["category"] == "communication"]["dur_us"].sum())
    assert c is not None and c.matched == 32 and c.unmatched == 0
    assert not [w for w in res.warnings if w.code.startswith("collective")]
    r0 = next(r for r in c.per_rank if r.rank == 0)
    assert r0.wait_us == pytest.approx(32 * 2.0, abs=0.01)
    assert r0.wait_us + r0.transfer_us == pytest.approx(nccl_us, abs=0.01)
    assert all(i.last_rank == 1 and i.per_rank_wait_us[0] == pytest.approx(2.0, abs=1e-6) for i in c.instances)


def test_collective_kernels_that_do_not_overlap_are_not_matched(tmp_path):
    """Rank 1's clock 5 ms off (another host, or another window): the k-th all-reduces never overlap, so no
    wait is computed; a warning with the first case instead."""
    res = analyze_trace_set([str(_tp2_pair(tmp_path, 5000.0))], executor="inline")
    assert res.collectives is None
    w = next(w for w in res.warnings if w.code == "collective_no_overlap")
    assert w.count == 32 and "AllReduce #0" in w.message and "before rank 1 started" in w.message


def test_collectives_of_other_sizes_at_one_position_are_not_matched(tmp_path):
    """The same all-reduce position recording other message sizes on the two ranks: a warning, no wait."""
    from conftest import TRACES

    for rank in (0, 1):
        def edit(d, rank=rank):
            d["distributedInfo"]["rank"] = rank
            for e in d["traceEvents"]:
                if rank and e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {}):
                    e["args"]["In msg nelems"] = 8192
        _rewrite(TRACES / "tp2_decode_mixed.json.gz", tmp_path / f"tp-{rank}.trace.json.gz", edit)
    res = analyze_trace_set([str(tmp_path)], executor="inline")
    w = next(w for w in res.warnings if w.code == "collective_mismatch")
    assert w.count == 8 and "4096, 8192 elements" in w.message  # the 8 eager kernels; the 24 replays match
    assert res.collectives is not None and res.collectives.matched == 24
