"""The streaming INT4/FP8 kernel's own timeline on the H200 (issue 26, fifth round): where a launch's time goes
unit by unit, decoded by ``kernelscope timeline analyze``.

The recorded M = 1 streaming configs (``tuning.STACKED``) at 8 stacked layers (1024 heads, cold) are compiled with
``PROBE`` = 3: two probe writers a program, the first consumer warp (events 0 ``wait`` for a unit's bytes,
1 ``multiply``, 2 ``store``) and the producer warp (3 ``slot`` wait for a free slot, 4 ``issue`` the copies).
Per family: kernel time with and without probes (CUPTI, the same cycling over cold weight sets), then one launch
into a fresh buffer, saved as ``<family>.bin`` with ``<family>.events`` and ``<family>.overhead.json`` beside it
(the layout ``kernelscope timeline analyze <family>.bin`` reads). ``--summarize DIR`` (no GPU) prints, per family,
when each program's first unit landed and how long a unit's multiply, store and wait for bytes took (the
figures bench/RESULTS.md quotes); the analyzer's phase view assumes occurrences separated by grid-wide
synchronisation, which this kernel (units claimed from a counter) does not have.

    PYTHONUNBUFFERED=1 python3 tools/stream_timeline_h200.py --out $OUT
    python3 tools/stream_timeline_h200.py --summarize tests/fixtures/timeline/stream_h200
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EVENTS = ["wait", "multiply", "store", "slot", "issue"]
FAMILIES = (("int4_wuk", "int4", 128, 512), ("int4_wuv", "int4", 512, 128), ("fp8_wuk", "fp8", 128, 512))


def intervals(path: Path) -> list[list[dict]]:
    """Per program, the consumer writer's (group 0) and the producer's (group 1) closed intervals in order:
    {"event", "begin", "end"} in ns from the buffer's first record."""
    import numpy as np

    raw = np.fromfile(path, dtype="<u8")
    nblocks, ngroups = int(raw[0] & 0xFFFFFFFF), int((raw[0] >> 32) & 0x7FFFFFFF)
    recs = raw[1:]
    n = len(recs) // (nblocks * ngroups)
    rec = recs[: n * nblocks * ngroups].reshape(n, nblocks, ngroups)
    t0 = int((rec[rec != 0] >> 32).min())
    out = []
    for blk in range(nblocks):
        per = []
        for grp in range(ngroups):
            open_, done = {}, []
            for r in rec[:, blk, grp]:
                if not r:
                    continue
                t, tag = int(r >> 32) - t0, int(r & 0xFFFFFFFF)
                ev, typ = (tag >> 2) & 0x3FF, tag & 3
                if typ == 0:
                    open_[ev] = t
                elif typ == 1 and ev in open_:
                    done.append({"event": EVENTS[ev], "begin": open_.pop(ev), "end": t})
            per.append(done)
        out.append(per)
    return out


def summarize(folder: Path) -> dict:
    """Per family: medians (and ranges) of the first unit's landing, a unit's multiply, store and wait, the last
    unit's landing and the program's end, over the programs of the one recorded launch, in us."""
    import statistics

    res = {}
    for name, *_ in FAMILIES:
        path = folder / f"{name}.bin"
        if not path.exists():
            continue
        cols: dict[str, list[float]] = {k: [] for k in ("first_issue", "first_landed", "multiply", "store",
                                                          "wait_between", "last_landed", "end", "units")}
        for cons, prod in intervals(path):
            w = [i for i in cons if i["event"] == "wait"]
            m = [i for i in cons if i["event"] == "multiply"]
            st = [i for i in cons if i["event"] == "store"]
            iss = [i for i in prod if i["event"] == "issue"]
            if not m or not iss:
                continue
            cols["first_issue"].append(iss[0]["begin"] / 1e3)
            cols["first_landed"].append(w[0]["end"] / 1e3)
            cols["multiply"] += [(i["end"] - i["begin"]) / 1e3 for i in m]
            cols["store"] += [(i["end"] - i["begin"]) / 1e3 for i in st]
            cols["wait_between"] += [(i["end"] - i["begin"]) / 1e3 for i in w[1:len(m)]]
            cols["last_landed"].append(w[len(m) - 1]["end"] / 1e3)
            cols["end"].append(max(i["end"] for i in cons) / 1e3)
            cols["units"].append(len(m))
        res[name] = {k: {"min": round(min(v), 3), "median": round(statistics.median(v), 3), "max": round(max(v), 3)}
                     for k, v in cols.items() if v}
    return res


def main() -> int:
    if "--summarize" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--summarize", required=True)
        for name, row in summarize(Path(ap.parse_args().summarize)).items():
            print(name)
            for k, v in row.items():
                print(f"  {k:13s} median {v['median']:7.3f}  ({v['min']:.3f} .. {v['max']:.3f})")
        return 0
    import torch

    from mcp_server.kernels import bench, tuning, w4a16_cuda
    from mcp_server.kernels.launch import sm_count

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--heads", type=int, default=1024, help="stacked heads (128 a layer)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"device": bench.device_info(), "heads": a.heads, "families": {}}
    for name, fmt, K, N in FAMILIES:
        cfg = {k: v for k, v in tuning.STACKED[(fmt, 1, K, N)].items() if k != "fallback"}
        fp8 = fmt == "fp8"
        buf = bench.ShapeBuffers(a.heads, 1, K, N, "cold")
        mc, grid, _threads, _smem = w4a16_cuda.plan(cfg, a.heads, 1, K, N, 0 if fp8 else 128, False,
                                                     sm_count(buf.x.device), fp8)
        units = a.heads * (N // (16 * mc["NT"] * mc["WARPS"]))
        per_writer = 6 * (2 * math.ceil(units / grid[0]) + 2) + 2     # a unit's begin/end pairs, with room for DYN
        slots = 1 + grid[0] * 2 * per_writer
        pbuf = torch.zeros(slots, dtype=torch.int64, device="cuda")
        pcfg = dict(cfg, PROBE=3, PCAP=slots, probe_buf=pbuf)
        fns = buf.int4_fns if fmt == "int4" else buf.fp8_fns
        without = [bench.cupti_us(fns(dict(cfg))) for _ in range(3)]
        with_p = [bench.cupti_us(fns(dict(pcfg))) for _ in range(3)]
        pbuf.zero_()
        pbuf[0] = grid[0] | (2 << 32)           # the header: nblocks, ngroups
        fns(dict(pcfg))[1]()                    # one launch on a weight set the timing runs did not end on
        torch.cuda.synchronize()
        (out / f"{name}.bin").write_bytes(pbuf.cpu().numpy().astype("<u8").tobytes())
        (out / f"{name}.events").write_text("\n".join(EVENTS) + "\n")
        over = {"with_probes_us": with_p, "without_probes_us": without,
                "with_median_us": sorted(with_p)[1], "without_median_us": sorted(without)[1],
                "overhead_pct": round(100 * (sorted(with_p)[1] / sorted(without)[1] - 1), 3),
                "method": "CUPTI kernel time, mean over the cold weight sets, three runs each (median)"}
        (out / f"{name}.overhead.json").write_text(json.dumps(over, indent=1) + "\n")
        summary["families"][name] = {"cfg": cfg, "grid": grid[0], "units": units, "slots": slots, **over}
        print(f"{name}: {units} units on {grid[0]} programs, {over['without_median_us']:.2f} us without probes, "
              f"{over['with_median_us']:.2f} with ({over['overhead_pct']:+.1f} %)", flush=True)
        del buf, pbuf
        torch.cuda.empty_cache()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
