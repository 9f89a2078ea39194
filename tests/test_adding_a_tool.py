"""docs/ARCHITECTURE.md, "Adding a tool, in five steps", followed literally: a tiny operation declared here
becomes an MCP tool and a CLI verb with nothing else written, and both faces answer alike."""
from __future__ import annotations

import json
import sys

import anyio
import pytest
from mcp import Client
from pydantic import Field

from mcp_server.core.argbounds import NameArg
from mcp_server.core.models import Model, Warning_
from mcp_server.core.operation import READ_ONLY, Operation, Request, engine
from mcp_server.faces import registry
from mcp_server.faces.cli import main
from mcp_server.faces.server import build_server, tool_input_schema


# 1. the request: the only place a parameter, its default, bound and help are written
class ScaleRequest(Request):
    values: list[float] = Field(min_length=1, max_length=64, description="Numbers to scale")
    factor: float = Field(default=2.0, description="Multiply every value by this")
    label: NameArg = Field(default="scaled", description="Name of the result")


# 2. the result
class ScaleResult(Model):
    label: str
    values: list[float]
    total: float
    warnings: list[Warning_] = []


# 3. the engine: takes its request
@engine(ScaleRequest)
def scale(req: ScaleRequest) -> ScaleResult:
    out = [v * req.factor for v in req.values]
    return ScaleResult(label=req.label, values=out, total=sum(out))


# 4. the declaration, in an ops module listed by the registry (this test module stands in for one)
OPERATIONS = [Operation(tool="scale_values", verb="scale", title="Scale numbers",
                        description="Multiply a list of numbers by a factor.", request=ScaleRequest,
                        result=ScaleResult, engine=f"{__name__}:scale", hints=READ_ONLY)]


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(registry, "OPERATION_MODULES", (*registry.OPERATION_MODULES, sys.modules[__name__]))
    monkeypatch.setenv("KERNELSCOPE_ISOLATION", "0")  # the call runs in this process (the engine lives in a test)
    return OPERATIONS[0]


def test_python_callers_use_the_fields_or_the_request():
    assert scale([1.0, 2.5]).total == 7.0
    assert scale(ScaleRequest(values=[1.0], factor=3.0)).values == [3.0]


def test_the_tool_and_the_verb_exist_and_answer_alike(registered, capsys):
    op = registered
    assert op in registry.operations()
    schema = tool_input_schema(op)
    assert set(schema["properties"]) == {"values", "factor", "label"} and schema["required"] == ["values"]
    assert schema["properties"]["label"]["maxLength"] == 200

    async def over_mcp():
        async with Client(build_server(registry.operations())) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            return tools, await c.call_tool("scale_values", {"values": [1, 2], "factor": 0.5})

    tools, res = anyio.run(over_mcp)
    assert "scale_values" in tools and not res.is_error
    assert res.structured_content == {"label": "scaled", "values": [0.5, 1.0], "total": 1.5, "warnings": []}

    assert main(["scale", "--values", "1", "2", "--factor", "0.5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == res.structured_content
    # a refused value reads the same on the CLI as the model says it
    assert main(["scale", "--values", "1", "--label", "x" * 201, "--json"]) == 2
    assert "scale: invalid option(s): label: String should have at most 200 characters" in capsys.readouterr().err
