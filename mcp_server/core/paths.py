"""Where the package's data lives: the package directory, the checkout root, packaged data files and the
shared data files a user may override (docs/ARCHITECTURE.md, "Layers")."""
from __future__ import annotations

from pathlib import Path

#: The package directory, and its parent: the repository root when running from a checkout.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PACKAGE_DIR.parent

#: Package-data folders (``importlib.resources`` names under ``mcp_server``). In the repository
#: ``mcp_server/data`` is a committed symlink to ``../_shared`` and ``mcp_server/demo_data`` holds
#: symlinks into ``tests/fixtures``: one copy of every file, copied for real into a wheel
#: (docs/install.md, "Where the data lives").
DATA_DIR = "data"
DEMO_DIR = "demo_data"

_kept: dict[str, Path] = {}


def _checkout_shared() -> Path | None:
    """``_shared/`` of a source checkout (a repository root holding pyproject.toml), else None."""
    root = REPO_ROOT / "_shared"
    return root if root.is_dir() and (REPO_ROOT / "pyproject.toml").is_file() else None


def package_file(folder: str, name: str) -> Path:
    """A real filesystem path of a file shipped in the package (``folder/name`` under ``mcp_server``).

    A normal install is a directory on disk, so this is a plain path; from a zipped install the
    file is extracted once and kept for the life of the process.
    """
    from importlib import resources

    res = resources.files("mcp_server").joinpath(folder).joinpath(name)
    if isinstance(res, Path):
        return res
    key = f"{folder}/{name}"
    if key not in _kept:
        import atexit
        import contextlib

        stack = contextlib.ExitStack()
        atexit.register(stack.close)
        _kept[key] = stack.enter_context(resources.as_file(res))
    return _kept[key]


def shared_path(name: str) -> Path:
    """Path of a shared data file (``kernel_categories.csv``, ``functional_blocks.csv``, ...).

    Looked up, first hit wins: ``$KERNELSCOPE_SHARED/name``; ``_shared/name`` of a source checkout;
    the default shipped inside the package (``mcp_server/data``). A user directory may hold only
    the files it overrides. When ``KERNELSCOPE_SHARED`` names no directory, the path under it is
    returned as is, so the caller's "file not found" names the mistyped directory instead of
    silently using the defaults. A name found nowhere returns the packaged path (the caller
    reports it missing).
    """
    from mcp_server.core.envvars import env

    base = env("KERNELSCOPE_SHARED")
    if base:
        user = Path(base).expanduser()
        if not user.is_dir() or (user / name).is_file():
            return user / name
    checkout = _checkout_shared()
    if checkout is not None and (checkout / name).is_file():
        return checkout / name
    return package_file(DATA_DIR, name)
