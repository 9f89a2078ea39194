"""Result models shared across engines (pydantic).

Each operation returns one of these; the MCP tool's structured output and the
CLI's ``--json`` are both ``model.model_dump(mode="json")`` of the same object.
Engine-specific result models live beside their engine and subclass ``Model``.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """Base for every result model: plain data, stable field names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class Warning_(Model):
    """A non-fatal problem met while producing a result."""

    code: str
    message: str
    count: int = 1
