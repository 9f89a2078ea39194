"""Where plotting starts: matplotlib's pyplot with a file-only backend, chosen once per process.

Engines draw figures only to files (PNG, SVG). The first call selects the non-interactive
``Agg`` backend, unless the host process already imported pyplot (a notebook, a script that
plots): its backend is left alone, since saving figures works with any backend.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

_lock = threading.Lock()
_started = False


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported on first use with the backend chosen as the module says."""
    global _started
    with _lock:
        if not _started:
            import matplotlib

            if "matplotlib.pyplot" not in sys.modules:
                matplotlib.use("Agg")
            _started = True
    import matplotlib.pyplot as plt

    return plt
