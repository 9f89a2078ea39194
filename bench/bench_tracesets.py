#!/usr/bin/env python3
"""Benchmark: per-rank throughput of the trace-set executors (process pool, Ray) and their scaling.

Grows one rank trace of a committed set (tests/fixtures/tracesets) to --mb MB of JSON with
bench_trace.grow (events replayed with shifted times and ids), writes --ranks gzipped copies
whose ``distributedInfo.rank`` is 0..N-1 (``world_size`` N), then times ``analyze_trace_set`` on
the set, in this process, for each executor and worker count:

* ``inline``: one rank after another in this process (the baseline: no process start-up),
* ``process`` with 1..--max-workers workers (spawn pool; start-up included),
* ``ray`` on a local instance started and stopped by the call (start-up included),
* ``ray`` on a running local cluster (``ray start --head``; connection included, cluster start not).

Each configuration runs --repeat times; the table gives the median wall time, ranks per second
and the speed-up over one worker of the same executor.

    .venv/bin/python bench/bench_tracesets.py [--ranks 8] [--mb 20] [--repeat 3] [--max-workers 2]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
SRC = ROOT / "tests" / "fixtures" / "tracesets" / "straggler" / "llama-TP-0.trace.json.gz"


def make_set(tmp: Path, ranks: int, mb: float) -> tuple[list[Path], dict]:
    from bench_trace import grow

    text_path = tmp / "grown.json"
    info = grow(SRC, text_path, mb)
    text = text_path.read_bytes()
    head_end = text.index(b'"traceEvents"')
    head = json.loads(text[:head_end].rstrip().rstrip(b",") + b"}")
    files = []
    for r in range(ranks):
        dist = dict(head.get("distributedInfo") or {}, rank=r, world_size=ranks)
        new_head = json.dumps({**head, "distributedInfo": dist}, indent=2)[:-2] + ",\n  "
        p = tmp / f"grown-TP-{r}.trace.json.gz"
        with gzip.open(p, "wb", compresslevel=1) as f:
            f.write(new_head.encode())
            f.write(text[head_end:])
        files.append(p)
    text_path.unlink()
    info.update(json_mb=len(text) / 1e6, gz_mb=files[0].stat().st_size / 1e6)
    return files, info


def run(paths: list[str], **kw) -> float:
    from mcp_server.tracesets.analyze import analyze_trace_set

    t0 = time.perf_counter()
    res = analyze_trace_set(paths, **kw)
    wall = time.perf_counter() - t0
    assert res.rank_count == len(res.ranks) and not res.failed, res.failed
    return wall


def start_cluster(cpus: int) -> str | None:
    ray = ROOT / ".venv" / "bin" / "ray"
    if not ray.exists():
        return None
    port = 6391
    subprocess.run([str(ray), "start", "--head", f"--port={port}", f"--num-cpus={cpus}", "--include-dashboard=false",
                    "--disable-usage-stats"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)
    return f"127.0.0.1:{port}"


def stop_cluster() -> None:
    ray = ROOT / ".venv" / "bin" / "ray"
    subprocess.run([str(ray), "stop", "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=20.0, help="JSON MB per rank trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-workers", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    try:
        import ray  # noqa: F401
        have_ray = not args.no_ray
    except ImportError:
        have_ray = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files, info = make_set(Path(tmp), args.ranks, args.mb)
        paths = [str(p) for p in files]
        print(json.dumps({"ranks": args.ranks, **info, "cpus": os.cpu_count(),
                          "load_1min": os.getloadavg()[0]}), flush=True)
        configs: list[tuple[str, int, dict]] = [("inline", 1, {"executor": "inline"})]
        configs += [("process", w, {"executor": "process", "workers": w}) for w in range(1, args.max_workers + 1)]
        if have_ray:
            configs += [("ray (local, started per call)", w, {"executor": "ray", "workers": w})
                        for w in range(1, args.max_workers + 1)]
        for name, workers, kw in configs:
            walls = [run(paths, **kw) for _ in range(args.repeat)]
            rows.append((name, workers, walls))
            print(json.dumps({"executor": name, "workers": workers, "walls": [round(w, 3) for w in walls]}),
                  flush=True)
        if have_ray:
            for workers in range(1, args.max_workers + 1):
                address = start_cluster(workers)
                try:
                    walls = [run(paths, executor="ray", ray_address=address) for _ in range(args.repeat)]
                finally:
                    stop_cluster()
                rows.append(("ray (running cluster)", workers, walls))
                print(json.dumps({"executor": "ray (running cluster)", "workers": workers,
                                  "walls": [round(w, 3) for w in walls]}), flush=True)
    print("\n| executor | workers | median wall | ranks / s | s / rank | speed-up vs 1 worker |")
    print("|---|---:|---:|---:|---:|---:|")
    base: dict[str, float] = {}
    for name, workers, walls in rows:
        med = statistics.median(walls)
        base.setdefault(name, med)
        print(f"| {name} | {workers} | {med:.2f} s | {args.ranks / med:.2f} | {med / args.ranks:.3f} | "
              f"{base[name] / med:.2f} x |")
    print(f"\n{args.repeat} runs each, median; min/max per row: "
          + "; ".join(f"{n} x{w}: {min(ws):.2f}-{max(ws):.2f} s" for n, w, ws in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
