"""Request models of the timeline operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field

from mcp_server.core.argbounds import EVENT_NAMES, NAME_CHARS, PATH_CHARS, item_bounds
from mcp_server.core.operation import SizedRequest, WritesOutputs

EventNames = Optional[Union[list[str], str]]
EVENTS_HELP = ("Event names in event-id order (id 0 first): a list, 'N1,N2,...', or a names file (one per line); "
               "default <buffer stem>.events beside the buffer")
LAYOUT_HELP = "Tag layout: legacy (block_group<<12) or sm (sm_id<<24 | block<<12); default auto-detect"


class TimelineAnalyzeRequest(SizedRequest, WritesOutputs):
    buffer_path: str = Field(max_length=PATH_CHARS, description=(
        "Probe buffer: raw little-endian uint64 (.bin) or .npy"))
    event_names: EventNames = Field(default=None, max_length=EVENT_NAMES, description=EVENTS_HELP)
    tag_layout: Optional[Literal["legacy", "sm"]] = Field(default=None, description=LAYOUT_HELP)
    overhead_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "JSON of kernel times with/without probes; default <buffer stem>.overhead.json"))
    perfetto_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write a Perfetto/Chrome trace JSON here"))
    png_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description="Write a Gantt chart PNG here")

    check_items = item_bounds("event_names", chars=NAME_CHARS)  # type: ignore[pydantic-field]


class TimelineCompareRequest(SizedRequest, WritesOutputs):
    before_path: str = Field(max_length=PATH_CHARS, description="Probe buffer before the change (.bin or .npy)")
    after_path: str = Field(max_length=PATH_CHARS, description="Probe buffer after the change (.bin or .npy)")
    event_names: EventNames = Field(default=None, max_length=EVENT_NAMES, description=(
        EVENTS_HELP + " (used for both buffers)"))
    after_event_names: EventNames = Field(default=None, max_length=EVENT_NAMES, description=(
        "Event names of the after buffer when they differ from the before buffer's"))
    tag_layout: Optional[Literal["legacy", "sm"]] = Field(default=None, description=LAYOUT_HELP)
    overhead_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "JSON of the before run's kernel times with/without probes; default <before stem>.overhead.json"))
    after_overhead_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "JSON of the after run's kernel times with/without probes; default <after stem>.overhead.json"))
    png_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write one Gantt chart PNG here (before above after)"))
    perfetto_path: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write one Perfetto/Chrome trace JSON here holding both runs"))

    check_items = item_bounds("event_names", "after_event_names", chars=NAME_CHARS)  # type: ignore[pydantic-field]
