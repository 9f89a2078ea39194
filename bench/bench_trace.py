#!/usr/bin/env python3
"""Benchmark: ``kernelscope analyze`` on a ~350 MB trace against ``zcat`` of it.

Grows a committed fixture by replaying its events N times with shifted
timestamps, correlation / External ids, flow ids and module instance numbers
(``Linear_3`` -> ``Linear_{3 + r*K}``), writes it as export_chrome_trace does
(one event per line) into a temp dir, gzips it, then in the same run measures:

* wall time of ``zcat trace.json.gz > /dev/null`` (best of --repeat),
* wall time of ``kernelscope analyze trace.json.gz --json > /dev/null`` (best of --repeat),
* the analyzer's peak RSS (``/usr/bin/time -v`` when present, else getrusage of the child).

Targets: analysis <= 3 x zcat, peak RSS <= 600 MB.

    .venv/bin/python bench/bench_trace.py [--source llama_decode_mixed] [--mb 350]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "fixtures" / "traces"
_MOD = re.compile(r"^(nn\.Module: .*_)(\d+)$")


def grow(src: Path, out: Path, target_mb: float) -> dict:
    data = json.loads(gzip.decompress(src.read_bytes()))
    events = data.pop("traceEvents")
    one = sum(len(json.dumps(e)) + 4 for e in events if e.get("ph") != "M")  # as written below
    reps = max(1, int(target_mb * 1e6 / one))
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) * 1.05 + 100.0
    corrs = [e["args"]["correlation"] for e in events if isinstance(e.get("args"), dict) and "correlation" in e["args"]]
    exts = [e["args"]["External id"] for e in events if isinstance(e.get("args"), dict) and "External id" in e["args"]]
    cstep = max(corrs) + 1 if corrs else 1
    estep = max(exts) + 1 if exts else 1
    per_type: dict[str, int] = {}
    for e in events:
        m = _MOD.match(str(e.get("name", "")))
        if m:
            per_type[m.group(1)] = max(per_type.get(m.group(1), 0), int(m.group(2)) + 1)
    meta_events = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    with open(out, "w") as f:
        head = json.dumps(data, indent=2)[:-2]  # drop the closing "\n}"
        f.write(head + ',\n  "traceEvents": [\n')
        first = True
        for e in meta_events:
            f.write(("" if first else ",\n") + "  " + json.dumps(e))
            first = False
        for r in range(reps):
            dt, dc, de = r * span, r * cstep, r * estep
            lines = []
            for e in body:
                e2 = dict(e)
                if "ts" in e2 and isinstance(e2["ts"], (int, float)):
                    e2["ts"] = e2["ts"] + dt
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] = e2["id"] + dc
                a = e2.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    if "correlation" in a:
                        a["correlation"] += dc
                    if "External id" in a:
                        a["External id"] += de
                    e2["args"] = a
                m = _MOD.match(str(e2.get("name", "")))
                if m:
                    e2["name"] = f"{m.group(1)}{int(m.group(2)) + r * per_type[m.group(1)]}"
                lines.append("  " + json.dumps(e2))
            f.write(("" if first else ",\n") + ",\n".join(lines))
            first = False
        f.write("\n  ]\n}\n")
    return {"replicas": reps, "events": len(meta_events) + reps * len(body)}


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, user+sys CPU seconds) of one run, output discarded."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=900)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def peak_rss_mb(cmd: list[str]) -> float:
    if Path("/usr/bin/time").exists():
        p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, check=True, timeout=900)
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        if m:
            return int(m.group(1)) / 1024
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=900)
    return max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="llama_decode_mixed", help="fixture name under tests/fixtures/traces")
    ap.add_argument("--mb", type=float, default=350.0, help="target JSON size in MB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="keep the grown trace in this directory")
    args = ap.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="ks-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        raw = tmp / f"{args.source}_x.json"
        t0 = time.perf_counter()
        info = grow(TRACES / f"{args.source}.json.gz", raw, args.mb)
        gz = raw.with_suffix(".json.gz")
        with open(raw, "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
            shutil.copyfileobj(fi, fo, 16 << 20)
        made = time.perf_counter() - t0
        ks = str(Path(sys.executable).with_name("kernelscope"))
        analyze = [ks, "analyze", str(gz), "--json"]
        # alternate the two commands so both see the same machine load; keep the best of each
        zc, an = [], []
        for _ in range(args.repeat):
            zc.append(timed(["zcat", str(gz)]))
            an.append(timed(analyze))
        zcat, zcpu = min(zc)
        ana, acpu = min(an)
        pair_ratios = sorted(a[0] / z[0] for a, z in zip(an, zc))
        rss = peak_rss_mb(analyze)
        out = subprocess.run(analyze, capture_output=True, text=True, check=True, timeout=900).stdout
        res = json.loads(out)
        result = {
            "source": args.source, **info, "json_mb": round(raw.stat().st_size / 1e6, 1),
            "gz_mb": round(gz.stat().st_size / 1e6, 1), "generate_s": round(made, 1),
            "zcat_s": round(zcat, 2), "analyze_s": round(ana, 2), "ratio": round(ana / zcat, 2),
            "median_pair_ratio": round(pair_ratios[len(pair_ratios) // 2], 2),
            "zcat_cpu_s": round(zcpu, 2), "analyze_cpu_s": round(acpu, 2),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "peak_rss_mb": round(rss, 1), "kernels": res["kernel_count"],
            "unattributed": res["unattributed_count"], "graph_kernels": res["graph"]["graph_kernel_count"],
            "targets_met": {"ratio<=3": ana / zcat <= 3.0, "rss<=600MB": rss <= 600.0},
            "cpu_count": os.cpu_count(),
        }
        print(json.dumps(result, indent=2))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
