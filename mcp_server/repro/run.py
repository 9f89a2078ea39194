"""run_repro: time each replayed op of a repro directory and set it beside the trace's kernel time.

The directory's ``repro.py`` runs in a subprocess (argument list, time limit, process group killed on
expiry) with the interpreter of this process; it prints ``progress I N ID`` lines, forwarded as progress,
and writes its timings as JSON. The comparison uses the replay's kernel time (profiler device time of the
kernels one call launches, warm): the trace's figure is kernel time too, so launch overhead does not count.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from mcp_server.core.errors import ReproError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.replay_dir import load_repro_dir
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.repro.models import ReplayTiming, RunReproResult
from mcp_server.repro.requests import RunReproRequest

BAND = (0.8, 1.25)  # replay within 20 % of the trace (either way)


@engine(RunReproRequest)
def run_repro(req: RunReproRequest, progress: ProgressFn | None = None) -> RunReproResult:
    """Replay the ops of a make_repro directory in a subprocess and set their kernel time beside the trace's."""
    from mcp_server.core.proc import stream

    d, doc = load_repro_dir(req.output_dir)  # resolved: repro.py runs with the directory as its cwd
    known = [str(o["id"]) for o in doc["ops"] if isinstance(o, dict) and "id" in o]
    ids = req.only or known
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ReproError(f"unknown op id(s) {unknown[:5]}; this directory holds {known[:20]}", path=d)
    if not ids:
        raise ReproError("the directory holds no rebuilt op", path=d)
    fd, out_json = tempfile.mkstemp(prefix="replay-", suffix=".json")
    os.close(fd)

    def line(text: str) -> None:
        parts = text.split()
        if progress and len(parts) == 4 and parts[0] == "progress":
            progress(float(parts[1]), float(parts[2]), f"replaying {parts[3]}")

    import time

    deadline = time.monotonic() + req.timeout_s
    rows: list[dict] = []
    todo = list(ids)
    try:
        while todo:  # a CUDA error that loses the context (exit 3) ends a run; the rest go to a fresh process
            left = deadline - time.monotonic()
            res = stream([sys.executable, str(d / "repro.py"), "--device", req.device, "--iters", str(req.iters),
                          "--cache", req.cache, "--json", out_json, "--progress", "--only", *todo],
                         timeout=max(left, 0.1), on_line=line, cwd=str(d))
            if res.timed_out:
                raise ReproError(f"the replay ran past timeout_s={req.timeout_s:g} and was stopped", path=d,
                                 hint="replay fewer ops (only=[...]) or fewer iters, or raise timeout_s")
            if res.rc not in (0, 3) or not os.path.getsize(out_json):
                tail = (res.stderr.strip().splitlines() or ["no output"])[-1][:300]
                raise ReproError(f"repro.py failed with exit code {res.rc}: {tail}", path=d / "repro.py",
                                 hint="run `python repro.py` in the directory to see the whole error")
            got = json.loads(Path(out_json).read_text(encoding="utf-8")).get("ops", [])
            rows += got
            done = {r.get("id") for r in got}
            todo = [i for i in todo if i not in done] if res.rc == 3 and got else []
    finally:
        Path(out_json).unlink(missing_ok=True)
    return summarize(d, doc, {"ops": rows}, req.device)


def summarize(d: Path, doc: dict, data: dict, device: str) -> RunReproResult:
    """The replay's timings (``repro.py --json``) beside the trace's, with the band check."""
    calls = {o["id"]: int(o.get("calls", 1)) for o in doc["ops"] if isinstance(o, dict) and "id" in o}
    rows, warnings = [], []
    for r in data.get("ops", []):
        t = ReplayTiming(id=r["id"], name=r["name"], trace_us=float(r["trace_us"]),
                         replay_kernel_us=r.get("replay_kernel_us"), replay_warm_us=r.get("replay_warm_us"),
                         replay_cold_us=r.get("replay_cold_us"), kernels=r.get("kernels", [])[:8],
                         error=r.get("error", ""))
        got = t.replay_kernel_us if t.replay_kernel_us is not None else t.replay_warm_us
        cold = t.replay_kernel_cold_us = r.get("replay_kernel_cold_us")
        if t.error:
            warnings.append(Warning_(code=WarningCode.replay_failed, message=f"{t.id} ({t.name}): {t.error}"))
        elif got and t.trace_us > 0 and device != "cpu":  # a CPU replay times other hardware: no ratio
            t.ratio = round(got / t.trace_us, 4)
            t.ratio_cold = round(cold / t.trace_us, 4) if cold else None
            t.band = ("warm" if BAND[0] <= t.ratio <= BAND[1] else
                      "cold" if t.ratio_cold is not None and BAND[0] <= t.ratio_cold <= BAND[1] else "")
            t.within_band = bool(t.band)
            if not t.within_band:
                why = ("launch-bound: the op's kernels are shorter than the launch overhead"
                       if t.trace_us < 5 and t.replay_kernel_us is None else
                       "a different library or kernel choice (compare `kernels` with the trace's), a cache state "
                       "neither warm nor cold reproduces (the model's neighbours), or different clocks")
                cold_txt = f", cold {cold:.2f} us ({t.ratio_cold:.2f}x)" if cold and t.ratio_cold else ""
                warnings.append(Warning_(code=WarningCode.replay_differs, message=(
                    f"{t.id} ({t.name}): replay {got:.2f} us{cold_txt} vs trace {t.trace_us:.2f} us per call "
                    f"({t.ratio:.2f}x): {why}")))
        rows.append(t)
    replayed = sum(t.trace_us * calls.get(t.id, 1) for t in rows)
    inside = sum(t.trace_us * calls.get(t.id, 1) for t in rows if t.within_band)
    return RunReproResult(output_dir=str(d), device=device, ops=rows, replayed_trace_us=round(replayed, 3),
                          within_band_pct=round(100 * inside / replayed, 2) if replayed else 0.0, warnings=warnings)
