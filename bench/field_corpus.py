#!/usr/bin/env python3
"""Benchmark: kernelscope on every file of the field corpus (profiler data nobody here made).

For each trace (``*.json``, ``*.json.gz``, ``*.json.zst``) it runs ``analyze_trace`` and reports the
kernel count, the kernel total against the raw sum of the GPU events' durations (read here with the
json module, independently of the loader), the share of GPU time attributed to a module, the phase
split, the warnings by code, the GPU time breakdown (busy / idle over its window), wall seconds and
peak RSS. For each Nsight Compute file (``*.ncu-rep``, an ncu CSV) it runs ``parse_ncu`` and
``classify_bottleneck``. Beside each figure, the peer's where one exists:

* TraceLens's ``gpu_timeline.csv`` beside a trace (``<stem>_perf_report_csvs/`` or ``perf_csvs/``):
  its busy and total time against ours (same definition and window);
* a trace with a ``capture_traces/`` folder beside it holding one trace (SGLang's graph capture) is
  analysed a second time with that capture as ``reference_trace``;
* with ``--hta-python PY`` (an interpreter where HolisticTraceAnalysis is installed, outside the
  project), HTA's temporal breakdown (idle) and communication-computation overlap, computed by HTA
  itself; ours is computed again on HTA's own event set (HTA reads the trace, drops what it drops and
  truncates times to integer microseconds), so the two figures are on the same window.

Every file runs in a child process (its own time, peak RSS and time limit), so one file that fails
or hangs does not stop the run; failures are listed with their error.

    .venv/bin/python bench/field_corpus.py [DIR...] [--hta-python /path/to/venv/bin/python]
        [--write bench/RESULTS.md] [--timeout 600]

DIR defaults to ``../shared/field`` relative to the repository root when it exists.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BEGIN = "<!-- field_corpus:begin -->"
END = "<!-- field_corpus:end -->"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


# --------------------------------------------------------------------------- discovery


def _kind(p: Path) -> Optional[str]:
    n = p.name.lower()
    if n.endswith((".json", ".json.gz", ".json.zst")):
        return "trace"
    if n.endswith(".ncu-rep"):
        return "ncu"
    if n.endswith(".csv") and "perf_csvs" not in str(p.parent) and "perf_report_csvs" not in str(p.parent):
        head = p.read_bytes()[:4096].decode("utf-8", "replace")
        if '"Kernel Name"' in head or '"Metric Name"' in head or '"ID"' in head:
            return "ncu"
    return None


def discover(dirs: list[Path]) -> list[tuple[Path, Path, str]]:
    out = []
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if p.is_file() and (k := _kind(p)):
                out.append((d, p, k))
    return out


def tracelens_peer(trace: Path) -> Optional[dict[str, float]]:
    stem = trace.name.split(".json")[0]
    for c in (trace.parent / f"{stem}_perf_report_csvs" / "gpu_timeline.csv", trace.parent / "perf_csvs" /
              "gpu_timeline.csv"):
        if c.is_file():
            import csv

            with c.open(newline="") as f:
                return {r["type"]: float(r["time ms"]) * 1e3 for r in csv.DictReader(f)}
    return None


def capture_reference(trace: Path) -> Optional[Path]:
    """The graph-capture trace profiled beside a replay trace (SGLang's ``capture_traces/``), if exactly one."""
    d = trace.parent / "capture_traces"
    caps = sorted(p for p in d.glob("*.json*")) if d.is_dir() else []
    return caps[0] if len(caps) == 1 and trace.parent != d else None


# --------------------------------------------------------------------------- one file (child process)


def _raw_gpu_sum(path: Path) -> tuple[int, float]:
    """GPU events and the sum of their durations, read with the json module (no kernelscope code)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    elif data[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    doc = json.loads(data)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    n, s = 0, 0.0
    for e in events:
        if isinstance(e, dict) and str(e.get("cat", "")).lower() in GPU_CATS and isinstance(e.get("dur"), (int, float)):
            n += 1
            s += float(e["dur"])
    return n, s


def one_trace(path: Path, ref: Optional[str] = None) -> dict[str, Any]:
    from mcp_server.traces import analyze_trace

    t = time.perf_counter()
    res = analyze_trace(path, reference_trace=ref)
    secs = time.perf_counter() - t
    raw_n, raw_us = _raw_gpu_sum(path)
    b = res.breakdown
    return {
        "kernels": res.kernel_count, "total_us": res.total_kernel_us, "raw_n": raw_n, "raw_us": raw_us,
        "attributed_pct": 100.0 * (1 - res.unattributed_us / res.total_kernel_us) if res.total_kernel_us else None,
        "phases": {p.phase or "unknown": p.total_us for p in res.phases},
        "warnings": {w.code: w.count for w in res.warnings},
        "window": None if b is None else b.window,
        "window_us": None if b is None else b.total.window_us, "busy_us": None if b is None else b.total.busy_us,
        "idle_us": None if b is None else b.total.idle_us,
        "computation_us": None if b is None else b.total.computation_us,
        "overlap_pct": None if b is None else b.total.comm_overlap_pct,
        "seconds": secs,
    }


def one_ncu(path: Path) -> dict[str, Any]:
    from mcp_server.ncu.classify import classify_profile
    from mcp_server.ncu.parse import parse_ncu

    t = time.perf_counter()
    prof = parse_ncu(str(path))
    cls = classify_profile(prof)
    secs = time.perf_counter() - t
    return {"kernels": len(prof.kernels), "classes": dict(Counter(k.bottleneck.class_ for k in cls.kernels)),
            "warnings": {w.code: w.count for w in cls.warnings}, "seconds": secs}


def child_main(path: str, kind: str, ref: Optional[str] = None) -> None:
    from mcp_server.core.errors import KernelscopeError

    try:
        out = one_trace(Path(path), ref) if kind == "trace" else one_ncu(Path(path))
    except KernelscopeError as exc:  # a typed error is an answer, not a crash
        out = {"error": f"{type(exc).__name__}: {exc}"}
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sys.stdout.write(json.dumps(out))


def run_child(path: Path, kind: str, timeout: float, ref: Optional[Path] = None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(path), "--kind", kind]
    if ref is not None:
        cmd += ["--ref", str(ref)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {p.returncode}: {tail[:300]}"}
    out = json.loads(p.stdout)
    out["wall_s"] = time.perf_counter() - t
    return out


# --------------------------------------------------------------------------- HTA (a peer, in its own interpreter)

_HTA_SCRIPT = r'''
import json, logging, os, sys, tempfile, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
src = sys.argv[1]
d = tempfile.mkdtemp()
os.symlink(os.path.abspath(src), os.path.join(d, "rank0.json.gz" if src.endswith(".gz") else "rank0.json"))
ta = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
out = {}
for key, fn in (("temporal", lambda: ta.get_temporal_breakdown(visualize=False)),
                ("overlap", lambda: ta.get_comm_comp_overlap(visualize=False))):
    try:
        out[key] = fn().to_dict(orient="records")[0]
    except Exception as exc:
        out[key + "_error"] = (type(exc).__name__ + ": " + str(exc))[:200]
try:
    t = ta.t
    df = t.get_trace(next(iter(t.traces)))
    sym = t.symbol_table.get_sym_table()
    g = df[df["stream"].ne(-1)]
    out["events"] = {"ts": g["ts"].astype(float).tolist(), "dur": g["dur"].astype(float).tolist(),
                     "stream": g["stream"].astype(int).tolist(), "name": [sym[i] for i in g["name"].tolist()]}
except Exception as exc:
    out["events_error"] = (type(exc).__name__ + ": " + str(exc))[:200]
print(json.dumps(out, default=str))
'''


def hta_peer(py: str, path: Path, timeout: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(_HTA_SCRIPT)
        script = f.name
    try:
        p = subprocess.run([py, script, str(path)], capture_output=True, text=True, timeout=timeout,
                           start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": "HTA timed out"}
    finally:
        os.unlink(script)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["HTA failed"])[-1][:200]}
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "HTA printed no result"}


def ours_on_hta_events(ev: dict[str, list]) -> Optional[dict[str, float]]:
    """Our breakdown on HTA's own event set (same events, same integer times)."""
    import numpy as np

    from mcp_server.core.categories import load_categories
    from mcp_server.core.vocab import COMMUNICATION
    from mcp_server.traces import breakdown as B

    if not ev or not ev.get("ts"):
        return None
    rules = load_categories()
    names = ev["name"]
    cls = np.array([B.MEMORY if n.startswith(("Memcpy", "Memset")) else
                    B.COMMUNICATION if rules.classify(n) == COMMUNICATION else B.COMPUTATION for n in names],
                   dtype=np.int8)
    n = len(names)
    b = B.compute_breakdown(np.asarray(ev["ts"], float), np.asarray(ev["dur"], float), cls, np.zeros(n, np.int64),
                            np.asarray(ev["stream"], np.int64))
    if b is None:
        return None
    t = b.total
    return {"idle_us": t.idle_us, "window_us": t.window_us, "computation_us": t.computation_us,
            "overlap_pct": t.comm_overlap_pct}


# --------------------------------------------------------------------------- table


def _ms(us: Optional[float]) -> str:
    return "—" if us is None else f"{us / 1e3:,.3f}"


def _pct(a: Optional[float], b: Optional[float]) -> str:
    if a is None or b is None:
        return "—"
    if b == 0:
        return "0" if a == 0 else "∞"
    return f"{100.0 * (a - b) / b:+.3f} %"


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| file | kernels | total (ms) | raw GPU sum (ms) | attributed | phases (ms) | warnings | window | busy / "
           "idle (ms) | TraceLens busy / total (ms), ours vs | HTA idle, overlap; ours on HTA's events | s | peak RSS "
           "(MB) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = f"`{r['file']}`"
        if "error" in r:
            out.append(f"| {name} | **error** | {r['error']} | | | | | | | | | | |")
            continue
        if r["kind"] == "ncu":
            cls = ", ".join(f"{k} {v}" for k, v in sorted(r["classes"].items()))
            w = ", ".join(f"{k} ×{v}" for k, v in sorted(r["warnings"].items())) or "—"
            out.append(f"| {name} (ncu) | {r['kernels']} | classes: {cls} | | | | {w} | | | | | "
                       f"{r['seconds']:.2f} | {r['rss_mb']:.0f} |")
            continue
        att = "—" if r["attributed_pct"] is None else f"{r['attributed_pct']:.1f} %"
        ph = ", ".join(f"{k} {v / 1e3:,.2f}" for k, v in r["phases"].items()) or "—"
        w = ", ".join(f"{k} ×{v}" for k, v in sorted(r["warnings"].items())) or "—"
        same = "=" if abs(r["total_us"] - r["raw_us"]) <= 1e-6 * max(r["raw_us"], 1.0) and r["kernels"] == r["raw_n"] \
            else f"≠ ({r['raw_n']} events)"
        busy = "—" if r["busy_us"] is None else f"{_ms(r['busy_us'])} / {_ms(r['idle_us'])}"
        tl = r.get("tracelens")
        tl_txt = "—" if not tl else (f"{_ms(tl['busy_time'])} / {_ms(tl['total_time'])}; "
                                     f"{_pct(r['busy_us'], tl['busy_time'])}, {_pct(r['window_us'], tl['total_time'])}")
        hta = r.get("hta")
        if not hta:
            hta_txt = "—"
        elif "error" in hta:
            hta_txt = f"HTA failed: {hta['error']}"
        else:
            tb, ov, mine = hta.get("temporal"), hta.get("overlap"), hta.get("ours")
            parts = []
            if tb:
                parts.append(f"idle {_ms(tb.get('idle_time(us)'))} ms")
            elif hta.get("temporal_error"):
                parts.append(f"temporal: {hta['temporal_error'][:60]}")
            if ov and ov.get("comp_comm_overlap_pctg") is not None and ov["comp_comm_overlap_pctg"] == \
                    ov["comp_comm_overlap_pctg"]:
                parts.append(f"overlap {ov['comp_comm_overlap_pctg']:.2f} %")
            if mine:
                ovs = "—" if mine["overlap_pct"] is None else f"{mine['overlap_pct']:.2f} %"
                parts.append(f"ours: idle {_ms(mine['idle_us'])} ms, overlap {ovs}")
            hta_txt = "; ".join(parts) or "—"
        out.append(f"| {name} | {r['kernels']} | {_ms(r['total_us'])} | {_ms(r['raw_us'])} {same} | {att} | {ph} | "
                   f"{w} | {r['window'] or '—'} | {busy} | {tl_txt} | {hta_txt} | {r['seconds']:.2f} | "
                   f"{r['rss_mb']:.0f} |")
    return "\n".join(out)


def write_section(results: Path, text: str) -> None:
    body = results.read_text(encoding="utf-8") if results.exists() else ""
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in body and END in body:
        body = body[:body.index(BEGIN)] + block + body[body.index(END) + len(END):]
    else:
        body = body.rstrip("\n") + "\n\n" + block + "\n"
    tmp = results.with_suffix(".tmp")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", help="corpus directories (default ../shared/field from the repository root)")
    ap.add_argument("--hta-python", help="an interpreter with HolisticTraceAnalysis installed (peer figures)")
    ap.add_argument("--write", help="write the table into this markdown file between the field_corpus markers")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per file")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--ref", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        child_main(a.one, a.kind, a.ref)
        return
    dirs = [Path(d) for d in a.dirs] or [ROOT.parent / "shared" / "field"]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        sys.exit(f"not a directory: {', '.join(missing)} (pass the field corpus directory)")
    rows: list[dict[str, Any]] = []
    files = discover(dirs)
    for i, (base, path, kind) in enumerate(files, 1):
        rel = str(path.relative_to(base))
        print(f"[{i}/{len(files)}] {rel}", file=sys.stderr)
        r = run_child(path, kind, a.timeout)
        r.update(file=rel, kind=kind)
        if kind == "trace" and "error" not in r:
            r["tracelens"] = tracelens_peer(path)
            if a.hta_python:
                hta = hta_peer(a.hta_python, path, a.timeout)
                if "events" in hta:
                    hta["ours"] = ours_on_hta_events(hta.pop("events"))
                r["hta"] = hta
        rows.append(r)
        ref = capture_reference(path) if kind == "trace" and "error" not in r else None
        if ref is not None:  # the graph replays again, attributed from the capture trace beside them
            r2 = run_child(path, kind, a.timeout, ref)
            r2.update(file=f"{rel} (reference: {ref.relative_to(path.parent)})", kind=kind)
            if "error" not in r2:
                r2["tracelens"] = r.get("tracelens")
            rows.append(r2)
    errors = [r for r in rows if "error" in r]
    head = (f"{len(rows)} files ({sum(r['kind'] == 'trace' for r in rows)} traces, "
            f"{sum(r['kind'] == 'ncu' for r in rows)} Nsight Compute), {len(errors)} error(s)"
            + ("".join(f"\n- `{r['file']}`: {r['error']}" for r in errors)))
    text = head + "\n\n" + table(rows)
    print(text)
    if a.write:
        write_section(Path(a.write), text)


if __name__ == "__main__":
    main()
