"""The harness child: ``python -m mcp_server.validate.child CONFIG.json``.

Runs in a fresh process started by ``engine.validate_candidate`` (time limit, process group
killed on expiry). Order matters:

1. the timers and synchronisation functions are captured (module import time, before torch
   and long before any user code: ``harness.clock``), then torch's CUDA event / synchronise /
   graph entry points (``harness.device``);
2. identities of the functions the harness relies on are recorded, so a user module that
   replaces one (``time.perf_counter = ...``, ``torch.cuda.Event.elapsed_time = ...``) is
   detected after every user call, reported, and the original put back (``harness.tamper``);
3. the user modules are imported, correctness is checked (``harness.correctness``), and (when
   correct) baseline and candidate are timed in interleaved rounds (``harness.timing``).

The protocol (JSON lines: progress and one result) goes to a private duplicate of the
original stdout; fd 1 is pointed at stderr so anything user code prints cannot corrupt it.
The process ends with ``os._exit`` so stray user threads cannot keep it alive.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import IO, Any, Callable

from mcp_server.validate.harness.base import Fatal, exc_line
from mcp_server.validate.harness.clock import monotonic  # the timers, captured before torch and user code
from mcp_server.validate.harness.correctness import Correctness
from mcp_server.validate.harness.device import DeviceSetup
from mcp_server.validate.harness.timing import Timing


def _open_protocol() -> IO[str]:
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "w", buffering=1)


class Harness(DeviceSetup, Correctness, Timing):
    """The whole run: set-up, the user's functions imported, correctness, then (when correct) timing."""

    def load(self, ref: dict, who: str) -> Callable[..., Any]:
        stage = f"import_{who}"
        try:
            if ref["kind"] == "file":
                mod = self._import_file(ref["target"], who, stage)
            else:
                mod = importlib.import_module(ref["target"])
        except Fatal:
            raise
        except BaseException as exc:  # user code: anything may come out
            raise Fatal(stage, f"{who}: importing {ref['text']} raised {exc_line(exc)}",
                        traceback.format_exc(limit=-6)) from None
        finally:
            self.check_patches("baseline" if who in ("baseline", "inputs") else "candidate", stage)
        fn = getattr(mod, ref["func"], None)
        if not callable(fn):
            raise Fatal(stage, f"{who}: {ref['text']}: no function '{ref['func']}' in that module")
        return fn

    def _import_file(self, path: str, who: str, stage: str) -> Any:
        """The module of a .py file, imported once (baseline and inputs often share one)."""
        mod = self._modules_by_path.get(path)
        if mod is None:
            d = str(Path(path).parent)
            if d not in sys.path:
                sys.path.insert(0, d)
            name = f"_kscope_{who}_{len(self._modules_by_path)}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise Fatal(stage, f"{who}: cannot import {path}")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            self._modules_by_path[path] = mod
        return mod

    def run(self) -> None:
        t0 = monotonic()
        self.setup_torch()
        self._modules_by_path: dict[str, object] = {}
        self.make_inputs = self.load(self.cfg["inputs"], "inputs")
        self.baseline = self.load(self.cfg["baseline"], "baseline")
        if self.cfg["mode"] == "aa":
            self.candidate = self.baseline
            self.cand_who = "baseline"
        else:
            self.candidate = self.load(self.cfg["candidate"], "candidate")
            self.cand_who = "candidate"
        self.result["wall"]["import_s"] = monotonic() - t0
        t1 = monotonic()
        self.correctness()
        self.result["wall"]["correctness_s"] = monotonic() - t1
        failed = [c for c in self.checks.values() if not c["passed"] and c["name"] != "no_patching"]
        if failed:
            self.result["timing_skipped"] = "candidate incorrect: " + ", ".join(c["name"] for c in failed)
            return
        t2 = monotonic()
        self.timing()
        self.result["wall"]["timing_s"] = monotonic() - t2


def main(argv: list[str]) -> None:
    cfg = json.loads(Path(argv[1]).read_text())
    proto = _open_protocol()
    h = Harness(cfg, proto)
    try:
        h.run()
    except Fatal as exc:
        h.result["error"] = {"stage": exc.stage, "message": str(exc), "traceback": exc.tb[-4000:]}
    except BaseException as exc:  # the harness itself failed: report, never hang
        h.result["error"] = {"stage": "harness", "message": f"harness error: {exc_line(exc)}",
                             "traceback": traceback.format_exc(limit=-8)[-4000:]}
    h.result["checks"] = list(h.checks.values())
    h.result["wall"]["total_s"] = monotonic() - h.t_start
    try:
        h.emit(_finite(h.result))
    finally:
        proto.flush()
        os._exit(0)


def _finite(o: Any) -> Any:
    """NaN/Inf floats -> None so the line is strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


if __name__ == "__main__":
    main(sys.argv)
