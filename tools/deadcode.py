"""Dead-code check: vulture over mcp_server/, less what the package uses in ways vulture cannot see.

Run: python tools/deadcode.py (make test runs it before pytest). Exit 0 when nothing is unused,
1 with one `path:line: unused <kind> 'name'` line per finding otherwise.

What counts as used although no Python expression names it (worked out from the code, so it
cannot go stale):
- every Operation's `engine` and `render` "module:function" (mcp_server.faces.registry.operations()),
  every other "mcp_server.x:function" string literal in the package, and the entry points in
  pyproject.toml's [project.scripts];
- the body of a data class (pydantic models, msgspec Structs, dataclasses, TypedDicts, NamedTuples, enums): its
  fields are read by serialisation, construction from a mapping or lookup by value, and its
  pydantic validators and model_config by pydantic; so is an assignment to a field of one (obj.field = ...);
- methods decorated with @field_validator / @model_validator (pydantic calls them);
- the parameters of an @lru_cache function (the cache key: a stat's mtime makes a changed file miss);
- module-level __getattr__ / __dir__ (PEP 562 lazy loading) and any __dunder__ attribute.
The rest is in tools/deadcode_whitelist.txt, one `path name  # reason` a line; an entry that no
longer matches a finding is itself reported, so the list only shrinks.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mcp_server"
WHITELIST = Path(__file__).with_name("deadcode_whitelist.txt")

DATA_BASES = {"BaseModel", "RootModel", "Struct", "TypedDict", "NamedTuple", "Enum", "IntEnum", "StrEnum", "Flag"}
#: project code outside the package that calls into it (their own dead code is not reported)
USERS = ("tools", "scripts", "bench")
DATA_DECORATORS = {"dataclass"}
CALLED_BY_PYDANTIC = ["@field_validator", "@model_validator"]
SPEC = re.compile(r"^(mcp_server(?:\.\w+)*):(\w+)$")


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def _module_file(module: str) -> str:
    base = ROOT.joinpath(*module.split("."))
    return _rel(base / "__init__.py") if base.is_dir() else _rel(base.with_suffix(".py"))


def dynamic_references(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(file, function) pairs named by a "module:function" string: Operations, literals, entry points."""
    specs: set[str] = set()
    sys.path.insert(0, str(ROOT))
    from mcp_server.faces.registry import operations
    for op in operations():
        specs.add(op.engine)
        if op.render:
            specs.add(op.render)
    for tree in trees.values():
        specs.update(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and SPEC.match(n.value))
    scripts = re.search(r"^\[project\.scripts\]\n(.*?)(?:^\[|\Z)", (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    specs.update(re.findall(r'^\w[\w-]*\s*=\s*"([^"]+)"', scripts.group(1) if scripts else "", re.M))
    refs = set()
    for spec in specs:
        m = SPEC.match(spec)
        if m is None:
            raise SystemExit(f"deadcode: {spec!r} is not a 'mcp_server.module:function' reference")
        refs.add((_module_file(m.group(1)), m.group(2)))
    return refs


def data_classes(trees: dict[str, ast.Module]) -> tuple[set[tuple[str, int]], set[str]]:
    """(file, line) of every statement directly in the body of a data class (fields, validators), and
    the field names (an assignment ``obj.field = ...`` fills a field that serialisation reads)."""
    classes = [(f, c) for f, t in trees.items() for c in ast.walk(t) if isinstance(c, ast.ClassDef)]
    data = {c.name for _, c in classes if any(_name(d) in DATA_DECORATORS for d in c.decorator_list)}
    data |= DATA_BASES
    grew = True
    while grew:  # a subclass of a data class (by name, across the package) is one too
        grew = False
        for _, c in classes:
            if c.name not in data and any(_name(b) in data for b in c.bases):
                data.add(c.name)
                grew = True
    lines, fields = set(), set()
    for f, c in classes:
        if c.name in data:
            for stmt in c.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    lines.update((f, n) for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    fields.add(stmt.target.id)
    return lines, fields


def cache_key_params(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    out = set()
    for f, t in trees.items():
        for fn in ast.walk(t):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    any(_name(d) in {"lru_cache", "cache"} for d in fn.decorator_list):
                out.update((f, a.arg) for a in fn.args.args + fn.args.kwonlyargs)
    return out


def read_whitelist() -> dict[tuple[str, str], str]:
    entries = {}
    for n, raw in enumerate(WHITELIST.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or "#" not in raw:
            raise SystemExit(f"deadcode: {_rel(WHITELIST)}:{n}: write `path name  # reason`")
        entries[(parts[0], parts[1])] = raw
    return entries


def main() -> int:
    files = sorted(PKG.rglob("*.py"))
    trees = {_rel(p): ast.parse(p.read_text(), str(p)) for p in files}
    refs = dynamic_references(trees)
    in_data, fields = data_classes(trees)
    cache_keys = cache_key_params(trees)
    listed = read_whitelist()

    v = vulture.Vulture(ignore_names=["__getattr__", "__dir__"], ignore_decorators=CALLED_BY_PYDANTIC)
    v.scavenge([str(PKG)] + [str(ROOT / d) for d in USERS if (ROOT / d).is_dir()])
    seen: set[tuple[str, str]] = set()
    left = []
    for item in v.get_unused_code():
        f, name = _rel(Path(item.filename)), item.name
        if not f.startswith("mcp_server/"):
            continue
        if (f, name) in refs or (item.typ == "attribute" and name in fields) or (f, item.first_lineno) in in_data or (f, name) in cache_keys \
                or (name.startswith("__") and name.endswith("__")):
            continue
        if (f, name) in listed:
            seen.add((f, name))
            continue
        left.append(f"{f}:{item.first_lineno}: {item.message} ({item.confidence}% confidence)")
    stale = [f"{_rel(WHITELIST)}: `{f} {n}` matches no unused code any more: delete the line"
             for f, n in listed if (f, n) not in seen]
    for line in left + stale:
        print(line)
    if left:
        print(f"deadcode: {len(left)} unused name(s): delete them, or list them in {_rel(WHITELIST)} "
              "with the reason they are used")
    return 1 if left or stale else 0


if __name__ == "__main__":
    sys.exit(main())
