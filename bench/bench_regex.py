#!/usr/bin/env python3
"""Benchmark: classifying kernel names and module keys, RE2 (now) against Python's re (before).

Takes every unique kernel name and functional-block module key of the committed traces,
classifies them with fresh rules (no memo) with the shipped tables, ``--repeat`` times, through
``mcp_server.core.categories`` / ``mcp_server.compare.blocks`` (RE2) and through the previous
implementation (Python ``re``, case-insensitive, first match wins), and checks both agree.

    .venv/bin/python bench/bench_regex.py [--repeat 20]
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_server.compare.blocks import load_blocks, module_keys, parse_blocks  # noqa: E402
from mcp_server.compare.inputs import load_side  # noqa: E402
from mcp_server.core.categories import load_categories, parse_categories  # noqa: E402

TRACES = ROOT / "tests" / "fixtures" / "traces"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    names: set[str] = set()
    keys: set[str] = set()
    for p in sorted(TRACES.glob("*.json.gz")):
        for e in json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                names.add(e["name"])
        keys.update(k for k in module_keys(load_side(p).kernels)[0] if k)
    cats, blocks = load_categories(), load_blocks()
    cat_text = Path(cats.source).read_text()
    blk_text = Path(blocks.source).read_text()
    py_cats = [(re.compile(r.pattern, re.I), r.category) for r in cats.rules]
    py_blks = [(re.compile(r.pattern, re.I), r.block) for r in blocks.rules]

    def py_first(rules, text, default):
        for rx, out in rules:
            if rx.search(text):
                return out
        return default

    def best(fn) -> float:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    rc, rb = parse_categories(cat_text, "c"), parse_blocks(blk_text, "b")

    def new_cats():
        rc._memo.clear()  # every name classified afresh
        return [rc.classify(n) for n in names]

    def new_blks():
        rb._memo.clear()
        return [rb.match(k, "")[0] for k in keys]

    def old_cats():
        return [py_first(py_cats, n, "other") for n in names]

    def old_blks():
        return [py_first(py_blks, k, "") for k in keys]

    assert new_cats() == old_cats() and new_blks() == old_blks()
    t = {f: best(f) for f in (new_cats, old_cats, new_blks, old_blks)}
    parse_t = best(lambda: (parse_categories(cat_text, "c"), parse_blocks(blk_text, "b")))
    re._cache.clear()  # type: ignore[attr-defined]

    def old_parse():
        re._cache.clear()  # type: ignore[attr-defined]  # the first load of a table, as before
        return [re.compile(p, re.I) for p in [r.pattern for r in cats.rules] + [r.pattern for r in blocks.rules]]
    old_parse_t = best(old_parse)
    print(f"kernel names: {len(names)} unique (longest {max(map(len, names))} chars), "
          f"module keys: {len(keys)} unique; best of {args.repeat}")
    print(f"categories  python re {t[old_cats] * 1e3:8.2f} ms   re2 {t[new_cats] * 1e3:8.2f} ms "
          "(no memo)")
    print(f"blocks      python re {t[old_blks] * 1e3:8.2f} ms   re2 {t[new_blks] * 1e3:8.2f} ms")
    print(f"compile both tables (first load)  python re {old_parse_t * 1e3:8.2f} ms   "
          f"re2 (parse + translate + RE2) {parse_t * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
