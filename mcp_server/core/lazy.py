"""Names a package loads on first use (PEP 562), so that importing the package stays cheap.

One mechanism for every package that has such names: the package lists each name with the
submodule that defines it and sets ``__getattr__ = lazy_names(__name__, {...}, globals())``;
a name is imported when first read and kept in the package's namespace. Type checkers read the
same names from an ``if TYPE_CHECKING:`` import in the package.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping, MutableMapping


def lazy_names(package: str, names: Mapping[str, str], namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``names`` maps each lazy name to the submodule that defines it."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
