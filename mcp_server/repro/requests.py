"""Request models of the repro operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import NameArg, PathArg
from mcp_server.core.operation import SizedRequest, WritesOutputs, top_n_field

#: op signatures make_repro rebuilds at most (so the op ids a replay directory holds)
MAX_OPS = 200
OpIds = Annotated[list[NameArg], Field(max_length=MAX_OPS)]


class MakeReproRequest(SizedRequest, WritesOutputs):
    top_n: int = top_n_field(5, "Ops (and ops not rebuilt) listed in the answer, slowest first; ops.json holds all")
    trace_path: PathArg = Field(description=(
        "Kineto trace recorded with record_shapes=True (.json/.json.gz, NVIDIA or AMD; eager steps)"))
    output_dir: PathArg = Field(description=(
        "Directory to write ops.json, repro.py and spec.toml into (created when missing)"))
    module: Optional[PathArg] = Field(default=None, description=(
        "Only kernels of this module: a module path (LlamaModel_0/LlamaDecoderLayer_1/LlamaMLP_1, a prefix of "
        "the path) or a module type (LlamaMLP); repro.py also gets one function running the ops of its first "
        "instance in order"))
    kernel: Optional[NameArg] = Field(default=None, description=(
        "Only kernels whose name matches this regex (case-insensitive)"))
    op: Optional[NameArg] = Field(default=None, description=(
        "Only ops of this name (aten::mm, or mm)"))
    top: int = Field(default=10, ge=1, le=MAX_OPS, description=(
        "How many op signatures to rebuild, slowest first (by their kernels' total time)"))


class RunReproRequest(SizedRequest):
    output_dir: PathArg = Field(description="A directory written by make_repro")
    device: NameArg = Field(default="cuda", description="Device to replay on: cuda, cuda:N or cpu")
    only: Optional[OpIds] = Field(default=None, description=(
        "Replay only these op ids (op0, op3); default all"))
    iters: int = Field(default=50, ge=3, le=10000, description="Timed calls per op and cache mode")
    timeout_s: float = Field(default=600.0, gt=0, le=86400, description=(
        "Time limit for the whole replay; on expiry the process group is killed"))
    cache: Literal["both", "warm", "cold"] = Field(default="both", description=(
        "warm: the same inputs every call; cold: the L2 flushed before each call; both"))
