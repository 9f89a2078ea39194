"""Timing: baseline and candidate in interleaved rounds of randomised order until the interval is narrow.

Inputs are copied until one pass over the copies streams >= 3x the last-level cache (cold mode); both
functions are warmed up, their per-call time estimated to size the batches; on CUDA short calls are timed
as graph replays when a replay is > 3 % faster than a launch loop (``graphs='auto'``). Every batch is
bracketed by the harness's own captured timers and device-wide synchronisation (``device``, ``clock``).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

from mcp_server.validate.harness.base import Base, exc_line
from mcp_server.validate.harness.clock import perf_ns
from mcp_server.validate.harness.tensors import tensors

#: Per-call batch length targets (seconds): long enough to hide the timer's own cost.
BATCH_S = {"cuda": 2e-3, "cpu": 4e-3}


@dataclass
class _Plan:
    """How the rounds are run: the input sets per cache mode, the graphs, the method and the batch sizing."""

    fa: Callable[..., Any]
    fb: Callable[..., Any]
    sets: dict[str, list]
    graphs: dict[str, Any]
    method: str
    est: list[float]
    batch_s: float
    rng: random.Random


class Timing(Base):
    def timing(self) -> None:
        cfg = self.cfg
        rng = random.Random(int(cfg["seed"]) ^ 0x5EED)
        cache = cfg["cache"]
        per_shape_args = [self._inputs(shape, int(cfg["seed"]) + 1000 * si + 999)
                          for si, shape in enumerate(cfg["shapes"])]
        if self.is_cuda:
            self._c_sync()
            self.overhead_s = self._gpu_overhead()
        else:
            self.overhead_s = 0.0
        sets = self._input_sets(per_shape_args)
        fa, fb = self.baseline, self.candidate
        est = self._warm_up(fa, fb, per_shape_args)
        method, graphs = self._method(fa, fb, est, sets, cache)
        batch_s = float(cfg.get("batch_s") or BATCH_S["cuda" if self.is_cuda else "cpu"])
        plan = _Plan(fa=fa, fb=fb, sets=sets, graphs=graphs, method=method, est=est, batch_s=batch_s, rng=rng)
        budget = float(cfg["time_budget_s"])
        main = self._rounds(plan, cache, budget, int(cfg["min_rounds"]), int(cfg["max_rounds"]),
                            float(cfg["ci_half_width"]), int(cfg["seed"]))
        main["method"] = method
        main["overhead_s"] = self.overhead_s
        main["other"] = None
        oc = "warm" if cache == "cold" else "cold"
        if cfg.get("other_cache", True) and not (method == "cuda_graph" and graphs[oc] is None):
            n = max(5, min(20, main["rounds"] // 3))
            main["other"] = self._rounds(plan, oc, max(0.5, 0.25 * budget), n, n, 0.0, int(cfg["seed"]) + 1)
        self.result["timing"] = main

    def _input_sets(self, per_shape_args: list[tuple]) -> dict[str, list]:
        """Per cache mode, per shape, the argument tuples one pass runs over: warm one, cold enough copies."""
        t = self.torch
        sets = {"warm": [[a] for a in per_shape_args]}
        copies_cold, partial = self._copies(per_shape_args)
        sets["cold"] = [[a] + [tuple(x.clone() if isinstance(x, t.Tensor) else x for x in a)
                               for _ in range(c - 1)] for a, c in zip(per_shape_args, copies_cold)]
        if partial:
            self.warn("cold_cache_partial", partial)
        return sets

    def _warm_up(self, fa: Callable[..., Any], fb: Callable[..., Any], per_shape_args: list[tuple]) -> list[float]:
        """Both functions warmed up (eager), then the baseline's per-call time per shape, to size the batches."""
        self.progress(0, None, "timing: warm-up")
        for _ in range(3):
            for args in per_shape_args:
                self.call(fa, args, "baseline", "warm-up")
                self.call(fb, args, self.cand_who, "warm-up")
        if self.is_cuda:
            self._c_sync()
        est = []
        for args in per_shape_args:
            est.append(sorted(self._batch(fa, [args], 1, None) for _ in range(5))[2])
        self.result["estimate_s"] = est
        return est

    def _method(self, fa: Callable[..., Any], fb: Callable[..., Any], est: list[float], sets: dict[str, list],
                cache: str) -> tuple[str, dict[str, Any]]:
        """The timing method (cpu_loop, launch_loop or cuda_graph) and, for graphs, those captured per cache mode."""
        method = "cpu_loop"
        graphs: dict[str, Any] = {"cold": None, "warm": None}
        if not self.is_cuda:
            return method, graphs
        method = "launch_loop"
        want = self.cfg["graphs"]
        if want == "on" or (want == "auto" and max(est) < 200e-6):
            need = ("cold", "warm") if self.cfg.get("other_cache", True) else (cache,)
            graphs = {c: self._capture_all(fa, fb, sets[c]) if c in need else None for c in ("cold", "warm")}
            if graphs[cache] is None:
                self.warn("graphs_unavailable", "CUDA-graph capture failed for the baseline or the "
                                                "candidate; timed with a launch loop")
            else:
                method = "cuda_graph"
                if want == "auto" and not self._graphs_pay(fa, fb, sets[cache], graphs[cache]):
                    # GPU-bound already: a launch loop measures the same time without the few
                    # per cent by which separately captured graph instances can differ
                    method = "launch_loop"
                    graphs = {"cold": None, "warm": None}
        return method, graphs

    def _reps(self, plan: _Plan, c: str) -> list[int]:
        """Calls per timed batch, per shape, so a batch lasts about ``batch_s``."""
        per_call = list(plan.est)
        g = plan.graphs[c] if plan.method == "cuda_graph" else None
        sets = plan.sets[c]
        # replays have no launch gaps, and on CUDA a pass over the copies amortises the sync: size the batches
        # from a (replayed) pass
        if g or (self.is_cuda and len(sets[0]) > 1):
            per_call = [sorted(self._batch(plan.fa, argset, 1, g[s]["a"][0] if g else None) for _ in range(3))[1]
                        for s, argset in enumerate(sets)]
        return [max(1, int(round(plan.batch_s / max(e * len(a), 1e-9)))) for e, a in zip(per_call, sets)]

    def _rounds(self, plan: _Plan, c: str, budget_s: float, min_rounds: int, max_rounds: int, target: float,
                seed: int) -> dict:
        """Interleaved rounds in cache mode ``c`` until the interval is narrower than ``target`` or the budget
        ends: per round and shape, baseline and candidate batches in random order after an untimed pass."""
        from mcp_server.validate.stats import sample_adaptively

        reps = self._reps(plan, c)
        per: list[tuple[list[float], list[float]]] = [([], []) for _ in self.cfg["shapes"]]
        g = plan.graphs[c] if plan.method == "cuda_graph" else None
        fa, fb = plan.fa, plan.fb

        def one_round(i: int) -> tuple[float, float]:
            ta = tb = 0.0
            inst = i % 2  # graph instances alternate: A1/B1 (captured 1st, 2nd), A2/B2 (4th, 3rd)
            for s, argset in enumerate(plan.sets[c]):
                ga = g[s]["a"][inst] if g else None
                gb = g[s]["b"][inst] if g else None
                if plan.rng.random() < 0.5:
                    self._batch(fa, argset, 1, ga)  # untimed pass: the GPU is busy, not idle, at t0
                    x = self._batch(fa, argset, reps[s], ga)
                    y = self._batch(fb, argset, reps[s], gb)
                else:
                    self._batch(fb, argset, 1, gb)
                    y = self._batch(fb, argset, reps[s], gb)
                    x = self._batch(fa, argset, reps[s], ga)
                per[s][0].append(x)
                per[s][1].append(y)
                ta += x
                tb += y
            self.check_patches(self.cand_who, "timing")
            return ta, tb

        def on_round(n: int, iv: Any) -> None:
            msg = f"timing ({c}): round {n}"
            if iv is not None:
                msg += f", speedup {iv.median:.4f} [{iv.ci_low:.4f}, {iv.ci_high:.4f}]"
            self.progress(n, None, msg)

        s = sample_adaptively(one_round, budget_s=budget_s, target_half_width=target,
                              min_rounds=min_rounds, max_rounds=max_rounds,
                              confidence=float(self.cfg["confidence"]), seed=seed,
                              clock=lambda: perf_ns() / 1e9, on_round=on_round)
        return {"cache": c, "baseline_s": s.baseline, "candidate_s": s.candidate, "stop": s.stop,
                "rounds": len(s.baseline), "elapsed_s": s.elapsed_s, "reps": reps,
                "copies": [len(x) for x in plan.sets[c]],
                "per_shape": [{"baseline_s": p[0], "candidate_s": p[1]} for p in per]}

    def _copies(self, per_shape_args: list[tuple]) -> tuple[list[int], str]:
        """Input copies per shape so one pass over them streams >= 3x the last-level cache."""
        t = self.torch
        target = 3 * self.l2_bytes
        if self.is_cuda:
            free, _total = t.cuda.mem_get_info()
            cap_bytes = min(4 << 30, free // 4)
        else:
            cap_bytes = 1 << 30
        out = []
        partial = ""
        for args in per_shape_args:
            nbytes = max(1, sum(a.numel() * a.element_size() for a in tensors(args)))
            want = max(1, math.ceil(target / nbytes))
            have = max(1, min(want, 1024, cap_bytes // nbytes))
            if have * nbytes < self.l2_bytes:
                partial = (f"cold mode: {have} input copies stream {have * nbytes / 1e6:.1f} MB per pass, "
                           f"less than the {self.l2_bytes / 1e6:.0f} MB cache: 'cold' times are partly warm")
            out.append(have)
        return out, partial

    def _gpu_overhead(self) -> float:
        vals = []
        stream = self._current_stream()
        for _ in range(25):
            e0 = self._Event(enable_timing=True)
            e1 = self._Event(enable_timing=True)
            self._c_sync()
            self._ev_record(e0, stream)
            self._c_sync()
            self._ev_record(e1, stream)
            self._ev_sync(e1)
            vals.append(self._ev_elapsed(e0, e1) / 1e3)
        vals.sort()
        return vals[len(vals) // 2]

    def _graphs_pay(self, fa: Callable[..., Any], fb: Callable[..., Any], sets_c: list, graphs_c: list) -> bool:
        """True when replaying a graph is > 3 % faster per call than a launch loop (launch-bound) for the
        baseline or the candidate: a side whose host work outlasts its kernels would otherwise be timed as host
        overhead, which a served model's CUDA graphs do not pay."""
        rows = []
        pays = False
        for s, argset in enumerate(sets_c):
            row = {}
            for side, fn, pre in (("a", fa, ""), ("b", fb, "candidate_")):
                g = graphs_c[s][side][0]
                one = max(self._batch(fn, argset, 1, g), 1e-9)
                reps = max(1, int(round(1e-3 / (one * len(argset)))))
                gp = sorted(self._batch(fn, argset, reps, g) for _ in range(3))[1]
                lp = sorted(self._batch(fn, argset, reps, None) for _ in range(3))[1]
                row.update({f"{pre}graph_us": gp * 1e6, f"{pre}loop_us": lp * 1e6})
                pays = pays or lp > 1.03 * gp
            rows.append(row)
        self.result["graph_check"] = rows
        return pays

    def _capture_all(self, fa: Callable[..., Any], fb: Callable[..., Any], sets_c: list) -> list | None:
        """Two CUDA graphs per (shape, function), each replaying one pass over the input copies.

        Captured in the order A1, B1, B2, A2 and alternated by round, so neither side owns the
        first- or last-captured graph (instances of one graph can differ by a few per cent:
        the private memory pool's placement).
        """
        t = self.torch

        def capture(fn: Callable[..., Any], argset: list) -> tuple[Any, list]:
            s = t.cuda.Stream()
            s.wait_stream(self._current_stream())
            with t.cuda.stream(s):
                for args in argset:
                    fn(*args)
            self._current_stream().wait_stream(s)
            self._c_sync()
            g = self._Graph()
            keep = []
            with t.cuda.graph(g):
                for args in argset:
                    keep.append(fn(*args))
            self._c_sync()
            return (g, keep)

        graphs = []
        try:
            for argset in sets_c:
                a1 = capture(fa, argset)
                b1 = capture(fb, argset)
                b2 = capture(fb, argset)
                a2 = capture(fa, argset)
                graphs.append({"a": [a1, a2], "b": [b1, b2]})
        except Exception as exc:  # capture failed: fall back to the launch loop
            try:
                self._c_sync()
            except Exception:
                pass
            self.result.setdefault("graph_error", exc_line(exc))
            return None
        finally:
            self.check_patches(self.cand_who, "graph capture")
        return graphs

    def _batch(self, fn: Callable[..., Any], argset: list, reps: int, graph: Any) -> float:
        """Seconds per call of ``reps`` passes over ``argset`` (device-wide sync inside the region)."""
        n = reps * len(argset)
        if self.is_cuda:
            stream = self._current_stream()
            e0 = self._Event(enable_timing=True)
            e1 = self._Event(enable_timing=True)
            self._c_sync()
            self._ev_record(e0, stream)
            if graph is not None:
                g = graph[0]
                for _ in range(reps):
                    self._graph_replay(g)
            else:
                for _ in range(reps):
                    for args in argset:
                        fn(*args)
            self._c_sync()
            self._ev_record(e1, stream)
            self._ev_sync(e1)
            total = self._ev_elapsed(e0, e1) / 1e3 - self.overhead_s
            return max(total, 1e-9) / n
        t0 = perf_ns()
        for _ in range(reps):
            for args in argset:
                fn(*args)
        return max(perf_ns() - t0, 1) / 1e9 / n
