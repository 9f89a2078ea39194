"""Make the Nsight Compute fixtures (tests/fixtures/ncu/) on a GPU machine with ncu.

    PYTHONUNBUFFERED=1 python3 tools/make_ncu_fixtures.py --out OUTDIR

Steps (each logged in OUTDIR/make.log):

1. ``ncu --version``; one tiny profiled kernel to check ncu reads counters here
   (if not, the log's message is written to OUTDIR/profiler_check_failed.txt and the
   script stops with exit code 3: the fixtures wait for a machine that can).
2. ``ncu --query-metrics``: the explicit metrics of the catalogue are kept only where
   this device knows them; the lines naming pipes/tensor/ops are saved.
3. For cache control ``all`` and ``none`` (clock control ``none``): one ncu run over every
   target of tools/ncu_targets.py (``--profile-from-start off``, NVTX on), the catalogue's
   sections + metrics, into ``targets_<cc>.ncu-rep`` with ``--log-file`` and a sidecar
   ``targets_<cc>.ncu-rep.json`` in the format mcp_server.ncu.runner writes.
4. Exports of each report: raw page, base units (``.raw.csv``); details page, auto units
   (``.details.csv``); details with rule details for ``none``.
5. One ``ncu --csv`` run to stdout with the application's own prints mixed in
   (``stdout_mixed.csv``, stdout and stderr together, as a user would capture it).

Uses only the standard library and the catalogue (no pydantic needed on the GPU machine).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from mcp_server.ncu import catalogue  # noqa: E402

TARGETS = ["gemm_bf16", "fma_chain", "elementwise", "bmm_hbm", "bmm_l2", "tiny_add"]
LOG: list[str] = []


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    LOG.append(line)
    print(line, flush=True)


def sh(argv: list[str], *, out: Path | None = None, timeout: float = 300) -> tuple[int, str]:
    log("$ " + " ".join(argv))
    t0 = time.time()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       start_new_session=True, cwd=ROOT)
    text = p.stdout.decode("utf-8", "replace")
    if out is not None:
        out.write_text(text)
    log(f"  rc={p.returncode} in {time.time() - t0:.1f}s, {len(text)} chars")
    return p.returncode, text


def gpu_info() -> dict:
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        name, cc, drv = [s.strip() for s in p.stdout.splitlines()[0].split(",")]
        return {"name": name, "cc": cc, "driver": drv}
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        return {"error": str(exc)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ncu = args.ncu
    py = sys.executable
    tgt = [py, str(ROOT / "tools" / "ncu_targets.py")]

    rc, ver = sh([ncu, "--version"])
    (out / "ncu_version.txt").write_text(ver)
    gpu = gpu_info()
    log(f"gpu: {gpu}")
    version = ver.strip().splitlines()[-1] if ver.strip() else ""

    # 1. does ncu read counters here?
    rc, text = sh([ncu, "--clock-control", "none", "--profile-from-start", "off",
                   "--metrics", "gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed",
                   *tgt, "tiny_add", "--reps", "1"], out=out / "check.log")
    if rc != 0 or "==ERROR==" in text or "gpu__time_duration" not in text:
        (out / "profiler_check_failed.txt").write_text(text)
        log("ncu could not profile the tiny kernel: see profiler_check_failed.txt")
        (out / "make.log").write_text("\n".join(LOG) + "\n")
        return 3

    # 2. which explicit metrics does this device know?
    arch = catalogue.arch_of(gpu.get("cc"))
    wanted = catalogue.collect_names(arch)
    rc, q = sh([ncu, "--query-metrics"], timeout=120)
    known = set()
    for line in q.splitlines():
        tok = line.split()
        if tok and "__" in tok[0]:
            known.add(tok[0])
    keep, dropped = [], []
    for m in wanted:
        base = m.split(".")[0]
        if not known or m.startswith(("launch__", "device__")) or base in known:
            keep.append(m)
        else:
            dropped.append(m)
    log(f"arch {arch}: {len(keep)} explicit metrics kept, dropped (unknown here): {dropped}")
    (out / "query_metrics_pipes.txt").write_text(
        "\n".join(line for line in q.splitlines()
                  if any(k in line for k in ("pipe_", "tensor", "ops_path", "gmma", "hmma"))) + "\n")
    rc, secs = sh([ncu, "--list-sections"], timeout=60)
    sections = [s for s in catalogue.DEFAULT_SECTIONS if s in secs]
    log(f"sections: {sections}")

    # 3. the two runs
    for cc in ("all", "none"):
        rep = out / f"targets_{cc}.ncu-rep"
        logf = out / f"targets_{cc}.log"
        argv = [ncu, "-f", "-o", str(rep), "--log-file", str(logf),
                "--cache-control", cc, "--clock-control", "none",
                "--profile-from-start", "off", "--nvtx"]
        for s in sections:
            argv += ["--section", s]
        argv += ["--metrics", ",".join(keep)]
        target = [*tgt, *TARGETS, "--reps", str(args.reps)]
        t0 = time.time()
        rc, text = sh(argv + target, out=out / f"targets_{cc}.app.txt", timeout=400)
        if rc != 0 and not rep.exists():
            log(f"{cc}: ncu failed with the explicit metrics; retrying with sections only")
            argv = argv[:argv.index("--metrics")]
            rc, text = sh(argv + target, out=out / f"targets_{cc}.app.txt", timeout=400)
        wall = time.time() - t0
        log_text = logf.read_text() if logf.exists() else ""
        n = sum(1 for ln in log_text.splitlines() if ln.startswith("==PROF==") and "Profiling" in ln)
        side = {
            "kernelscope_ncu_sidecar": 1,
            "argv": [os.path.basename(a) if a == ncu else a for a in argv + target],
            "target": target,
            "ncu": ncu, "ncu_version": version,
            "cache_control": cc, "clock_control": "none",
            "gpu": gpu, "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(wall, 2), "rc": rc, "kernels_profiled": n,
            "made_by": "tools/make_ncu_fixtures.py",
        }
        Path(str(rep) + ".json").write_text(json.dumps(side, indent=1) + "\n")
        log(f"{cc}: rc={rc}, {n} kernels profiled, report {rep.stat().st_size if rep.exists() else 0} bytes")
        if not rep.exists():
            continue
        # 4. exports
        sh([ncu, "--import", str(rep), "--page", "raw", "--csv", "--print-units", "base"],
           out=out / f"targets_{cc}.raw.csv")
        sh([ncu, "--import", str(rep), "--page", "details", "--csv", "--print-units", "auto"],
           out=out / f"targets_{cc}.details.csv")
        if cc == "none":
            sh([ncu, "--import", str(rep), "--page", "details", "--csv", "--print-units", "auto",
                "--print-rule-details"], out=out / f"targets_{cc}.details_rules.csv")
            sh([ncu, "--import", str(rep), "--page", "raw", "--csv", "--print-units", "auto"],
               out=out / f"targets_{cc}.raw_auto.csv")

    # 5. --csv to stdout, app prints mixed in
    sh([ncu, "--csv", "--page", "raw", "--cache-control", "all", "--clock-control", "none",
        "--profile-from-start", "off", "--metrics", ",".join(catalogue.minimal_names()),
        *tgt, "--chatty", "elementwise", "tiny_add", "--reps", "2"], out=out / "stdout_mixed.csv")

    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    (out / "manifest.json").write_text(json.dumps({"gpu": gpu, "ncu_version": version,
                                                   "explicit_metrics": keep, "dropped": dropped,
                                                   "sections": sections, "sizes": sizes}, indent=1))
    (out / "make.log").write_text("\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
