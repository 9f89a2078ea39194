#!/usr/bin/env python3
"""Timeline decoder throughput (target: >= 20 M records/s).

Builds a large probe buffer with the shape of the real ones (begin/end pairs of 4 phases per
writer, sm tag layout, one instant at the end, the 32-bit timer wrapping mid-run), writes it
as .bin, and times ``decode_buffer`` on the file and on the in-memory array (median of
repeats), then the full analysis once.

    .venv/bin/python bench/bench_timeline.py [--blocks 1024] [--groups 4] [--rounds 4801]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.timeline import layout as L  # noqa: E402
from mcp_server.timeline.analysis import analyze_decoded  # noqa: E402
from mcp_server.timeline.decode import decode_buffer  # noqa: E402


def make_buffer(nblocks: int, ngroups: int, rounds: int, seed: int = 0, nested: bool = False,
                varied: bool = False, scrambled: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    nl = nblocks * ngroups
    lanes = np.arange(nl)
    blocks = lanes // ngroups
    k = np.arange(rounds - 1)[:, None]                     # last round: the instant
    event = (k // 2) % 4
    kind = k % 2
    if nested:  # begin 0, begin 1, end 1, end 0, ...: every writer runs this same nested program
        event = np.array([0, 1, 1, 0])[k % 4]
        kind = np.array([0, 0, 1, 1])[k % 4]
        if varied:  # odd writers nest the other way round (begin 1, begin 0, end 0, end 1): two programs
            event = np.broadcast_to(event, (rounds - 1, nl)).copy()
            event[:, 1::2] = 1 - event[:, 1::2]
        if scrambled:  # each writer picks the nesting order of every 4-record cycle at random: all differ
            flip = rng.integers(0, 2, size=((rounds - 1 + 3) // 4, nl)).astype(bool)
            flip = np.repeat(flip, 4, axis=0)[: rounds - 1]
            event = np.where(flip, 1 - event, event)
    # durations ~ 2-6 us per phase, gaps ~ 0.3 us, a start offset per lane; starts near the wrap
    step = rng.integers(300, 6000, size=(rounds - 1, nl), dtype=np.int64)
    t = (np.cumsum(step, axis=0) + rng.integers(0, 2000, size=nl)[None, :] + (1 << 32) - 5_000_000) & 0xFFFFFFFF
    sm = (blocks % 132)[None, :]
    tag = (sm << 24) | ((blocks & 0xFFF) << 12)[None, :] | (event << 2) | kind
    body = np.empty((rounds, nl), dtype=np.uint64)
    body[:-1] = (t.astype(np.uint64) << np.uint64(32)) | tag.astype(np.uint64)
    last_t = (t[-1] + 100) & 0xFFFFFFFF
    body[-1] = (last_t.astype(np.uint64) << np.uint64(32)) | (((sm[0] << 24) | ((blocks & 0xFFF) << 12) | (4 << 2) | 2).astype(np.uint64))
    return np.concatenate([np.array([L.header_word(nblocks, ngroups)], dtype=np.uint64), body.reshape(-1)])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=1024)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4801)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--nested", action="store_true",
                    help="nested phases, the same program on every writer (the uniform-program path)")
    ap.add_argument("--varied", action="store_true",
                    help="with --nested: odd writers nest the other way round (two programs)")
    ap.add_argument("--scrambled", action="store_true",
                    help="with --nested: every writer's program differs (the per-writer matcher)")
    a = ap.parse_args()
    buf = make_buffer(a.blocks, a.groups, a.rounds, nested=a.nested, varied=a.varied, scrambled=a.scrambled)
    n = buf.size - 1
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "big.bin"
        buf.tofile(p)
        d = decode_buffer(p)  # warm-up + sanity
        assert d.stats.records == n and d.stats.unmatched_begins == 0 and d.stats.tag_mismatches == 0
        assert d.stats.timer_wraps > 0
        t_file, t_mem = [], []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            decode_buffer(p)
            t_file.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            decode_buffer(buf)
            t_mem.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    res = analyze_decoded(d, ["load", "compute", "reduce", "store", "done"])
    t_an = time.perf_counter() - t0
    mf, mm = statistics.median(t_file), statistics.median(t_mem)
    print(f"buffer: {a.blocks} blocks x {a.groups} groups x {a.rounds} rounds = {n / 1e6:.1f} M records "
          f"({buf.nbytes / 2**20:.0f} MiB), {d.event.size / 1e6:.2f} M intervals"
          + (", flat phases (pairs in consecutive rounds)" if not a.nested else
             ", nested phases, every writer's program differs (per-writer matcher)" if a.scrambled else
             ", nested phases, two writer programs (program-grouped path)" if a.varied else
             ", nested phases, one program on every writer (program-grouped path)"))
    print(f"decode from .bin   : median {mf:.3f} s (best {min(t_file):.3f}) over {a.repeats} -> "
          f"{n / mf / 1e6:.1f} M records/s (best {n / min(t_file) / 1e6:.1f})")
    print(f"decode from array  : median {mm:.3f} s (best {min(t_mem):.3f}) over {a.repeats} -> "
          f"{n / mm / 1e6:.1f} M records/s (best {n / min(t_mem) / 1e6:.1f})")
    print(f"load average during the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"analysis (phases, critical path, verdicts): {t_an:.2f} s, {len(res.phases)} phases, "
          f"{len(res.critical_path)} chain steps")
    ok = n / mf >= 20e6
    print("target >= 20 M records/s (decode from .bin):", "met" if ok else "MISSED")
    return 0 if ok or a.scrambled else 1


if __name__ == "__main__":
    sys.exit(main())
