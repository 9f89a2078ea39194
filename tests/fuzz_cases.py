"""Fuzz cases for the file readers, shared by tests/test_fuzz_readers.py (hypothesis, bounded) and
bench/bench_fuzz.py (a longer run in child processes).

Each parser has ``make_<parser>(rnd, tmp) -> Path`` writing one mutated input (derived from real
fixtures) with ``random.Random`` ``rnd``, and ``run_<parser>(path)`` calling the engine. ``contract(fn,
path)`` runs one case and says what happened: ``"ok"`` (a result whose JSON form is finite), ``"error"``
(a ``KernelscopeError`` of one line naming the file) or raises ``ContractBroken`` with what broke.
"""
from __future__ import annotations

import gzip
import io
import json
import math
import random
import re
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRACE = FIXTURES / "traces" / "llama_prefill_sdpa.json.gz"
UPSTREAM = FIXTURES / "upstream" / "llama_prefill_sdpa.xlsx"
BUFFERS = sorted((FIXTURES / "timeline").glob("*.bin"))


class ContractBroken(AssertionError):
    """The one-error contract was broken: an exception that is not a KernelscopeError, or a bad message."""


def contract(fn: Callable[[Path], Any], path: Path) -> str:
    from pydantic import BaseModel

    from mcp_server.core.errors import KernelscopeError

    try:
        res = fn(path)
    except KernelscopeError as exc:
        msg = str(exc)
        if "\n" in msg:
            raise ContractBroken(f"multi-line error: {msg[:300]!r}") from None
        if str(path) not in msg and path.name not in msg:
            raise ContractBroken(f"error does not name the file: {msg[:300]!r}") from None
        return "error"
    except RecursionError as exc:
        raise ContractBroken(f"RecursionError: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the contract: nothing but KernelscopeError escapes
        raise ContractBroken(f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    data = res.model_dump(mode="json") if isinstance(res, BaseModel) else res
    try:
        json.dumps(data, allow_nan=False)
    except ValueError as exc:
        raise ContractBroken(f"result holds a non-finite number ({exc})") from None
    return "ok"


# ----------------------------------------------------------------------------- shared mutations

WEIRD_NUMBERS = ["1e308", "-1e308", "1e999", "-5", "0", "-0.0", "1e-320", "123456789012345678901234567890",
                 "NaN", "Infinity", "-Infinity", '"12"', "null", "true", "[]", "{}", '"x"', "4.5e15", "9" * 400]
WEIRD_STRINGS = ['"\\u0000"', '"\\ud800"', '"' + "é" * 50 + '"', '""', '"' + "n" * 5000 + '"', "12", "null",
                 '"nn.Module: "', '"nn.Module: X_"', '"../../etc/passwd"', '"a,b\\n\\"c"']


def _bytes_mutate(rnd: random.Random, data: bytes, n: int) -> bytes:
    b = bytearray(data)
    for _ in range(n):
        if not b:
            break
        op = rnd.randrange(4)
        i = rnd.randrange(len(b))
        if op == 0:
            b[i] = rnd.randrange(256)
        elif op == 1:
            del b[i:i + rnd.randrange(1, 64)]
        elif op == 2:
            b[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 16)))
        else:
            j = rnd.randrange(len(b))
            b[i:i] = b[j:j + rnd.randrange(1, 256)]
    return bytes(b)


def _deep(rnd: random.Random) -> str:
    d = rnd.choice([10, 500, 1500, 5000, 100_000])
    o, c = rnd.choice([("[", "]"), ('{"a":', "}")])
    return o * d + "1" + c * d


# ----------------------------------------------------------------------------- traces


@lru_cache(maxsize=1)
def _trace_events() -> tuple[dict, list]:
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    events = doc.pop("traceEvents")
    keep = [e for i, e in enumerate(events) if e.get("cat") not in ("python_function", "cpu_op") or i % 3 == 0]
    return doc, keep


