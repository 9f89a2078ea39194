"""The package installs and runs from a wheel, outside the checkout (issue 8).

Builds the wheel from a copy of the source tree (so the checkout gets no build/ folder and the
repository's relative symlinks are exercised as a fresh clone has them), installs it with
``--no-deps`` into a fresh venv under tmp_path whose only other import path is this venv's
site-packages (for the dependencies: offline and fast; its editable-install hook is not loaded),
then runs ``kernelscope analyze`` on a trace shipped in the package, the demo's data lookup, and
lists the MCP server's tools over stdio. Skipped, with the reason, where a wheel cannot be built
here (no pip, setuptools or venv).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mcp_server"
TRACE = "llama_prefill_eager.json.gz"


def _need(module: str) -> None:
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"cannot build or install a wheel here: python module {module!r} is not available to "
                    f"{sys.executable}")


def _need_build_backend() -> None:
    """The build runs without isolation (offline), so this venv's setuptools must satisfy
    [build-system] requires."""
    import re
    from importlib.metadata import version

    m = re.search(r'"setuptools>=(\d+)', (ROOT / "pyproject.toml").read_text())
    have = version("setuptools")
    if m and int(have.split(".")[0]) < int(m.group(1)):
        pytest.skip(f"this venv's setuptools {have} is older than the build needs (>={m.group(1)}): "
                    "pip install -e '.[dev]'")


def _copy_source(dst: Path) -> None:
    """pyproject, README and the package, plus the targets of the package's symlinks (_shared/, the
    demo's fixtures) at the same relative places, as a clone has them."""
    for name in ("pyproject.toml", "README.md", "MANIFEST.in", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dst / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PKG, dst / "mcp_server", symlinks=True, ignore=ignore)
    for link in [p for p in PKG.rglob("*") if p.is_symlink()]:
        target = link.resolve()
        rel = target.relative_to(ROOT)  # a link out of the repository would not survive a clone
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir() and not out.exists():
            shutil.copytree(target, out, ignore=ignore)
        elif target.is_file():
            shutil.copy2(target, out)


def _packaged_files() -> set[str]:
    """Every file the repository means to ship as package data (through the symlinks)."""
    out = {"mcp_server/py.typed"}
    for folder in ("data", "demo_data", "timeline/include", "kernels/cuda"):
        for p in (PKG / folder).iterdir():
            if p.is_file() and not p.name.startswith("."):
                out.add(f"mcp_server/{folder}/{p.name}")
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    for module in ("pip", "setuptools", "venv"):
        _need(module)
    _need_build_backend()
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    src.mkdir()
    _copy_source(src)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(dist), str(src)], capture_output=True, text=True, timeout=180)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("kernelscope-*.whl")
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True,
                          text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"cannot create a venv here: {made.stderr.strip()[-300:]}")
    vpy = venv / "bin" / "python"
    inst = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "--no-index", "-q",
         str(wheel)], capture_output=True, text=True, timeout=180)
    if "no such option: --python" in inst.stderr:
        pytest.skip("this pip is older than 22.3 (no --python) and cannot install into another venv")
    assert inst.returncode == 0, inst.stderr[-3000:]
    site = subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    # dependencies from this venv, appended after the new venv's own site-packages (a plain path
    # line: the .pth files there, among them the editable install of the checkout, are not run)
    (Path(site) / "_deps_from_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNELSCOPE_SHARED", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = tmp / "work"
    work.mkdir()
    return {"wheel": wheel, "venv": venv, "python": vpy, "site": Path(site), "env": env, "cwd": work}


def _run(inst, argv, timeout=120):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=inst["cwd"], env=inst["env"])
    assert out.returncode == 0, f"{argv}: rc={out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout


