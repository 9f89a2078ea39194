#!/usr/bin/env python3
"""Benchmark: ``kernelscope analyze`` on a ~350 MB trace against ``zcat`` of it.

Grows a committed fixture by replaying its events N times with shifted
timestamps, correlation / External ids, flow ids and module instance numbers
(``Linear_3`` -> ``Linear_{3 + r*K}``), writes it as export_chrome_trace does
(one event per line) into a temp dir, gzips it, then in the same run measures:

* wall time of ``zcat trace.json.gz > /dev/null`` (best of --repeat),
* wall time of ``kernelscope analyze trace.json.gz --json > /dev/null`` (best of --repeat) for each
  gzip backend in --backends (``KERNELSCOPE_TRACE_GZIP``), and with --plain / --zst on the
  uncompressed ``.json`` and a ``zstd -3`` ``.json.zst`` of the same text,
* the analyzer's peak RSS (``/usr/bin/time -v`` when present, else getrusage of the child: the largest single
  process) and the peak of the summed RSS of the analyzer and its split-decode helper (sampled from /proc),
* time and peak RSS per event; with several --mb sizes and --plot, the scaling curve as a PNG.

Targets (issue 15): analysis <= 1.0 x zcat, peak RSS <= 300 MB at ~350 MB; time per event flat
within 20 % from 90 MB to 1.4 GB.

    .venv/bin/python bench/bench_trace.py [--source llama_decode_mixed] [--mb 90 350 1400] [--plot P]
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


def _tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        out.append(q)
        try:
            for t in os.listdir(f"/proc/{q}/task"):
                todo.extend(int(c) for c in Path(f"/proc/{q}/task/{t}/children").read_text().split())
        except OSError:
            pass
    return out


def peak_tree_rss_mb(cmd: list[str], every: float = 0.005) -> tuple[float, float]:
    """Peaks of the summed RSS and PSS of the command and its helper processes (the split decode's helper),
    sampled from /proc every ``every`` s (Linux; 0 elsewhere). RSS counts shared pages (libraries) in every
    process, an upper bound; PSS splits them between the processes."""
    if not Path("/proc/self/task").exists():
        return 0.0, 0.0
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = {"Rss:": 0, "Pss:": 0}
    while proc.poll() is None:
        total = dict.fromkeys(peak, 0)
        for q in _tree_pids(proc.pid):
            try:
                for line in Path(f"/proc/{q}/smaps_rollup").read_text().splitlines():
                    key = line.split(" ", 1)[0]
                    if key in total:
                        total[key] += int(line.split()[1])
            except OSError:
                pass
        for k in peak:
            peak[k] = max(peak[k], total[k])
        time.sleep(every)
    proc.wait(timeout=900)
    return peak["Rss:"] / 1024, peak["Pss:"] / 1024


def _best(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(runs)


def measure(args: argparse.Namespace, tmp: Path, mb: float) -> dict:
    """Grow one trace of ``mb`` MB and time zcat and the analyzer on it (gz per backend, plain, zst)."""
    raw = tmp / f"{args.source}_{int(mb)}mb.json"
    t0 = time.perf_counter()
    info = grow(TRACES / f"{args.source}.json.gz", raw, mb)
    gz = raw.with_suffix(".json.gz")
    with open(raw, "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
        shutil.copyfileobj(fi, fo, 16 << 20)
    zst = None
    if args.zst:
        import zstandard

        zst = raw.with_suffix(".json.zst")
        with open(raw, "rb") as fi, open(zst, "wb") as fo:
            zstandard.ZstdCompressor(level=3).copy_stream(fi, fo)
    made = time.perf_counter() - t0
    ks = str(Path(sys.executable).with_name("kernelscope"))

    def analyze(path: Path) -> list[str]:
        return [ks, "analyze", str(path), "--json"]

    backends = [b for b in args.backends.split(",") if b]
    env0 = dict(os.environ)

    def with_backend(b: str):
        os.environ.clear()
        os.environ.update(env0, KERNELSCOPE_TRACE_GZIP=b)

    # alternate the commands so all see the same machine load; keep the best (min) of each
    zc: list = []
    an: dict[str, list] = {b: [] for b in backends}
    plain: list = []
    zs: list = []
    one: list = []
    try:
        for _ in range(args.repeat):
            zc.append(timed(["zcat", str(gz)]))
            for b in backends:
                with_backend(b)
                an[b].append(timed(analyze(gz)))
            with_backend(backends[0])
            if args.plain:
                plain.append(timed(analyze(raw)))
            if zst is not None:
                zs.append(timed(analyze(zst)))
            if args.one_process:
                os.environ["KERNELSCOPE_TRACE_SPLIT"] = "off"
                one.append(timed(analyze(gz)))
                with_backend(backends[0])
        with_backend(backends[0])
        rss = peak_rss_mb(analyze(gz))
        tree_rss, tree_pss = peak_tree_rss_mb(analyze(gz))
        out = subprocess.run(analyze(gz), capture_output=True, text=True, check=True, timeout=900).stdout
    finally:
        os.environ.clear()
        os.environ.update(env0)
    res = json.loads(out)
    zcat, zcpu = _best(zc)
    main_b = backends[0]
    ana, acpu = _best(an[main_b])
    pair_ratios = sorted(a[0] / z[0] for a, z in zip(an[main_b], zc))
    events = info["events"]
    result = {
        "source": args.source, **info, "json_mb": round(raw.stat().st_size / 1e6, 1),
        "gz_mb": round(gz.stat().st_size / 1e6, 1), "generate_s": round(made, 1), "runs": args.repeat,
        "statistic": "min over runs (alternated)", "backend": main_b,
        "zcat_s": round(zcat, 3), "analyze_s": round(ana, 3), "ratio": round(ana / zcat, 2),
        "median_pair_ratio": round(pair_ratios[len(pair_ratios) // 2], 2),
        "analyze_by_backend_s": {b: round(_best(v)[0], 3) for b, v in an.items()},
        "zcat_cpu_s": round(zcpu, 2), "analyze_cpu_s": round(acpu, 2),
        "us_per_event": round(ana / events * 1e6, 3),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "peak_rss_mb": round(rss, 1), "peak_rss_with_helper_mb": round(tree_rss, 1),
        "peak_pss_with_helper_mb": round(tree_pss, 1), "rss_bytes_per_event": round(rss * (1 << 20) / events, 1),
        "kernels": res["kernel_count"], "rss_bytes_per_kernel": round(rss * (1 << 20) / res["kernel_count"], 1),
        "unattributed": res["unattributed_count"], "graph_kernels": res["graph"]["graph_kernel_count"],
        "targets_met": {"ratio<=1": ana / zcat <= 1.0, "rss<=300MB": max(rss, tree_rss) <= 300.0},
        "cpu_count": os.cpu_count(),
    }
    if one:
        result["analyze_one_process_s"] = round(_best(one)[0], 3)
        result["one_process_ratio"] = round(_best(one)[0] / zcat, 2)
    if plain:
        pl = _best(plain)[0]
        result["plain_json_s"] = round(pl, 3)
        result["plain_vs_gz_per_byte"] = round(pl / ana, 2)
    if zs:
        result["zst_mb"] = round(zst.stat().st_size / 1e6, 1)
        result["zst_s"] = round(_best(zs)[0], 3)
    for f in (raw, gz, zst):
        if f is not None and not args.keep:
            f.unlink(missing_ok=True)
    return result


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = [r["events"] / 1e6 for r in results]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.plot(ev, [r["us_per_event"] for r in results], "o-", label=f"analyze ({results[0]['backend']} gzip)")
    a1.plot(ev, [r["zcat_s"] / r["events"] * 1e6 for r in results], "s--", label="zcat")
    if "stdlib" in results[0]["analyze_by_backend_s"]:
        a1.plot(ev, [r["analyze_by_backend_s"]["stdlib"] / r["events"] * 1e6 for r in results], "^:",
                label="analyze (stdlib gzip)")
    for a in (a1, a2):
        a.set_xscale("log")
        a.set_xticks(ev, [f"{e:.2f}" for e in ev])
        a.minorticks_off()
    a1.set_xlabel("events (millions)")
    a1.set_ylabel("wall time per event (us)")
    a1.set_ylim(bottom=0)
    a1.legend()
    a1.set_title("time per event")
    a2.plot(ev, [r["rss_bytes_per_event"] for r in results], "o-", label="peak RSS / event")
    a2.set_xlabel("events (millions)")
    a2.set_ylabel("bytes of peak RSS per event")
    a2.set_ylim(bottom=0)
    a2.set_title("peak RSS per event")
    labels = ", ".join(f"{r['json_mb']:.0f} MB" for r in results)
    fig.suptitle(f"kernelscope analyze on grown {results[0]['source']} traces ({labels}; "
                 f"min of {results[0]['runs']} runs, {results[0]['cpu_count']} cores)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="llama_decode_mixed", help="fixture name under tests/fixtures/traces")
    ap.add_argument("--mb", type=float, nargs="+", default=[350.0], help="target JSON size(s) in MB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="isal,stdlib",
                    help="gzip backends to time (KERNELSCOPE_TRACE_GZIP); the first is the headline figure")
    ap.add_argument("--plain", action="store_true", help="also time the analyzer on the uncompressed .json")
    ap.add_argument("--one-process", action="store_true",
                    help="also time the analyzer with the split decode off (KERNELSCOPE_TRACE_SPLIT=off)")
    ap.add_argument("--zst", action="store_true", help="also time the analyzer on a zstd -3 .json.zst")
    ap.add_argument("--plot", help="write the scaling curve (PNG) here")
    ap.add_argument("--keep", help="keep the grown traces in this directory")
    ap.add_argument("--replot", help="only redraw --plot from this file of printed results (no runs)")
    args = ap.parse_args()
    if args.replot:
        text, dec, results, i = Path(args.replot).read_text(), json.JSONDecoder(), [], 0
        while (i := text.find("{", i)) >= 0:
            obj, i = dec.raw_decode(text, i)
            results.append(obj)
        plot(results, Path(args.plot))
        return 0
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="ks-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        results = []
        for mb in args.mb:
            results.append(measure(args, tmp, mb))
            print(json.dumps(results[-1], indent=2), flush=True)
        if args.plot:
            plot(results, Path(args.plot))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