def make_trace(rnd: random.Random, tmp: Path) -> Path:
    meta, events = _trace_events()
    events = [dict(e) for e in rnd.sample(events, k=min(len(events), rnd.randrange(1, 500)))]
    events.sort(key=lambda e: e.get("ts", 0))
    texts = [json.dumps(e) for e in events]
    for _ in range(rnd.randrange(0, 12)):  # structural edits: a field's value becomes something odd
        k = rnd.randrange(len(texts))
        field = rnd.choice(["ts", "dur", "correlation", "pid", "tid", "name", "cat", "device", "stream"])
        pool = WEIRD_NUMBERS + WEIRD_STRINGS + [_deep(rnd)]
        if rnd.random() < 0.85:  # mostly valid JSON, so the decoder gets past the text to the values
            pool = [v for v in pool if v not in ("NaN", "Infinity", "-Infinity", "9" * 400)]
        value = rnd.choice(pool)
        texts[k] = re.sub(rf'("{re.escape(field)}":\s*)("[^"]*"|[^,}}\]]+)',
                          lambda m, v=value: m.group(1) + v, texts[k], count=1)
    layout = rnd.randrange(4)
    body = "[" + ",".join(texts) + "]"
    head = json.dumps(meta)[1:-1]
    if layout == 0:
        text = body  # a bare event array
    elif layout == 1:  # metadata after the events
        text = '{"traceEvents": ' + body + (", " + head if head else "") + "}"
    else:
        text = "{" + head + (", " if head else "") + '"traceEvents": ' + body + "}"
    raw = text.encode("utf-8", "surrogatepass")
    if rnd.random() < 0.15:
        raw = _bytes_mutate(rnd, raw, rnd.randrange(1, 8))
    if rnd.random() < 0.1:
        raw = raw[: rnd.randrange(len(raw) + 1)]
    p = tmp / f"t{rnd.randrange(1 << 30)}.json"
    if rnd.random() < 0.4:
        raw = gzip.compress(raw, 1, mtime=0)
        if rnd.random() < 0.3:
            raw = _bytes_mutate(rnd, raw, rnd.randrange(1, 4))
        p = p.with_suffix(".json.gz")
    p.write_bytes(raw)
    return p


def run_trace(path: Path):
    from mcp_server.traces import analyze_trace

    return analyze_trace(path)


# ----------------------------------------------------------------------------- xlsx


@lru_cache(maxsize=1)
def _kernelscope_report() -> bytes:
    import tempfile

    from mcp_server.traces import analyze_trace

    with tempfile.TemporaryDirectory() as t:
        out = Path(t) / "r.xlsx"
        analyze_trace(TRACE, output_xlsx=str(out))
        return out.read_bytes()


def _xml_mutate(rnd: random.Random, name: str, data: bytes) -> bytes:
    ops = rnd.randrange(1, 6)
    for _ in range(ops):
        op = rnd.randrange(7)
        if op == 0:  # a cell value becomes odd
            vals = list(re.finditer(rb"<v>[^<]*</v>", data))
            if vals:
                m = rnd.choice(vals)
                v = rnd.choice(WEIRD_NUMBERS + ["1E+300", "inf", "-inf", "nan", "", "abc"]).encode()
                data = data[:m.start()] + b"<v>" + v + b"</v>" + data[m.end():]
        elif op == 1:  # a cell reference moves (sometimes far)
            refs = list(re.finditer(rb' r="[A-Z]+\d+"', data))
            if refs:
                m = rnd.choice(refs)
                col = rnd.choice(["A", "C", "Z", "AA", "XFD", "ZZZZ"])
                row = rnd.choice([1, 2, 50, 5000, 1048576, 99999999])
                data = data[:m.start()] + f' r="{col}{row}"'.encode() + data[m.end():]
        elif op == 2:  # an inline string or shared string text becomes odd
            ts = list(re.finditer(rb"<t[^>]*>[^<]*</t>", data))
            if ts:
                m = rnd.choice(ts)
                s = rnd.choice(["", "Kernels (full", "1e999", "x" * 40000, "Summary", "├── X", "Category",
                                "Kernel Name", "nan", "-1"])
                data = data[:m.start()] + b"<t>" + s.encode() + b"</t>" + data[m.end():]
        elif op == 3:  # rows dropped or repeated
            rows = list(re.finditer(rb"<row\b.*?</row>", data, re.S))
            if rows:
                m = rnd.choice(rows)
                rep = b"" if rnd.random() < 0.5 else m.group(0) * rnd.randrange(2, 20)
                data = data[:m.start()] + rep + data[m.end():]
        elif op == 4:  # the dimension claims another size
            dim = rnd.choice(["A1", "A1:B2", "A1:XFD1048576", "A1:J100000", "ZZ"]).encode()
            data = re.sub(rb'<dimension ref="[^"]*"', b'<dimension ref="' + dim + b'"', data, count=1)
        elif op == 5:
            data = _bytes_mutate(rnd, data, rnd.randrange(1, 4))
        else:  # a sheet name in the workbook part changes
            names = list(re.finditer(rb'<sheet name="[^"]*"', data))
            if names:
                m = rnd.choice(names)
                n = rnd.choice(["Kernels (full", "Kernels (full)", "GPU Kernels", "Summary", "X (pre", "(", "é"])
                data = data[:m.start()] + f'<sheet name="{n}"'.encode() + data[m.end():]
    return data


