"""A two-phase Triton kernel instrumented with kernelscope's Triton probe helper.

Each program normalises ROWS rows of X (rowsum, then scale), recording begin/end of both
phases per row and a final instant. PROBE=False compiles the probes out (for the overhead
measurement). Used by tools/make_timeline_fixtures.py and tests/test_timeline_gpu.py.
"""
import triton
import triton.language as tl

from mcp_server.timeline.triton_probe import probe_begin, probe_counter, probe_end, probe_init, probe_instant


@triton.jit
def rows_kernel(X, Y, N, buf, cap, ROWS: tl.constexpr, BLOCK: tl.constexpr, PROBE: tl.constexpr):
    pid = tl.program_id(0)
    tag = pid.to(tl.int64) * 0
    rec = probe_counter()
    if PROBE:
        tag = probe_init(buf)
    for r in range(ROWS):
        row = (pid * ROWS + r).to(tl.int64)
        if PROBE:
            rec = probe_begin(buf, tag, rec, cap, 0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for c in range(0, N, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            acc += tl.load(X + row * N + offs, mask=offs < N, other=0.0)
        s = tl.sum(acc, axis=0)
        if PROBE:
            rec = probe_end(buf, tag, rec, cap, 0)
            rec = probe_begin(buf, tag, rec, cap, 1)
        for c in range(0, N, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            x = tl.load(X + row * N + offs, mask=offs < N, other=0.0)
            tl.store(Y + row * N + offs, x / s, mask=offs < N)
        if PROBE:
            rec = probe_end(buf, tag, rec, cap, 1)
    if PROBE:
        probe_instant(buf, tag, rec, cap, 2)

