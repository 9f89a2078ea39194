"""Every kernelscope writer, killed with SIGKILL in the middle of its write (shared by
tests/test_writes_kill.py, a few iterations, and bench/bench_kill.py, 50 per writer).

A writer is set up once in this process (trace analysed, diff computed, buffer decoded ...),
written once to make the reference output, then for each iteration a forked child writes it
in a loop until it is killed at a random moment; the output must then be intact (the
reference bytes, or for xlsx a complete workbook with the same sheets), and the next
completed write must leave no temp file beside it.
"""
from __future__ import annotations

import json
import os
import random
import select
import signal
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

FIX = Path(__file__).parent / "fixtures"
TRACES = FIX / "traces"


@dataclass
class Writer:
    name: str
    filename: str
    setup: Callable[[Path], Any]               # dir -> state (run once)
    write: Callable[[Any, Path], None]         # (state, output path) -> writes it
    kind: str                                  # how the output is checked: bytes | xlsx | json
    _state: Any = field(default=None, repr=False)


def _analysis(_d: Path) -> Any:
    from mcp_server.traces import analyze_trace

    return analyze_trace(str(TRACES / "llama_prefill_eager.json.gz"))


def _report(d: Path) -> Path:
    from mcp_server.reports.xlsx_writer import write_analysis_report

    src = d / "src" / "source.xlsx"
    if not src.exists():
        src.parent.mkdir(exist_ok=True)
        write_analysis_report(_analysis(d), src)
    return src


def _recat_inplace_setup(d: Path) -> Any:
    from mcp_server.core.categories import load_categories

    src = _report(d)
    lines = Path(load_categories().source).read_text().splitlines()
    a, b = d / "cats_a.csv", d / "cats_b.csv"
    a.write_text("\n".join([lines[0], "pointwise,vectorized_elementwise|rms_?norm"] + lines[1:]) + "\n")
    b.write_text("\n".join(lines) + "\n")
    return {"src": src, "cats": [str(a), str(b)], "i": 0}


def _recat_inplace(st: Any, out: Path) -> None:
    import shutil

    from mcp_server.compare.recategorize import recategorize

    if not out.exists():
        shutil.copyfile(st["src"], out)
    st["i"] += 1
    recategorize([str(out)], categories=st["cats"][st["i"] % 2])  # every run changes cells


def _recat_copy(st: Any, out: Path) -> None:
    from mcp_server.compare.recategorize import recategorize

    recategorize([str(st)], output_dir=str(out.parent))  # nothing to change: an atomic copy


def _diff(_d: Path) -> Any:
    from mcp_server.compare.diff import diff_modules

    return diff_modules(TRACES / "llama_prefill_eager.json.gz", TRACES / "llama_prefill_sdpa.json.gz",
                        labels=["eager", "sdpa"])


def _timeline(_d: Path) -> Any:
    from mcp_server.timeline.analysis import analyze_decoded
    from mcp_server.timeline.decode import decode_buffer

    dec = decode_buffer(FIX / "timeline" / "imbalanced_probe.bin")
    return dec, analyze_decoded(dec)


def _ncu(_d: Path) -> Any:
    from mcp_server.ncu.classify import classify_bottleneck
    from mcp_server.ncu.select import select_candidate

    p = str(FIX / "ncu" / "targets_all.raw.csv")
    return classify_bottleneck(p), select_candidate(p)


def _cache_write(st: Any, out: Path) -> None:
    from mcp_server.refs.cache import RefCache as Cache

    Cache(directory=out.parent).put("github", "org/repo", "query", value=st)


def _cache_setup(_d: Path) -> Any:
    return {"items": [{"title": f"issue {i}", "body": "x" * 2000} for i in range(200)]}


