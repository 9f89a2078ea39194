"""The validation spec: a TOML file, or the same fields as arguments (which override the file).

Function references are ``"path/to/file.py:function"`` (relative to the spec file's folder,
or to the working directory for fields given as arguments) or ``"package.module:function"``.
"""
from __future__ import annotations

import ast
import math
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_server.core.errors import FileMissingError, InputError
from mcp_server.core.limits import check_nesting, loads_toml

DTYPES = ("float16", "bfloat16", "float32", "float64")

#: Default (rtol, atol) per dtype, against a higher-precision reference.
DEFAULT_TOL: dict[str, tuple[float, float]] = {
    "bfloat16": (1.6e-2, 1e-2),
    "float16": (2e-3, 1e-3),
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
}

#: Every key a spec file may hold, with its default (None: required or derived).
DEFAULTS: dict[str, Any] = {
    "baseline": None,
    "candidate": None,
    "inputs": None,
    "shapes": None,
    "dtype": "bfloat16",
    "device": "cuda",
    "rtol": None,
    "atol": None,
    "min_gain": 0.03,
    "time_budget_s": 30.0,
    "mode": "ab",
    "cache": "cold",
    "seeds": 3,
    "seed": None,
    "confidence": 0.95,
    "ci_half_width": 0.01,
    "min_rounds": 20,
    "max_rounds": 2000,
    "graphs": "auto",
    "flops": None,
    "bytes": None,
    "other_cache": True,
    "threads": 1,
}


@dataclass(frozen=True)
class FuncRef:
    text: str       # as written
    kind: str       # "file" | "module"
    target: str     # absolute file path, or dotted module name
    func: str


@dataclass(frozen=True)
class Spec:
    baseline: FuncRef
    candidate: FuncRef | None
    inputs: FuncRef
    shapes: list[dict[str, Any]]
    dtype: str
    device: str
    rtol: float
    atol: float
    min_gain: float
    time_budget_s: float
    mode: str
    cache: str
    seeds: int
    seed: int
    confidence: float
    ci_half_width: float
    min_rounds: int
    max_rounds: int
    graphs: str
    flops: str | None
    bytes: str | None
    other_cache: bool
    threads: int
    spec_path: str | None = None
    search_dirs: list[str] = field(default_factory=list)

    def settings(self) -> dict[str, Any]:
        """The effective settings, as reported in the result."""
        d = {k: getattr(self, k) for k in DEFAULTS}
        for k in ("baseline", "candidate", "inputs"):
            ref = d[k]
            d[k] = ref.text if ref is not None else None
        d["spec_path"] = self.spec_path
        return d


def _got(val: Any, shown: bool) -> str:
    """``val`` for a message: as given when it came from the caller's arguments, else (a value of a file the caller
    named) only its kind, so an error never carries what the file holds."""
    if shown:
        return repr(val)
    if isinstance(val, str):
        return f"a string of {len(val)} character(s)"
    return f"a {type(val).__name__}"


def parse_ref(text: Any, base_dir: Path, name: str, where: str, shown: bool = True) -> FuncRef:
    if not isinstance(text, str) or ":" not in text:
        raise InputError(f"{where}: '{name}' must be \"path/to/file.py:function\" or "
                         f"\"package.module:function\", got {_got(text, shown)}")
    target, _, func = text.rpartition(":")
    if not func.isidentifier() or not target:
        raise InputError(f"{where}: '{name}' = {_got(text, shown)}: the part after ':' must be a function name")
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = (base_dir / target).expanduser().resolve()
        if not path.is_file():
            raise FileMissingError(f"{where}: '{name}' names {path}, which does not exist",
                                   hint="paths in a spec file are relative to the spec file")
        return FuncRef(text, "file", str(path), func)
    if not all(p.isidentifier() for p in target.split(".")):
        raise InputError(f"{where}: '{name}' = {_got(text, shown)} is neither a .py path nor a dotted module name")
    return FuncRef(text, "module", target, func)


