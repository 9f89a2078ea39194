"""Set-up of torch and the device: the CUDA timing entry points captured, lazy set-up done, the CPU probed.

On CUDA the event, synchronise and graph entry points are captured on the harness before any user code
runs, and every facility the harness uses (graph capture, side streams, memory snapshots) is exercised once
so torch's lazy set-up never happens inside a user call. On the CPU the model name and the last-level cache
size are read (``/proc/cpuinfo``, ``/sys/devices/system/cpu``). The watched functions are recorded last.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp_server.validate.harness import tamper
from mcp_server.validate.harness.base import Base, Fatal, exc_line


class DeviceSetup(Base):
    def setup_torch(self) -> None:
        try:
            import torch
        except ImportError as exc:  # one line, not a traceback: the harness needs torch
            raise Fatal("setup", f"torch cannot be imported by {sys.executable} ({exc}): install the gpu extra "
                                 "(pip install 'kernelscope[gpu]')") from None

        self.torch = t = torch
        if self.is_cuda:
            self._setup_cuda(t)
        else:
            self._setup_cpu(t)
        self.dtype = getattr(t, self.cfg["dtype"])
        if self.is_cuda:
            self.ref_dtype = t.float32 if self.dtype in (t.float16, t.bfloat16) else t.float64
        else:
            self.ref_dtype = t.float64
        self.snapshot = tamper.take_snapshot(tamper.targets(t, type(self)), self)

    def _setup_cuda(self, t: Any) -> None:
        if not t.cuda.is_available():
            raise Fatal("setup", f"device '{self.device}' asked for but torch sees no CUDA GPU "
                                 "(use device = \"cpu\", or run on a GPU machine)")
        t.cuda.init()
        idx = t.device(self.device).index
        dev = idx if idx is not None else t.cuda.current_device()
        t.cuda.set_device(dev)
        self._c_sync = t._C._cuda_synchronize
        self._Event = t.cuda.Event
        base = t._C._CudaEventBase
        self._ev_record = base.record
        self._ev_elapsed = base.elapsed_time
        self._ev_sync = base.synchronize
        self._current_stream = t.cuda.current_stream
        self._Graph = t.cuda.CUDAGraph
        self._graph_replay = t.cuda.CUDAGraph.replay
        # touch the event path once so lazy initialisation is done before the snapshot
        e = self._Event(enable_timing=True)
        self._ev_record(e, self._current_stream())
        self._c_sync()
        self._exercise_cuda(t)
        props = t.cuda.get_device_properties(dev)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
        self.result["device"] = {
            "kind": "cuda", "name": t.cuda.get_device_name(dev), "l2_bytes": self.l2_bytes,
            "sm_count": int(props.multi_processor_count),
            "memory_bytes": int(props.total_memory), "torch": t.__version__,
            "cuda_runtime": t.version.cuda,
        }

    def _exercise_cuda(self, t: Any) -> None:
        """Exercise every facility the harness uses (graph capture, side streams, memory snapshots) so torch's
        lazy set-up happens before the snapshot, not inside a user call."""
        try:
            x = t.zeros(16, device=self.device)
            side = t.cuda.Stream()
            side.wait_stream(self._current_stream())
            with t.cuda.stream(side):
                x.add_(1)
            self._current_stream().wait_stream(side)
            g = self._Graph()
            with t.cuda.graph(g):
                x.add_(1)
            self._graph_replay(g)
            t.cuda.memory_snapshot()
            self._c_sync()
            del g, x
        except Exception as exc:  # capture unsupported here: timing falls back to launch loops
            self.warn("graphs_unavailable", f"CUDA-graph capture failed at start-up: {exc_line(exc)}")

    def _setup_cpu(self, t: Any) -> None:
        if int(self.cfg.get("threads") or 0) > 0:
            t.set_num_threads(int(self.cfg["threads"]))
        self.l2_bytes = cpu_llc_bytes()
        self.result["device"] = {"kind": "cpu", "name": cpu_name(), "l2_bytes": self.l2_bytes,
                                 "threads": t.get_num_threads(), "torch": t.__version__}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def cpu_llc_bytes() -> int:
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for d in base.glob("index*"):
            size = (d / "size").read_text().strip()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            num = int(size[:-1]) if size[-1:] in "KMG" else int(size)
            best = max(best, num * mult)
    except (OSError, ValueError):
        pass
    return best or (32 << 20)
