"""A request its model refuses reads the same on every face: one line from faces.invalid_arguments,
naming the tool (the CLI: its verb and 'option(s)'), each refused field and pydantic's reason."""
from __future__ import annotations

import anyio
import pytest
from mcp import Client
from pydantic import ValidationError

from mcp_server.core.errors import InputError, KernelscopeError
from mcp_server.core.operation import invalid_arguments
from mcp_server.faces.cli import main
from mcp_server.faces.registry import operations
from mcp_server.faces.server import build_server
from mcp_server.faces.workers import WorkerPool

OP = next(o for o in operations() if o.tool == "budget")
ARGS = {"a": "a.json.gz", "b": "b.json.gz", "top_n": 0}  # top_n's bound (ge=1) refuses it before any file is read
REASON = "top_n: Input should be greater than or equal to 1"


def test_the_text_names_the_tool_the_field_and_the_reason():
    with pytest.raises(ValidationError) as exc:
        OP.make_request(ARGS)
    assert invalid_arguments("budget", exc.value) == f"budget: invalid argument(s): {REASON}"
    assert invalid_arguments("budget", exc.value, "option") == f"budget: invalid option(s): {REASON}"
    with pytest.raises(ValidationError) as two:
        OP.make_request({**ARGS, "detail": "maybe"})
    assert invalid_arguments("budget", two.value).count("; ") == 1  # every refused field, in one line


def test_every_face_says_it(capsys):
    expected = f"budget: invalid argument(s): {REASON}"

    async def over_mcp():
        async with Client(build_server([OP])) as c:
            return await c.call_tool("budget", ARGS)

    res = anyio.run(over_mcp)
    assert res.is_error and res.content[0].text.endswith(expected)  # after the SDK's "Error executing tool budget: "

    from mcp_server.compare.budget import budget

    with pytest.raises(InputError) as keyword:  # an engine called with keywords (how one engine calls another)
        budget(**ARGS)
    assert str(keyword.value) == expected

    pool = WorkerPool(size=1)  # a worker validates again what it is handed
    try:
        with pytest.raises(KernelscopeError) as worker:
            pool.call(OP, ARGS)
    finally:
        pool.close()
    assert expected in str(worker.value)

    assert main(["budget", ARGS["a"], ARGS["b"], "--top-n", "0"]) == 2
    assert f"budget: invalid option(s): {REASON}" in capsys.readouterr().err
