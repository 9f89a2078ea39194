"""What a Kineto trace event is to the loader: the categories it keeps, the typed structs msgspec decodes
each event into (only the fields used; unknown fields are skipped without allocation), and how ids
written in several spellings are read.

Older and other schemas read like current ones: PyTorch 1.8/1.9 (Kineto's first schema) writes the
categories ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``, ``Operator`` (capitalised), GPU ``tid`` strings
such as ``"stream 7"``, CPU ``tid`` strings of digits and ``Input dims``; ROCm writes ``args.stream`` of HIP
runtime calls as a hex string (``"0x0"``). Ids given as strings of digits (or hex) are read as the
integers they spell, so a thread or stream named both ways is one.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Union

import msgspec
import numpy as np

# GPU activity categories -> kind (index into KIND_NAMES); the capitalised names are PyTorch 1.8/1.9's
KERNEL_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2, "Kernel": 0, "Memcpy": 1, "Memset": 2}
KIND_NAMES = ("kernel", "memcpy", "memset")
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime", "driver",
                         "Runtime", "Driver"})
CPU_OP_CATS = frozenset({"cpu_op", "Operator"})
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch", "hipGraphLaunch"})
#: record_function annotations that say the phase of what runs inside them: SGLang's ``step[DECODE bs=32]`` /
#: ``step[EXTEND bs=15 toks=15360]`` and graph captures ``capture_32_DECODE``; the ``execute_[N_]context_C(...)
#: _generation_G(...)`` step annotation (C prefill and G decode requests) seen in SGLang and vLLM traces
PHASE_ANNOTATION = re.compile(r"^(?:step\[(?:DECODE|EXTEND|PREFILL)\b|capture_\d+_(?:DECODE|EXTEND|PREFILL)\b"
                              r"|execute(?:_\d+)?_context_\d+\(.*\)_generation_\d+\()")
_EXECUTE_COUNTS = re.compile(r"_context_(\d+)\(.*\)_generation_(\d+)\(")


def phase_of_annotation(name: str) -> str:
    """'prefill' / 'decode' for a phase annotation (``PHASE_ANNOTATION``), '' otherwise (also a step mixing
    prefill and decode requests)."""
    if not PHASE_ANNOTATION.match(name):
        return ""
    if name.startswith(("step[", "capture_")):
        return "decode" if "DECODE" in name.split("]")[0] else "prefill"
    m = _EXECUTE_COUNTS.search(name)
    if not m:
        return ""
    ctx, gen = int(m.group(1)), int(m.group(2))
    return "prefill" if ctx and not gen else "decode" if gen and not ctx else ""


def launch_kind(name: str) -> int:
    """What a runtime/driver call starts on the GPU: 0 a kernel (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
    ``hipExtModuleLaunchKernel``, ...), 1 a copy (``cudaMemcpyAsync``, ``hipMemcpyWithStream``), 2 a memset,
    -1 nothing (other API calls, graph launches)."""
    if name in GRAPH_LAUNCH_NAMES or not name.startswith(("cuda", "cu", "hip")):
        return -1
    if "LaunchKernel" in name or "LaunchCooperativeKernel" in name:
        return 0
    if "Memcpy" in name:
        return 1
    if "Memset" in name:
        return 2
    return -1


class Args(msgspec.Struct, gc=False):
    # ids may come as strings: ROCm writes a HIP call's stream as hex ("0x0"); see as_int
    correlation: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    device: Union[int, str, None] = None
    kernel: Optional[str] = None  # the kernel a HIP launch starts (roctracer's launch events)
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")  # type: ignore[assignment]
    input_dims_old: msgspec.Raw = msgspec.field(default=None, name="Input dims")  # type: ignore[assignment]
    # what PyTorch records about a collective on its communication kernels (any JSON type: read in tracesets)
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    seq: Any = msgspec.field(default=None, name="Seq")
    src: Any = msgspec.field(default=None, name="Src Rank")
    dst: Any = msgspec.field(default=None, name="Dst Rank")


class Event(msgspec.Struct, gc=False):
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    args: Optional[Args] = None


class Top(msgspec.Struct):
    """The top-level object of a trace: the event array (undecoded) and the metadata fields kept."""

    traceEvents: Optional[list[msgspec.Raw]] = None
    deviceProperties: Any = None
    schemaVersion: Any = None
    cuda_driver_version: Any = None
    cuda_runtime_version: Any = None
    cupti_version: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    distributedInfo: Any = None
    kernelscope_fixture: Any = None


events_dec = msgspec.json.Decoder(list[Event])
event_dec = msgspec.json.Decoder(Event)
raws_dec = msgspec.json.Decoder(list[msgspec.Raw])
top_dec = msgspec.json.Decoder(Union[Top, list[msgspec.Raw]])
any_dec = msgspec.json.Decoder()

_TRAILING_INT = re.compile(r"(?:^|\s)(\d+)$")


def as_int(v: Any) -> Optional[int]:
    """The integer an id spells: an int; a string of decimal or ``0x`` hex digits (ROCm writes HIP streams
    as ``"0x0"``); a name ending in one (PyTorch 1.8's GPU ``tid`` ``"stream 7"``); else None."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, str):
        return None
    t = v.strip()
    try:
        return int(t, 0) if t[:2].lower() in ("0x", "0o", "0b") else int(t, 10)
    except ValueError:
        m = _TRAILING_INT.search(t)
        return int(m.group(1)) if m else None


def id_key(v: Any) -> Any:
    """A pid/tid as one key: strings of digits become the integer (``"1234"`` and 1234 are one thread)."""
    if isinstance(v, str):
        t = v.strip()
        if t.isdigit():
            return int(t)
    return v


def fix_corr(a: Args) -> bool:
    """Whether the event's correlation id is usable; a string of digits is turned into the integer."""
    c = a.correlation
    if c is None:
        return False
    if isinstance(c, str):
        n = as_int(c) if c.strip()[:1].isdigit() else None
        if n is None:
            return False
        a.correlation = n
    return True


def int_col(values: list) -> np.ndarray:
    """int64 column; strings are read as the integer they spell (``"0x0"``, ``"7"``, ``"stream 7"``), else -1."""
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        out = []
        for v in values:
            if isinstance(v, str):
                v = as_int(v)
            out.append(v if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63 else -1)
        return np.array(out, dtype=np.int64)