def load_spec(spec_path: str | None = None, overrides: dict[str, Any] | None = None) -> Spec:
    """Read the TOML spec (if any), apply the overrides that are not None, check every field."""
    raw, file_dir, where = _read_file(spec_path)
    over = {k: v for k, v in (overrides or {}).items() if v is not None}
    check_nesting(over, "validate arguments")
    unknown = sorted(set(over) - set(DEFAULTS))
    if unknown:
        raise InputError(f"validate: unknown field(s) {', '.join(unknown)}")
    m = _Fields({**DEFAULTS, **raw, **over}, raw, over, where, file_dir, Path.cwd())
    mode = m.choice("mode", ("ab", "aa"))
    baseline = m.ref("baseline")
    candidate = m.ref("candidate", required=(mode == "ab"))
    inputs = m.ref("inputs")
    assert baseline is not None and inputs is not None  # required: ref() raised otherwise
    shapes = m.shapes()
    dtype = m.choice("dtype", DTYPES)
    device = m.device()
    rtol_d, atol_d = DEFAULT_TOL[dtype]
    rtol = m.num("rtol", lo=0, default=rtol_d)
    atol = m.num("atol", lo=0, default=atol_d)
    spec = Spec(
        baseline=baseline, candidate=candidate, inputs=inputs, shapes=[dict(s) for s in shapes],
        dtype=dtype, device=device, rtol=rtol, atol=atol,
        min_gain=m.num("min_gain", lo=-0.5, hi=100),
        time_budget_s=m.num("time_budget_s", lo=0.1, hi=3600),
        mode=mode, cache=m.choice("cache", ("cold", "warm")),
        seeds=int(m.num("seeds", lo=2, hi=20)),
        seed=int(m.num("seed", lo=0, hi=2**31, default=int.from_bytes(os.urandom(3), "little"))),
        confidence=m.num("confidence", lo=0.5, hi=0.999),
        ci_half_width=m.num("ci_half_width", lo=0.0005, hi=0.5),
        min_rounds=int(m.num("min_rounds", lo=3, hi=100000)),
        max_rounds=int(m.num("max_rounds", lo=3, hi=1000000)),
        graphs=m.choice("graphs", ("auto", "on", "off")),
        flops=_expr(m.values["flops"], "flops", where, shapes, m.shown("flops"), m.shown("shapes")),
        bytes=_expr(m.values["bytes"], "bytes", where, shapes, m.shown("bytes"), m.shown("shapes")),
        other_cache=bool(m.values["other_cache"]),
        threads=int(m.num("threads", lo=0, hi=1024)),
        spec_path=str(Path(spec_path).resolve()) if spec_path else None,
        search_dirs=[str(file_dir)],
    )
    if spec.max_rounds < spec.min_rounds:
        raise InputError(f"{where}: max_rounds ({spec.max_rounds}) is below min_rounds ({spec.min_rounds})")
    return spec


def _read_file(spec_path: str | None) -> tuple[dict[str, Any], Path, str]:
    """The spec file's table (empty without a file), the folder its paths are relative to, and how errors name it."""
    if spec_path is None:
        return {}, Path.cwd(), "validate"
    p = Path(spec_path).expanduser()
    if not p.is_file():
        raise FileMissingError(f"spec file {p} does not exist", path=str(p))
    try:
        raw = loads_toml(p.read_text(encoding="utf-8"), "spec file", path=p)
    except ValueError as exc:  # a TOML syntax error or text that is not UTF-8
        raise InputError(f"{p}: not valid TOML ({exc})", hint="see docs/validate.md for the spec format") \
            from None
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise InputError(f"{p}: unknown key(s) {', '.join(unknown)}", hint=f"accepted: {', '.join(DEFAULTS)}")
    return raw, p.resolve().parent, str(p)


