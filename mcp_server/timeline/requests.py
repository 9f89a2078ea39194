"""Request models of the timeline operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field

from mcp_server.core.argbounds import EVENT_NAMES, NameArg, PathArg
from mcp_server.core.operation import SizedRequest, WritesOutputs

#: a list of names (one a probe event id: up to EVENT_NAMES), or the 'N1,N2,...' text or a names file's path
EventNames = Optional[Union[Annotated[list[NameArg], Field(max_length=EVENT_NAMES)], PathArg]]
EVENTS_HELP = ("Event names in event-id order (id 0 first): a list, 'N1,N2,...', or a names file (one per line); "
               "default <buffer stem>.events beside the buffer")
LAYOUT_HELP = "Tag layout: legacy (block_group<<12) or sm (sm_id<<24 | block<<12); default auto-detect"


class AnalyzeTimelineRequest(SizedRequest, WritesOutputs):
    buffer_path: PathArg = Field(description=(
        "Probe buffer: raw little-endian uint64 (.bin) or .npy"))
    event_names: EventNames = Field(default=None, description=EVENTS_HELP)
    tag_layout: Optional[Literal["legacy", "sm"]] = Field(default=None, description=LAYOUT_HELP)
    overhead_path: Optional[PathArg] = Field(default=None, description=(
        "JSON of kernel times with/without probes; default <buffer stem>.overhead.json"))
    perfetto_path: Optional[PathArg] = Field(default=None, description=(
        "Write a Perfetto/Chrome trace JSON here"))
    png_path: Optional[PathArg] = Field(default=None, description="Write a Gantt chart PNG here")


class CompareTimelinesRequest(SizedRequest, WritesOutputs):
    before_path: PathArg = Field(description="Probe buffer before the change (.bin or .npy)")
    after_path: PathArg = Field(description="Probe buffer after the change (.bin or .npy)")
    event_names: EventNames = Field(default=None, description=(
        EVENTS_HELP + " (used for both buffers)"))
    after_event_names: EventNames = Field(default=None, description=(
        "Event names of the after buffer when they differ from the before buffer's"))
    tag_layout: Optional[Literal["legacy", "sm"]] = Field(default=None, description=LAYOUT_HELP)
    overhead_path: Optional[PathArg] = Field(default=None, description=(
        "JSON of the before run's kernel times with/without probes; default <before stem>.overhead.json"))
    after_overhead_path: Optional[PathArg] = Field(default=None, description=(
        "JSON of the after run's kernel times with/without probes; default <after stem>.overhead.json"))
    png_path: Optional[PathArg] = Field(default=None, description=(
        "Write one Gantt chart PNG here (before above after)"))
    perfetto_path: Optional[PathArg] = Field(default=None, description=(
        "Write one Perfetto/Chrome trace JSON here holding both runs"))