def make_xlsx(rnd: random.Random, tmp: Path) -> Path:
    base = _kernelscope_report() if rnd.random() < 0.6 else UPSTREAM.read_bytes()
    p = tmp / f"x{rnd.randrange(1 << 30)}.xlsx"
    if rnd.random() < 0.15:  # damage the zip itself
        p.write_bytes(_bytes_mutate(rnd, base, rnd.randrange(1, 6)))
        return p
    with zipfile.ZipFile(io.BytesIO(base)) as zin:
        infos = zin.infolist()
        targets = {i.filename for i in rnd.sample(infos, k=rnd.randrange(1, 4))}
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zout:
            for info in infos:
                if info.filename in targets and rnd.random() < 0.05:
                    continue  # a member goes missing
                data = zin.read(info)
                if info.filename in targets and info.filename.endswith(".xml"):
                    data = _xml_mutate(rnd, info.filename, data)
                zout.writestr(info.filename, data)
    p.write_bytes(out.getvalue())
    return p


def run_xlsx(path: Path):
    from mcp_server.reports import kernel_table, read_report
    from mcp_server.reports.guard import clear_cache

    clear_cache()
    rep = read_report(path)
    df = kernel_table(rep)
    for c in ("dur_us", "ts_us"):
        if c in df.columns and len(df) and not np.isfinite(df[c].to_numpy(dtype=float)).all():
            raise ContractBroken(f"kernel table column {c} holds non-finite values")
    total = rep.total_kernel_us
    if total is not None and not math.isfinite(total):
        raise ContractBroken(f"total_kernel_us is {total}")
    return {"rows": len(df), "total": total}


def make_recategorize(rnd: random.Random, tmp: Path) -> Path:
    return make_xlsx(rnd, tmp)


def run_recategorize(path: Path):
    from mcp_server.compare.recategorize import recategorize
    from mcp_server.reports.guard import clear_cache

    clear_cache()
    cats = path.with_suffix(".csv")
    cats.write_text("category,pattern\nnorm_new,rsqrt|rms\nelementwise,elementwise|vectorized\n"
                    "gemm,gemm|nvjet|cutlass\nother,.*\n")
    return recategorize([str(path)], categories=str(cats), output_dir=str(path.parent / "out"))


# ----------------------------------------------------------------------------- timeline


