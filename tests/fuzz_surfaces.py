"""Fuzz cases for the surfaces issue 21 added to the readers: trace sets (the distributedInfo head of each rank),
loop proposals (TOML), validate specs (TOML) and experiment ledgers (SQLite), used by bench/bench_fuzz.py.

Same shape as tests/fuzz_cases.py: ``make_<surface>(rnd, tmp) -> Path`` writes one mutated input derived from
real fixtures, ``run_<surface>(path)`` calls the engine (never running a candidate: specs are loaded, not
validated). Every input carries ``SECRET_MARK`` somewhere, and the bench sets ``SECRET_ENV`` in the process, so
it can count answers or errors that carry either (``secrets_in``).
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from fuzz_cases import WEIRD_NUMBERS, WEIRD_STRINGS, _bytes_mutate, _deep

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RANKS = sorted((FIXTURES / "tracesets" / "balanced").glob("*.json.gz"))
SPEC = FIXTURES / "validate" / "cpu.toml"
LEDGER = Path(__file__).resolve().parent.parent / "examples" / "mla_decode" / "h200" / "ledger.db"
SECRET_MARK = "KSHOSTILEsecret7f3a9c"
SECRET_ENV = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzFUZZKEY"}


def secrets_in(text: str, outcome: str) -> list[str]:
    """The secrets ``text`` (an answer's JSON or an error line) carries: an environment value always counts; the
    file's marker counts in an error (an answer may show what a file holds when reading it is the tool's job)."""
    found = [k for k, v in SECRET_ENV.items() if v in text]
    if outcome == "error" and SECRET_MARK in text:
        found.append("file content in an error")
    return found


def _weird(rnd: random.Random) -> str:
    return rnd.choice(WEIRD_NUMBERS + WEIRD_STRINGS + [_deep(rnd), f'"{SECRET_MARK}"'])


# ----------------------------------------------------------------------------- trace sets


@lru_cache(maxsize=4)
def _rank_doc(i: int) -> tuple[str, str]:
    """(text before the events, the events' text) of real rank ``i`` of tracesets/balanced."""
    doc = json.loads(gzip.decompress(RANKS[i].read_bytes()))
    events = doc.pop("traceEvents")
    doc.pop("distributedInfo", None)
    head = json.dumps(doc)[:-1]
    return head, json.dumps(events)


def _dist_info(rnd: random.Random, rank: int, world: int) -> str | None:
    info = {"backend": "gloo", "rank": rank, "world_size": world, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": SECRET_MARK, "pg_size": world, "ranks": list(range(world))}]}
    kind = rnd.randrange(8)
    if kind == 0:
        return None  # the rank from the file name
    text = json.dumps(info)
    if kind == 1:
        text = text.replace(f'"rank": {rank}', f'"rank": {_weird(rnd)}', 1)
    elif kind == 2:
        text = text.replace(f'"world_size": {world}', f'"world_size": {_weird(rnd)}', 1)
    elif kind == 3:
        text = text.replace('"pg_count": 1', f'"pg_count": {_deep(rnd)}', 1)
    elif kind == 4:
        text = _weird(rnd)  # not an object
    elif kind == 5:
        text = _bytes_mutate(rnd, text.encode(), rnd.randrange(1, 4)).decode("utf-8", "replace")
    return text  # kinds 6, 7: a sane head


def make_traceset(rnd: random.Random, tmp: Path) -> Path:
    d = tmp / f"set{rnd.randrange(1 << 30)}"
    d.mkdir()
    n = rnd.choice([1, 2, 2, 3])
    world = rnd.choice([n, n, n + 1, 2])
    for i in range(n):
        rank = i if rnd.random() < 0.85 else 0  # sometimes a duplicate
        head, events = _rank_doc(i % len(RANKS))
        info = _dist_info(rnd, rank, world)
        name = rnd.choice([f"run-TP-{rank}", f"run.rank{rank}", f"run-TP-{'9' * rnd.choice([3, 30, 200])}", "run"])
        body = head + (f', "distributedInfo": {info}' if info is not None else "") + f', "traceEvents": {events}}}'
        p = d / f"{name}.{i}.json"
        if p.exists():
            p = d / f"{name}.{i}b.json"
        p.write_text(body)
    return d


def run_traceset(path: Path):
    from mcp_server.tracesets.analyze import analyze_trace_set

    return analyze_trace_set([str(path)], executor="inline")


# ----------------------------------------------------------------------------- loop proposals


_PROPOSAL = '''[[proposal]]
id = "p1"
text = "try the wide tile"
kernel = "regex:gemm|{kernel}"
kind = "memory"
spec = "spec.toml"
[proposal.apply]
file = "proj/kernel.py"
with = "variants/fast.py"

[[proposal]]
id = "p2"
text = "inline spec {mark}"
[proposal.spec]
baseline = "proj/kernel.py:run"
shapes = [{{M = 1, K = 64, N = 128}}]
'''


def make_proposals(rnd: random.Random, tmp: Path) -> Path:
    d = tmp / f"props{rnd.randrange(1 << 30)}"
    (d / "proj").mkdir(parents=True)
    (d / "variants").mkdir()
    (d / "proj" / "kernel.py").write_text("def run():\n    return 1\n")
    (d / "variants" / "fast.py").write_text("def run():\n    return 2\n")
    shutil.copy(SPEC, d / "spec.toml")
    text = _PROPOSAL.format(kernel=rnd.choice(["x", "(", "a{99999}", "(a+)+b", SECRET_MARK]), mark=SECRET_MARK)
    lines = text.splitlines()
    for _ in range(rnd.choice([0, 1, 1, 2, 3])):
        i = rnd.randrange(len(lines))
        kind = rnd.randrange(6)
        if kind == 0 and "=" in lines[i]:
            key = lines[i].split("=", 1)[0]
            lines[i] = f"{key}= {rnd.choice(['1e999', 'nan', '[]', '{}', 'true', _toml_deep(rnd), repr(SECRET_MARK)])}"
        elif kind == 1:
            lines[i] = rnd.choice(['file = "/etc/passwd"', 'file = "../../outside.py"', 'with = "proj/.git/config"',
                                   'patch = "spec.toml"', 'repo = "/"', f'id = "{SECRET_MARK}"'])
        elif kind == 2:
            lines.insert(i, rnd.choice(["[[proposal]]", "[proposal.apply]", "[proposal.spec]", "[x]"]))
        elif kind == 3:
            lines[i] = "".join(rnd.choice("[]{}=\"'#\\ az09.\n") for _ in range(rnd.randrange(1, 30)))
        elif kind == 4:
            lines.insert(i, f"note = {_toml_deep(rnd)}")
        else:
            del lines[i]
    p = d / "proposals.toml"
    raw = "\n".join(lines).encode()
    if rnd.random() < 0.1:
        raw = _bytes_mutate(rnd, raw, 3)
    p.write_bytes(raw)
    return p


def _toml_deep(rnd: random.Random) -> str:
    d = rnd.choice([5, 200, 1000, 5000, 50_000])
    return "[" * d + "1" + "]" * d if rnd.random() < 0.5 else "{a = " * d + "1" + "}" * d


def run_proposals(path: Path):
    from mcp_server.loop.proposals import load_proposals

    props = load_proposals(path, repository=path.parent / "proj")
    for p in props:
        p.matches("gemm_kernel_64x64", "gemm")
    return {"proposals": [(p.id, p.change.kind, getattr(p.change, "problem", None)) for p in props]}


# ----------------------------------------------------------------------------- validate specs


def make_spec(rnd: random.Random, tmp: Path) -> Path:
    d = tmp / f"spec{rnd.randrange(1 << 30)}"
    d.mkdir()
    for name in ("base.py", "cand_wrong.py"):
        shutil.copy(FIXTURES / "validate" / name, d / name)
    lines = SPEC.read_text().splitlines()
    lines.append(rnd.choice(['flops = "2*M*N*K"', 'bytes = "(M*K + K*N + M*N)*elem"', ""]))
    for _ in range(rnd.choice([0, 1, 1, 2, 3])):
        i = rnd.randrange(len(lines))
        kind = rnd.randrange(5)
        if kind == 0 and "=" in lines[i] and not lines[i].startswith("#"):
            key = lines[i].split("=", 1)[0]
            lines[i] = f"{key}= {rnd.choice([_toml_deep(rnd), repr(SECRET_MARK), '1e999', 'nan', '-1', '[]', '{}'])}"
        elif kind == 1:
            lines.append(rnd.choice(['flops = "9**9**9**9"', 'flops = "' + "(" * 500 + "M" + ")" * 500 + '"',
                                     'bytes = "__import__(\'os\')"', 'flops = "M/0"', 'flops = "Q*2"',
                                     f'baseline = "{SECRET_MARK}.py:f"', f'{SECRET_MARK} = 1',
                                     'shapes = [{M = "x"}]', 'flops = "' + "M*" * 600 + 'M"']))
        elif kind == 2:
            lines[i] = "".join(rnd.choice("[]{}=\"'#\\ az09.\n") for _ in range(rnd.randrange(1, 30)))
        elif kind == 3:
            lines.insert(i, f"x{rnd.randrange(9)} = {_toml_deep(rnd)}")
        else:
            del lines[i]
    p = d / "spec.toml"
    raw = "\n".join(lines).encode()
    if rnd.random() < 0.1:
        raw = _bytes_mutate(rnd, raw, 3)
    p.write_bytes(raw)
    return p


def run_spec(path: Path):
    from mcp_server.validate.spec import load_spec

    return load_spec(str(path)).settings()


# ----------------------------------------------------------------------------- ledgers


_JSON_COLUMNS = (("experiments", "env"), ("experiments", "target"), ("profiles", "classification"),
                 ("validations", "result"))


def make_ledger(rnd: random.Random, tmp: Path) -> Path:
    p = tmp / f"l{rnd.randrange(1 << 30)}.db"
    shutil.copy(LEDGER, p)
    kind = rnd.randrange(5)
    if kind <= 1:  # a stored JSON value that is deep, huge, not JSON, or carries the marker
        with sqlite3.connect(p) as db:
            table, col = rnd.choice(_JSON_COLUMNS)
            try:
                val = rnd.choice([_deep(rnd), "{" * 3, "NaN", '"' + "x" * 2_000_000 + '"', f'"{SECRET_MARK}"',
                                  json.dumps({"a": [SECRET_MARK] * 1000}), "[" + "1," * 100_000 + "1]"])
                db.execute(f"UPDATE {table} SET {col} = ?", (val,))  # noqa: S608 - names from the list above
            except sqlite3.Error:
                pass
        db.close()
    elif kind == 2:  # a damaged page
        b = bytearray(p.read_bytes())
        b[:] = _bytes_mutate(rnd, bytes(b), rnd.randrange(1, 20))
        p.write_bytes(bytes(b))
    elif kind == 3:  # cut short
        b = p.read_bytes()
        p.write_bytes(b[: rnd.randrange(0, len(b))])
    else:  # meta changed: another schema, another application
        with sqlite3.connect(p) as db:
            try:
                db.execute("UPDATE meta SET value = ? WHERE key = ?",
                           (rnd.choice(["999", "-1", "x", SECRET_MARK]), rnd.choice(["schema_version", "application"])))
            except sqlite3.Error:
                pass
        db.close()
    return p


def run_ledger(path: Path):
    from mcp_server.ledger.engine import ledger_export, ledger_list, ledger_show

    listed = ledger_list(ledger=str(path))
    shown = [ledger_show(e.id, ledger=str(path), full_results=True) for e in listed.experiments[:2]]
    exported = ledger_export(ledger=str(path), format="json")
    return {"list": listed.model_dump(mode="json"), "show": [s.model_dump(mode="json") for s in shown],
            "export_chars": len(exported.text or "")}


SURFACES: dict[str, tuple[Callable[[random.Random, Path], Path], Callable[[Path], Any]]] = {
    "traceset": (make_traceset, run_traceset),
    "proposals": (make_proposals, run_proposals),
    "validate_spec": (make_spec, run_spec),
    "ledger": (make_ledger, run_ledger),
}
