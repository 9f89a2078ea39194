"""Every module of the package sits in a layer of the import contract (pyproject.toml,
[tool.importlinter]; docs/ARCHITECTURE.md, "Layers"): a module outside every layer is checked by nothing."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layered() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r'^layers = \[\n(.*?)^\]', text, re.M | re.S)
    assert block, "pyproject.toml has no layers contract"
    return set(re.findall(r"mcp_server\.(\w+)", block.group(1)))


def test_every_module_is_in_a_layer():
    pkg = ROOT / "mcp_server"
    modules = {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    assert {"core", "faces", "traces", "loop"} <= modules  # the walk sees packages
    # the layout says the layers: nothing flat beside core/, faces/ and the engine packages
    assert modules - {p.name for p in pkg.iterdir() if p.is_dir()} == {"__main__"}
    missing = sorted(modules - _layered())
    assert not missing, f"add {missing} to a layer of [tool.importlinter] in pyproject.toml (docs/ARCHITECTURE.md)"