def test_wheel_carries_every_data_file(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    want = _packaged_files()
    assert {"mcp_server/data/kernel_categories.csv", "mcp_server/data/functional_blocks.csv",
            "mcp_server/data/data-sources.md", f"mcp_server/demo_data/{TRACE}"} <= want
    assert want - names == set(), "package data missing from the wheel"
    # the demo's every file is shipped (it runs from an installed package)
    from mcp_server.faces import demo
    demo_names = {n for n, _, _ in demo.TRACE_FIXTURES} | {"imbalanced_probe.bin", "balanced_probe.bin",
                                                           "phases.events"}
    assert {f"mcp_server/demo_data/{n}" for n in demo_names} <= names
    # the shipped bytes are the repository's (one copy, no drift)
    with zipfile.ZipFile(installed["wheel"]) as z:
        assert z.read("mcp_server/data/kernel_categories.csv") == (ROOT / "_shared/kernel_categories.csv").read_bytes()


def test_installed_package_is_the_wheel_and_finds_its_data(installed):
    """Outside the checkout every shared file (gpu_specs.toml too, once added to _shared/) and the
    demo's data resolve inside the installed package, and the default loaders read them."""
    names = sorted(p.name for p in (PKG / "data").iterdir() if p.is_file() and not p.name.startswith("."))
    probe = (
        "import json, sys, mcp_server, mcp_server.faces.demo as d\n"
        "from mcp_server.core.paths import shared_path\n"
        "from mcp_server.compare.blocks import load_blocks\n"
        "from mcp_server.refs.registry import load_registry\n"
        "load_blocks(); load_registry()\n"
        "paths = [mcp_server.__file__, str(d.demo_file('phases.events'))]\n"
        "print(json.dumps(paths + [str(shared_path(n)) for n in sys.argv[1:]]))\n"
    )
    paths = [Path(p) for p in json.loads(_run(installed, [str(installed["python"]), "-c", probe, *names]))]
    site = installed["site"].resolve()
    for p in paths:
        assert p.is_file(), p
        assert p.resolve().is_relative_to(site) and not p.resolve().is_relative_to(ROOT), p


def test_installed_kernelscope_analyzes_a_bundled_trace(installed):
    trace = installed["site"] / "mcp_server" / "demo_data" / TRACE
    res = json.loads(_run(installed, [str(installed["venv"] / "bin" / "kernelscope"), "analyze", str(trace),
                                      "--json"]))
    assert res["kernel_count"] == 136 and res["unattributed_count"] == 0
    assert Path(res["categories_source"]).resolve().is_relative_to(installed["site"].resolve())
    shipped = (ROOT / "_shared" / "kernel_categories.csv").read_bytes()
    assert res["categories_sha256"] == hashlib.sha256(shipped).hexdigest()
    assert res["device"] == "NVIDIA H200" and res["categories"]


def test_installed_mcp_server_lists_its_tools_over_stdio(installed):
    script = (
        "import anyio, json, sys\n"
        "from mcp import Client, StdioServerParameters\n"
        "async def go():\n"
        "    params = StdioServerParameters(command=sys.executable, args=['-m', 'mcp_server'])\n"
        "    async with Client(params) as c:\n"
        "        print(json.dumps(sorted(t.name for t in (await c.list_tools()).tools)))\n"
        "anyio.run(go)\n"
    )
    tools = json.loads(_run(installed, [str(installed["python"]), "-c", script]).strip().splitlines()[-1])
    from mcp_server.faces.registry import operations
    assert {"analyze_trace", "diff_modules", "budget", "analyze_timeline"} <= set(tools)
    assert set(tools) >= {o.tool for o in operations()}


def test_installed_demo_runs_on_the_shipped_data(installed):
    env = dict(installed["env"], COLUMNS="220")
    out = subprocess.run([str(installed["python"]), "-m", "mcp_server.faces.demo"], capture_output=True, text=True,
                         timeout=180, cwd=installed["cwd"], env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    text = " ".join(out.stdout.split())
    assert "analyze dsv3_prefill.json.gz" in text and "Block 17 finishes last in every occurrence" in text
