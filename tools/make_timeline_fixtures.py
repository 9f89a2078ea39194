#!/usr/bin/env python3
"""Produce the timeline (probe-buffer) fixtures on a CUDA machine (H200).

Run from the repository root on the GPU machine (needs nvcc; torch + triton for the Triton part):

    python3 tools/make_timeline_fixtures.py --out tests/fixtures/timeline

What it does, each step independent (one failing is reported and the others still run):

1. Builds tools/timeline_phases.cu three ways with ``nvcc -O3 -arch=sm_90``: without probes,
   with probes (``-DKERNELSCOPE_PROBE``, tag layout ``sm``) and with legacy tags
   (``-DKERNELSCOPE_PROBE_TAG_LEGACY``). The kernel is persistent (one block per SM,
   cooperative launch), two probe groups per block, 3 rounds of 4 phases (load, compute,
   reduce, store) separated by grid barriers, and a final instant (done).
   Variants: ``balanced`` (work 2,4,2,1 per phase for every block) and ``imbalanced``
   (compute x4 on blocks 5, 37 and 90; reduce x3 on block 17).
2. Runs each build (and the probe-free build once more at the end, for the noise floor):
   5 warm-up and 30 timed launches per variant (CUDA events per launch);
   the probe builds save the buffer of the last launch, plus one launch into a buffer with
   room for 5 of 24 records per writer (the bounds guard must mark overflow).
3. A Triton kernel (two phases per row, rowsum and scale) instrumented with
   mcp_server/timeline/triton_probe.py, timed with and without probes (PROBE constexpr).

Files written to --out:
  {balanced,imbalanced}_{probe,legacy}.bin   raw little-endian uint64 probe buffers
  overflow_probe.bin                          the guard's overflow case
  triton_rows.bin                             the Triton kernel's buffer
  phases.events / triton_rows.events          event names, one per line (event id = line)
  *.overhead.json                             kernel times with and without probes (us)
  timings.json                                every timing sample and the build/run log
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tools" / "timeline_phases.cu"
INCLUDE = ROOT / "mcp_server" / "timeline" / "include"
PHASE_EVENTS = ["load", "compute", "reduce", "store", "done"]
TRITON_EVENTS = ["rowsum", "scale", "done"]
BUILDS = {
    "noprobe": [],
    "probe": ["-DKERNELSCOPE_PROBE"],
    "legacy": ["-DKERNELSCOPE_PROBE", "-DKERNELSCOPE_PROBE_TAG_LEGACY"],
    # the probe-free build once more, last: its spread against the first run is the noise floor
    "noprobe_again": [],
}


def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, start_new_session=True)


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def overhead_doc(with_us: list[float], without_us: list[float], source: str) -> dict:
    w, wo = statistics.median(with_us), statistics.median(without_us)
    return {
        "with_probes_us": [round(x, 3) for x in with_us],
        "without_probes_us": [round(x, 3) for x in without_us],
        "with_median_us": round(w, 3),
        "without_median_us": round(wo, 3),
        "overhead_pct": round(100.0 * (w - wo) / wo, 3),
        "method": source,
    }


def cuda_part(out: Path, bindir: Path, reps: int, log: dict) -> dict:
    timings: dict = {}
    for name, flags in BUILDS.items():
        same = "noprobe" if name == "noprobe_again" else name
        exe = bindir / f"timeline_phases_{same}"
        cmd = ["nvcc", "-O3", "-arch=sm_90", "-lineinfo", "-I", str(INCLUDE), *flags, str(SRC), "-o", str(exe)]
        try:
            if same == name:
                t0 = time.time()
                cp = run(cmd, 300)
                log[f"build_{name}"] = {"cmd": " ".join(cmd), "rc": cp.returncode, "s": round(time.time() - t0, 1),
                                        "stderr": cp.stderr[-2000:]}
                if cp.returncode != 0:
                    print(f"[build {name}] FAILED rc={cp.returncode}\n{cp.stderr[-2000:]}")
                    continue
            elif not exe.exists():
                continue
            cp = run([str(exe), str(out), name, str(reps)], 180)
            log[f"run_{name}"] = {"rc": cp.returncode, "stdout": cp.stdout[-4000:], "stderr": cp.stderr[-2000:]}
            print(cp.stdout.strip())
            if cp.returncode != 0:
                print(f"[run {name}] FAILED rc={cp.returncode}\n{cp.stderr[-2000:]}")
            for line in cp.stdout.splitlines():
                m = re.match(r"KS_TIMING (\S+) (\S+) (.*)", line)
                if m:
                    timings.setdefault(m.group(1), {})[m.group(2)] = [float(x) for x in m.group(3).split()]
        except Exception as exc:  # keep going: one build failing must not lose the others
            log[f"error_{name}"] = traceback.format_exc()[-2000:]
            print(f"[{name}] ERROR {exc!r}")
    (out / "phases.events").write_text("\n".join(PHASE_EVENTS) + "\n")
    src = "tools/timeline_phases.cu, cooperative launch on all SMs, CUDA events around each launch"
    for build in ("probe", "legacy"):
        for variant in ("balanced", "imbalanced"):
            try:
                w = timings[build][variant]
                wo = timings["noprobe"][variant]
            except KeyError:
                continue
            doc = overhead_doc(w, wo, src)
            again = timings.get("noprobe_again", {}).get(variant)
            if again:
                doc["without_again_median_us"] = round(statistics.median(again), 3)
                doc["noise_pct"] = round(100.0 * abs(statistics.median(again) - doc["without_median_us"])
                                         / doc["without_median_us"], 3)
            write_json(out / f"{variant}_{build}.overhead.json", doc)
    return timings


def triton_part(out: Path, reps: int, log: dict) -> dict:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tools"))
    import torch
    from timeline_triton_kernel import rows_kernel

    from mcp_server.timeline.triton_probe import alloc_probe_buffer

    dev = torch.device("cuda")
    nprog = 2 * torch.cuda.get_device_properties(0).multi_processor_count
    rows_per, n, block = 4, 8192, 1024
    x = torch.rand(nprog * rows_per, n, device=dev) + 0.5
    y = torch.empty_like(x)
    buf, cap = alloc_probe_buffer(nprog, 2 * 2 * rows_per + 1)  # + 1: the final instant
    hdr = buf[0].item()

    def launch(probe: bool) -> None:
        rows_kernel[(nprog,)](x, y, n, buf, cap, ROWS=rows_per, BLOCK=block, PROBE=probe)

    # interleaved: one launch without probes, one with, per repetition (no order or clock drift bias)
    times: dict[str, list[float]] = {"noprobe": [], "probe": []}
    for probe in (False, True):
        for _ in range(5):
            launch(probe)
    torch.cuda.synchronize()
    for _ in range(reps):
        for probe in (False, True):
            buf.zero_()
            buf[0] = hdr
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            launch(probe)
            e1.record()
            e1.synchronize()
            times["probe" if probe else "noprobe"].append(e0.elapsed_time(e1) * 1000.0)
    ref = x / x.sum(dim=1, keepdim=True)
    err = ((y - ref).norm() / ref.norm()).item()
    log["triton_check_rel_err"] = err
    if not err < 1e-5:
        raise RuntimeError(f"Triton kernel output wrong: rel err {err}")
    raw = buf.cpu().numpy().view("<u8")
    raw.tofile(out / "triton_rows.bin")
    (out / "triton_rows.events").write_text("\n".join(TRITON_EVENTS) + "\n")
    write_json(out / "triton_rows.overhead.json", overhead_doc(
        times["probe"], times["noprobe"], "tools/make_timeline_fixtures.py Triton rows_kernel, torch CUDA events per launch, with/without interleaved"))
    nz = int((raw != 0).sum())
    print(f"KS_INFO triton nprog={nprog} slots={raw.size} nonzero={nz} header=0x{int(raw[0]):016x} rel_err={err:.2e}")
    return {"triton": times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--bindir", default="/tmp/kernelscope_timeline_bin")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bindir = Path(a.bindir)
    bindir.mkdir(parents=True, exist_ok=True)
    log: dict = {}
    timings: dict = {}
    try:
        timings.update(cuda_part(out, bindir, a.reps, log))
    except Exception:
        log["cuda_part"] = traceback.format_exc()[-3000:]
        print(log["cuda_part"])
    try:
        timings.update(triton_part(out, a.reps, log))
    except Exception:
        log["triton_part"] = traceback.format_exc()[-3000:]
        print(log["triton_part"])
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:
        gpu = f"nvidia-smi failed: {exc!r}"
    write_json(out / "timings.json", {"gpu": gpu, "timings_us": timings, "log": log})
    print("\n== summary (median us per launch)")
    print(f"gpu: {gpu}")
    for build, per in timings.items():
        for variant, samples in per.items():
            print(f"  {build:8s} {variant:10s} {statistics.median(samples):10.2f}  (n={len(samples)})")
    for f in sorted(out.iterdir()):
        print(f"  {f.name:40s} {f.stat().st_size:8d} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
