"""The harness's state and protocol: JSON lines out, checks and warnings kept, every user call guarded.

The protocol (progress lines and one result) goes to a private duplicate of the original stdout
(``child.main``). A user call that raises ends the run as a ``Fatal`` naming the stage; after every
user call the watched functions are compared with their snapshot (``tamper``) and any replacement is
recorded and undone.
"""
from __future__ import annotations

import json
import traceback
from typing import IO, Any, Callable

from mcp_server.validate.harness import tamper
from mcp_server.validate.harness.clock import monotonic


class Fatal(Exception):
    """A stage failed in a way that ends the run (the message says which and why)."""

    def __init__(self, stage: str, message: str, tb: str = ""):
        super().__init__(message)
        self.stage = stage
        self.tb = tb


class Base:
    """What every part of the harness shares. Set-up (``device``) fills in torch, the dtypes and the captured
    timing callables; ``child.Harness.run`` the user functions."""

    torch: Any
    dtype: Any
    ref_dtype: Any
    l2_bytes: int
    snapshot: dict[tuple[str, str], tuple[Any, Any]]
    # the timing and synchronisation callables captured at set-up (CUDA only), watched on the instance
    _c_sync: Callable[[], None]
    _Event: Any
    _ev_record: Any
    _ev_elapsed: Any
    _ev_sync: Any
    _current_stream: Any
    _Graph: Any
    _graph_replay: Any
    # the user's functions
    make_inputs: Callable[..., Any]
    baseline: Callable[..., Any]
    candidate: Callable[..., Any]
    cand_who: str
    overhead_s: float

    def __init__(self, cfg: dict, proto: IO[str]):
        self.cfg = cfg
        self.proto = proto
        self.result: dict = {"type": "result", "error": None, "checks": [], "patched": [],
                             "warnings": [], "timing": None, "device": {}, "io_bytes": [],
                             "max_abs_err": None, "max_rel_err": None, "worst": [], "wall": {}}
        self.checks: dict[str, dict] = {}
        self.device = cfg["device"]
        self.is_cuda = self.device.startswith("cuda")
        self.t_start = monotonic()

    # ------------------------------------------------------------------ protocol
    def emit(self, obj: dict) -> None:
        self.proto.write(json.dumps(obj, default=str) + "\n")
        self.proto.flush()

    def progress(self, done: float, total: float | None, message: str) -> None:
        self.emit({"type": "progress", "done": done, "total": total, "message": message})

    def warn(self, code: str, message: str) -> None:
        self.result["warnings"].append({"code": code, "message": message})

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        c = self.checks.setdefault(name, {"name": name, "passed": True, "detail": "", "failures": 0})
        if not passed:
            if c["passed"]:
                c["detail"] = detail
            c["passed"] = False
            c["failures"] += 1

    # ------------------------------------------------------------------ user code
    def check_patches(self, who: str, stage: str) -> None:
        """Compare watched functions with the snapshot; record, then undo, any replacement."""
        changed = tamper.undo_replacements(self.snapshot)
        if not changed:
            return
        if who == "baseline":
            self.warn("baseline_patched", f"the baseline replaced {', '.join(changed)} during {stage}; "
                                          "the harness put the originals back")
        for name in changed:
            self.result["patched"].append({"name": name, "by": who, "stage": stage})

    def call(self, fn: Callable[..., Any], args: Any, who: str, stage: str) -> Any:
        try:
            out = fn(*args)
        except BaseException as exc:
            raise Fatal(stage, f"{who} raised {exc_line(exc)} ({stage})",
                        traceback.format_exc(limit=-6)) from None
        finally:
            self.check_patches(who, stage)
        return out

    def _inputs(self, shape: dict, seed: int) -> tuple:
        t = self.torch
        args = self.call(self.make_inputs, (dict(shape), self.dtype, self.device, seed), "baseline",
                         "make_inputs")
        if isinstance(args, t.Tensor):
            args = (args,)
        if not isinstance(args, (tuple, list)):
            raise Fatal("make_inputs", f"make_inputs returned {type(args).__name__}; it must return a "
                                       "tuple of tensors")
        return tuple(args)


def exc_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