def make_buffer(rnd: random.Random, tmp: Path) -> Path:
    kind = rnd.randrange(4)
    if kind == 0 and BUFFERS:  # a real buffer, mutated
        raw = np.fromfile(rnd.choice(BUFFERS), dtype="<u8").copy()
        for _ in range(rnd.randrange(1, 40)):
            i = rnd.randrange(raw.size)
            raw[i] = rnd.choice([0, rnd.getrandbits(64), raw[rnd.randrange(raw.size)],
                                 int(raw[i]) ^ (1 << rnd.randrange(64))])
        if rnd.random() < 0.3:
            raw = raw[: rnd.randrange(1, raw.size + 1)]
    elif kind == 1:  # random slots after a plausible header
        nb, ng = rnd.randrange(1, 300), rnd.randrange(1, 9)
        rounds = rnd.randrange(1, 40)
        raw = np.array([nb | (ng << 32)] + [rnd.getrandbits(64) for _ in range(nb * ng * rounds)], dtype=np.uint64)
    elif kind == 2:  # structured records: begin/end/instant of random events, timers maybe wrapping
        nb, ng = rnd.randrange(1, 64), rnd.randrange(1, 4)
        rounds = rnd.randrange(1, 30)
        lanes = nb * ng
        raw = np.zeros(1 + lanes * rounds, dtype=np.uint64)
        raw[0] = nb | (ng << 32) | ((1 << 63) if rnd.random() < 0.1 else 0)
        t = rnd.randrange(1 << 32)
        for r in range(rounds):
            for lane in range(lanes):
                if rnd.random() < 0.1:
                    continue
                ev, typ = rnd.randrange(6), rnd.choice([0, 1, 1, 0, 2, 3])
                layout_block = lane if rnd.random() < 0.9 else rnd.randrange(1 << 20)
                tag = ((layout_block & 0xFFFFF) << 12) | (ev << 2) | typ
                t = (t + rnd.randrange(0, 5000)) & 0xFFFFFFFF
                raw[1 + lane + r * lanes] = (t << 32) | tag
    else:  # a header alone, absurd headers, tiny buffers
        raw = np.array([rnd.choice([0, 1, (1 << 32) | 1, (1 << 64) - 1, 5 | (3 << 32), rnd.getrandbits(64)])]
                       + [rnd.getrandbits(64) for _ in range(rnd.randrange(0, 20))], dtype=np.uint64)
    if rnd.random() < 0.2:
        p = tmp / f"b{rnd.randrange(1 << 30)}.npy"
        dtype = rnd.choice(["<u8", "<i8", ">u8", "<u4", "<f8", "u1"])
        try:
            arr = raw.view(dtype) if np.dtype(dtype).itemsize <= 8 else raw
        except ValueError:
            arr = raw
        np.save(p, arr if rnd.random() < 0.8 else arr.reshape(-1, 1) if arr.size else arr)
        if rnd.random() < 0.2:
            p.write_bytes(_bytes_mutate(rnd, p.read_bytes(), 3))
        return p
    p = tmp / f"b{rnd.randrange(1 << 30)}.bin"
    data = raw.tobytes()
    if rnd.random() < 0.1:
        data = data[: rnd.randrange(len(data) + 1)]
    p.write_bytes(data)
    return p


def run_buffer(path: Path):
    from mcp_server.timeline.analysis import analyze_timeline

    return analyze_timeline(path, event_names=None)


# ----------------------------------------------------------------------------- rule CSVs

_CSV_ALPHABET = "abcxyz_09,\"'\n\r\t #|()[]^$.\\é\x00-"


def make_rules(rnd: random.Random, tmp: Path) -> Path:
    header = rnd.choice(["category,pattern"] * 6 + ["pattern,category", "Category , Pattern", "category", "x,y",
                                                     "category,pattern,extra"])
    good = ["gemm,gemm|nvjet|cutlass", "attention,flash|fmha|attn", "norm,rms|layer_?norm", "other,.*",
            "comm,nccl", "elementwise,elementwise|vectorized", "# a comment", ""]
    lines = [header] + [rnd.choice(good) for _ in range(rnd.randrange(0, 12))]
    for _ in range(rnd.choice([0, 0, 1, 1, 2, 3])):
        kind = rnd.randrange(5)
        if kind == 0:
            bad = "".join(rnd.choice(_CSV_ALPHABET) for _ in range(rnd.randrange(0, 40)))
        elif kind == 1:
            bad = f"{rnd.choice(['gemm', 'attn', '', 'other'])},{rnd.choice(['(', '[x', 'a)', '^$', '', 'a||b'])}"
        elif kind == 2:
            bad = "big," + "a" * rnd.choice([100, 131_073, 200_000])
        elif kind == 3:
            bad = '"unterminated,' + "q" * rnd.randrange(0, 50)
        else:
            bad = "# comment " + "z" * rnd.randrange(0, 20)
        lines.insert(rnd.randrange(1, len(lines) + 1), bad)
    p = tmp / f"r{rnd.randrange(1 << 30)}.csv"
    raw = "\n".join(lines).encode("utf-8")
    if rnd.random() < 0.1:
        raw = _bytes_mutate(rnd, raw, 3)
    p.write_bytes(raw)
    return p


def run_rules(path: Path):
    from mcp_server.core.categories import load_categories

    load_categories(path)
    return {"ok": True}


PARSERS: dict[str, tuple[Callable[[random.Random, Path], Path], Callable[[Path], Any]]] = {
    "trace": (make_trace, run_trace),
    "xlsx": (make_xlsx, run_xlsx),
    "recategorize": (make_recategorize, run_recategorize),
    "timeline": (make_buffer, run_buffer),
    "rules_csv": (make_rules, run_rules),
}
