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


def _lane_intervals(dec, block: int, group: int, event: str):
    """(begins, ends) in us of one writer's intervals of ``event``, in occurrence order."""
    import numpy as np

    sel = np.flatnonzero((dec.lane == block * dec.ngroups + group) & (dec.event == EVENTS.index(event)))
    sel = sel[np.argsort(dec.occurrence[sel])]
    return dec.begin[sel] / 1e3, dec.end[sel] / 1e3


def summarize(folder: Path) -> dict:
    """Per family: medians (and ranges) of the first unit's landing, a unit's multiply, store and wait, the last
    unit's landing and the program's end, over the programs of the one recorded launch, in us (the buffers
    decoded by the timeline package: ns from the earliest record)."""
    import statistics

    from mcp_server.timeline.decode import decode_buffer

    res = {}
    for name, *_ in FAMILIES:
        path = folder / f"{name}.bin"
        if not path.exists():
            continue
        dec = decode_buffer(path)
        cols: dict[str, list[float]] = {k: [] for k in ("first_issue", "first_landed", "multiply", "store",
                                                          "wait_between", "last_landed", "end", "units")}
        for blk in range(dec.nblocks):
            (w_b, w_end), (m_b, m_e), (s_b, s_e) = (_lane_intervals(dec, blk, 0, e) for e in ("wait", "multiply",
                                                                                              "store"))
            i_b = _lane_intervals(dec, blk, 1, "issue")[0]
            n = len(m_b)
            if not n or not len(i_b):
                continue
            cols["first_issue"].append(i_b[0])
            cols["first_landed"].append(w_end[0])
            cols["multiply"] += list(m_e - m_b)
            cols["store"] += list(s_e - s_b)
            cols["wait_between"] += list((w_end - w_b)[1:n])
            cols["last_landed"].append(w_end[n - 1])
            cols["end"].append(max(w_end.max(), m_e.max(), s_e.max()))
            cols["units"].append(n)
        res[name] = {k: {"min": round(float(min(v)), 3), "median": round(float(statistics.median(v)), 3),
                         "max": round(float(max(v)), 3)} for k, v in cols.items() if v}
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
