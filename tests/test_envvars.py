"""One environment registry: every KERNELSCOPE_* variable the package names is declared in
mcp_server/core/envvars.py, read through envvars.env(), and listed in docs/REFERENCE.md."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mcp_server.core import envvars, limits

PKG = Path(__file__).resolve().parent.parent / "mcp_server"
# a name, not a C define (-DKERNELSCOPE_PROBE) nor part of a longer word
NAME = re.compile(r"(?<![\w-])KERNELSCOPE_[A-Z0-9_]+")
#: runs as a plain script before the package is installed (bin/kernelscope-mcp's bootstrap), so it
#: imports nothing of the package; its variable is still declared
STANDALONE = {"faces/front.py"}


def _sources() -> dict[str, ast.Module]:
    return {p.relative_to(PKG).as_posix(): ast.parse(p.read_text(), str(p)) for p in sorted(PKG.rglob("*.py"))}


def _literal_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(NAME.findall(node.value))
    return names


def test_every_name_in_the_package_is_declared():
    declared = set(envvars.BY_NAME)
    found: dict[str, set[str]] = {}
    for rel, tree in _sources().items():
        for name in _literal_names(tree):
            found.setdefault(name, set()).add(rel)
    assert "KERNELSCOPE_ROOTS" in found and "KERNELSCOPE_MAX_TRACE_BYTES" in found  # the scan sees literals
    for name, where in sorted(found.items()):
        if name.endswith("_"):  # a family written as a prefix (f"KERNELSCOPE_MAX_{name}", ``KERNELSCOPE_MAX_*``)
            assert any(d.startswith(name) for d in declared), f"{name}* in {sorted(where)} matches no declaration"
        else:
            assert name in declared, f"{name} (named in {sorted(where)}) is not declared in mcp_server/core/envvars.py"


def test_every_declaration_is_read_somewhere():
    text = "\n".join(p.read_text() for p in PKG.rglob("*.py") if p.name != "envvars.py")
    for v in envvars.VARS:
        limit_name = v.name.removeprefix("KERNELSCOPE_MAX_")
        used = v.name in text or (v.name.startswith("KERNELSCOPE_MAX_") and f'"{limit_name}"' in text)
        assert used, f"{v.name} is declared but the package never reads it"


def _constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _is_os_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def test_readers_go_through_env():
    """No os.environ.get / os.getenv / os.environ[...] read of a KERNELSCOPE_ variable outside envvars.py
    (writes, which hand a value to a child process, are not reads)."""
    direct = []
    for rel, tree in _sources().items():
        if rel == "core/envvars.py" or rel in STANDALONE:
            continue
        consts = _constants(tree)

        def ours(arg: ast.expr, consts: dict[str, str] = consts) -> bool:
            value = arg.value if isinstance(arg, ast.Constant) else None
            if isinstance(arg, ast.Name):
                value = consts.get(arg.id)
            return isinstance(value, str) and value.startswith("KERNELSCOPE_")

        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
                f = node.func
                reads = (f.attr in ("get", "pop") and _is_os_environ(f.value)) or \
                    (f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os")
                if reads and ours(node.args[0]):
                    direct.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_os_environ(node.value) \
                    and ours(node.slice):
                direct.append(f"{rel}:{node.lineno}")
    assert not direct, f"read these through mcp_server.core.envvars.env(): {direct}"


def test_env_refuses_an_undeclared_name(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_NOT_A_VARIABLE", "1")
    with pytest.raises(KeyError, match="not declared"):
        envvars.env("KERNELSCOPE_NOT_A_VARIABLE")


def test_defaults_come_from_the_registry(monkeypatch):
    """The readers' defaults are the declared ones, and a set value wins at the next call."""
    for v in envvars.VARS:
        if v.name.startswith("KERNELSCOPE_MAX_"):
            monkeypatch.delenv(v.name, raising=False)
            assert limits.limit(v.name.removeprefix("KERNELSCOPE_MAX_")) == v.value
    monkeypatch.delenv("KERNELSCOPE_WORKER_MEMORY", raising=False)
    assert limits.memory_limit() == envvars.default("KERNELSCOPE_WORKER_MEMORY") == 8 << 30
    monkeypatch.setenv("KERNELSCOPE_MAX_NESTING", "7")
    assert limits.limit("NESTING") == 7
    monkeypatch.setenv("KERNELSCOPE_ISOLATION", "Off")
    assert not envvars.enabled("KERNELSCOPE_ISOLATION")
    monkeypatch.setenv("KERNELSCOPE_ISOLATION", "")
    assert envvars.enabled("KERNELSCOPE_ISOLATION")


def test_reference_lists_every_variable():
    page = (PKG.parent / "docs" / "REFERENCE.md").read_text()
    for v in envvars.VARS:
        assert f"| `{v.name}` |" in page, f"{v.name} missing from docs/REFERENCE.md: python -m mcp_server.faces.reference"