@dataclass(frozen=True)
class _Fields:
    """The merged fields (defaults < file < arguments) and where each came from, checked one by one."""

    values: dict[str, Any]
    raw: dict[str, Any]      # the spec file's
    over: dict[str, Any]     # the arguments'
    where: str
    file_dir: Path
    cwd: Path

    def shown(self, name: str) -> bool:
        """A value the caller passed is quoted back in an error; one from the spec file is not."""
        return name in self.over or name not in self.raw

    def ref(self, name: str, required: bool = True) -> FuncRef | None:
        val = self.values[name]
        if val is None:
            if required:
                raise InputError(f"{self.where}: '{name}' is missing",
                                 hint="give it in the spec file or as an argument")
            return None
        base = self.cwd if name in self.over else self.file_dir
        return parse_ref(val, base, name, self.where, self.shown(name))

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        val = self.values[name]
        if val not in allowed:
            raise InputError(f"{self.where}: '{name}' must be one of {', '.join(allowed)}, got "
                             f"{_got(val, self.shown(name))}")
        return str(val)

    def num(self, name: str, lo: float | None = None, hi: float | None = None, default: Any = None) -> float:
        val = self.values[name]
        if val is None:
            val = default
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise InputError(f"{self.where}: '{name}' must be a number, got {_got(val, self.shown(name))}")
        if (lo is not None and val < lo) or (hi is not None and val > hi):
            raise InputError(f"{self.where}: '{name}' = {val} is outside [{lo}, {hi}]")
        return float(val)

    def shapes(self) -> list[dict[str, Any]]:
        shapes = self.values["shapes"]
        if not isinstance(shapes, list) or not shapes or not all(isinstance(s, dict) and s for s in shapes):
            raise InputError(f"{self.where}: 'shapes' must be a non-empty list of tables, e.g. "
                             "shapes = [{M = 1, K = 128, N = 512}]")
        for s in shapes:
            for k, v in s.items():
                if not isinstance(k, str) or isinstance(v, (dict, list)):
                    raise InputError(f"{self.where}: shape {_got(s, self.shown('shapes'))}: values must be numbers "
                                     "or strings")
        return shapes

    def device(self) -> str:
        device = self.values["device"]
        if not isinstance(device, str) or not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
            raise InputError(f"{self.where}: 'device' must be \"cuda\", \"cuda:N\" or \"cpu\", got "
                             f"{_got(device, self.shown('device'))}")
        return device


# ---------------------------------------------------------------------------
# bytes / flops expressions: arithmetic over the shape's keys, nothing else
# ---------------------------------------------------------------------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
           ast.Mod: operator.mod}


def eval_expr(expr: str, shape: dict[str, Any], dtype_bytes: int) -> float:
    """Evaluate ``expr`` with the shape's keys (and ``elem`` = bytes per element) as variables.

    Arithmetic is in floats, so no expression can ask for an unbounded integer (``9**9**9**9`` ran for ever):
    an overflow is an ``OverflowError``, a result that is not finite a ``ValueError``."""
    names = {**{k: v for k, v in shape.items() if isinstance(v, (int, float))}, "elem": dtype_bytes}

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and \
                not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise KeyError(node.id)
            return float(names[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        raise ValueError(f"unsupported syntax {type(node).__name__}")

    value = ev(ast.parse(expr, mode="eval"))
    if not math.isfinite(value):
        raise ValueError("the value is not finite")
    return value


#: characters of a flops / bytes expression (real ones: "2*M*N*K", "(M*K + K*N + M*N)*elem")
EXPR_CHARS = 1000


def _expr(val: Any, name: str, where: str, shapes: list[dict[str, Any]], shown: bool = True,
          shapes_shown: bool = True) -> str | None:
    if val is None:
        return None
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        val = repr(val)
    if not isinstance(val, str):
        raise InputError(f"{where}: '{name}' must be an expression string such as \"2*M*N*K\"")
    if len(val) > EXPR_CHARS:
        raise InputError(f"{where}: '{name}' is {len(val):,} characters long, over the bound of {EXPR_CHARS} for an "
                         "expression", hint="write the arithmetic over the shape keys, e.g. 2*M*N*K")
    for i, s in enumerate(shapes):
        shape = repr(s) if shapes_shown else f"#{i + 1}"
        try:
            eval_expr(val, s, 2)
        except KeyError as exc:
            used = exc.args[0] if shown else "a name"
            raise InputError(f"{where}: '{name}' = {_got(val, shown)} uses {used}, which shape {shape} lacks") from None
        except OverflowError:
            raise InputError(f"{where}: '{name}' = {_got(val, shown)} overflows a float on shape {shape}") from None
        except (RecursionError, MemoryError):
            raise InputError(f"{where}: '{name}' is nested too deeply") from None
        except (ValueError, SyntaxError, ZeroDivisionError) as exc:
            raise InputError(f"{where}: '{name}' = {_got(val, shown)} is not plain arithmetic over the shape keys "
                             f"({type(exc).__name__ if not shown else exc})") from None
    return val