def _cache_file(d: Path) -> Path:
    files = [p for p in d.iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
    return files[0]


def _big_setup(_d: Path) -> Any:
    return os.urandom(1 << 20) * 16  # 16 MiB


def _w_xlsx(a, out):
    from mcp_server.reports.xlsx_writer import write_analysis_report
    write_analysis_report(a, out)


def _w_diff_xlsx(r, out):
    from mcp_server.compare.xlsx import write_diff_xlsx
    write_diff_xlsx(r, out)


def _w_diff_html(r, out):
    from mcp_server.compare.html import write_diff_html
    write_diff_html(r, out)


def _w_perfetto(t, out):
    from mcp_server.timeline.export import write_perfetto
    write_perfetto(t[0], t[1], out)


def _w_gantt(t, out):
    from mcp_server.timeline.export import write_gantt_png
    write_gantt_png(t[0], t[1], out, max_lanes=16)


def _w_roofline(n, out):
    from mcp_server.ncu.select import write_roofline
    write_roofline(n[0], str(out))


def _w_md(n, out):
    from mcp_server.ncu.render import write_markdown
    write_markdown(n[1], str(out))


def _w_overhead(_s, out):
    from mcp_server.timeline.overhead import write_overhead
    write_overhead(out, [10.0 + i * 0.01 for i in range(5000)], [9.0 + i * 0.01 for i in range(5000)])


def _w_bytes(data, out):
    from mcp_server.core.atomic import atomic_write_bytes
    atomic_write_bytes(out, data)


WRITERS = [
    Writer("analyze report (xlsx)", "report.xlsx", _analysis, _w_xlsx, "xlsx"),
    Writer("recategorize in place (xlsx patch)", "inplace.xlsx", _recat_inplace_setup, _recat_inplace, "xlsx"),
    Writer("recategorize copy (no change)", "source.xlsx", _report, _recat_copy, "xlsx"),
    Writer("compare xlsx", "diff.xlsx", _diff, _w_diff_xlsx, "xlsx"),
    Writer("compare html", "diff.html", _diff, _w_diff_html, "html"),
    Writer("timeline perfetto json", "tl.json", _timeline, _w_perfetto, "bytes"),
    Writer("timeline gantt png", "tl.png", _timeline, _w_gantt, "png"),
    Writer("ncu roofline png", "roof.png", _ncu, _w_roofline, "png"),
    Writer("ncu selection markdown", "sel.md", _ncu, _w_md, "bytes"),
    Writer("probe overhead json", "x.overhead.json", lambda d: None, _w_overhead, "json"),
    Writer("refs cache entry", "", _cache_setup, _cache_write, "json"),
    Writer("atomic bytes (16 MiB)", "big.bin", _big_setup, _w_bytes, "bytes"),
]


def _xlsx_sheets(p: Path) -> list[str]:
    with zipfile.ZipFile(p) as z:
        assert z.testzip() is None, f"{p}: damaged member"
    from python_calamine import CalamineWorkbook

    return list(CalamineWorkbook.from_path(str(p)).sheet_names)


def _check(w: Writer, out: Path, ref: Any) -> None:
    """Raise AssertionError when ``out`` is not a complete output of ``w``."""
    assert out.exists(), f"{w.name}: output gone"
    if w.kind == "xlsx":
        assert _xlsx_sheets(out) == ref, f"{w.name}: sheets differ"
    elif w.kind == "html":
        assert out.read_text().rstrip().endswith("</html>"), f"{w.name}: truncated HTML"
    elif w.kind == "json":
        json.loads(out.read_text())
    elif w.kind == "png":
        b = out.read_bytes()
        assert b.startswith(b"\x89PNG\r\n\x1a\n") and b.endswith(b"IEND\xaeB`\x82"), f"{w.name}: truncated PNG"
    else:
        assert out.read_bytes() == ref, f"{w.name}: bytes differ from the reference"


def _temps(d: Path, out: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.startswith("." + out.name[:100] + ".")]


_SETUPS: dict[Any, Any] = {}
_SHARED = {"_analysis", "_diff", "_timeline", "_ncu"}  # read-only states several writers use


def _shared_setup(fn: Callable[[Path], Any], d: Path) -> Any:
    if fn.__name__ not in _SHARED:
        return fn(d)
    if fn not in _SETUPS:
        _SETUPS[fn] = fn(d)
    return _SETUPS[fn]


@dataclass
class KillStats:
    writer: str
    iterations: int = 0
    write_s: float = 0.0
    targeted: int = 0              # kills aimed inside a write (after its temp file was opened)
    killed_mid_write: int = 0      # kills that left a temp file (the kill landed inside a write)
    corrupted: int = 0             # outputs found damaged after a kill (goal 0)
    temps_after_next_run: int = 0  # temp files still there after the next completed write (goal 0)
    failures: list[str] = field(default_factory=list)


def run(w: Writer, d: Path, iterations: int, seed: int = 1) -> KillStats:
    """Kill ``w`` mid-write ``iterations`` times in directory ``d``; return what was found."""
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    if w._state is None:
        w._state = _shared_setup(w.setup, d)
    st = w._state
    out = d / w.filename if w.filename else None
    t0 = time.perf_counter()
    w.write(st, out if out else d / "x")
    write_s = time.perf_counter() - t0
    if out is None:
        out = _cache_file(d)
    ref: Any = _xlsx_sheets(out) if w.kind == "xlsx" else out.read_bytes()
    stats = KillStats(w.name, write_s=write_s)
    for it in range(iterations):
        # even iterations: killed at a random moment of the loop (rendering included); odd ones:
        # killed right after, within 5 ms or within 50 ms after the output's temp file was opened
        targeted = it % 2 == 1
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child writes until it is killed
            try:
                os.close(r)
                import mcp_server.core.atomic as atomic

                real_new_temp = atomic.new_temp

                def announcing(*a: Any, _new: Any = real_new_temp, _fd: int = wfd, **k: Any) -> str:
                    tmp = _new(*a, **k)
                    if sys._getframe(1).f_code.co_name != "probe_writable":  # the real write starts
                        os.write(_fd, b"t")
                    return tmp

                atomic.new_temp = announcing  # type: ignore[assignment]
                while True:
                    w.write(st, out)
            finally:
                os._exit(1)
        os.close(wfd)
        if targeted:
            select.select([r], [], [], 30.0)
            # at once (before the data), within 5 ms (writing, fsync, rename), or later in the write
            time.sleep(rng.choice([0.0, rng.uniform(0.0, 0.005), rng.uniform(0.0, min(0.05, 1.5 * write_s))]))
        else:
            time.sleep(rng.uniform(0.0, max(0.02, 1.5 * write_s)))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        if targeted:
            stats.targeted += 1
        stats.iterations += 1
        if _temps(d, out):
            stats.killed_mid_write += 1
        try:
            _check(w, out, ref)
        except AssertionError as exc:
            stats.corrupted += 1
            stats.failures.append(str(exc))
        w.write(st, out)  # the next run
        left = _temps(d, out)
        if left:
            stats.temps_after_next_run += len(left)
            stats.failures.append(f"{w.name}: temp files left after the next run: {left}")
        try:
            _check(w, out, ref)
        except AssertionError as exc:
            stats.corrupted += 1
            stats.failures.append(f"after the next run: {exc}")
    return stats
