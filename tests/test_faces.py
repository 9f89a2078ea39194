"""Every operation is declared once: the MCP tool and the CLI verb are provably the request model.

These tests walk every declared operation (new ones included automatically) and fail on
any difference in names, types, defaults or descriptions between the request model, the
tool's published input schema, the engine's signature and the CLI verb's options.
"""
from __future__ import annotations

import argparse
import inspect
import json

import anyio
import pytest
from conftest import TRACES
from mcp import Client

from mcp_server.core.argbounds import plain_type
from mcp_server.core.operation import SizedRequest, UnknownArgumentError
from mcp_server.faces.cli import build_parser, cli_flags, main, option_spec
from mcp_server.faces.registry import operations
from mcp_server.faces.server import build_server, mcp, tool_input_schema
from mcp_server.faces.sizing import KEEP_WHOLE, MAX_TEXT, _is_name, nested_rows

OPS = operations()
IDS = [op.tool for op in OPS]


def _verb_parser(op) -> argparse.ArgumentParser:
    parser = build_parser(OPS)
    for word in op.verb.split():
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


async def _tools():
    async with Client(mcp) as c:
        return {t.name: t for t in (await c.list_tools()).tools}


def test_every_operation_is_a_tool_and_instructions_list_exactly_them():
    tools = anyio.run(_tools)
    assert set(tools) == set(IDS)
    listed = [line[2:].split(":")[0] for line in mcp.instructions.splitlines() if line.startswith("- ")]
    assert listed == IDS


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_tool_schema_is_the_request_model(op):
    tool = anyio.run(_tools)[op.tool]
    assert tool.input_schema == op.request.model_json_schema() == tool_input_schema(op)
    assert tool.input_schema.get("additionalProperties") is False
    assert tool.output_schema is not None and tool.output_schema.get("properties")
    assert tool.description == op.description and tool.title == op.title
    ann = tool.annotations
    assert (ann.read_only_hint, ann.destructive_hint, ann.idempotent_hint, ann.open_world_hint) == (
        op.annotations.read_only, op.annotations.destructive, op.annotations.idempotent, op.annotations.open_world)
    # writing files makes a tool not read-only, never destructive by itself (tests/test_confine.py)
    assert op.annotations.destructive == op.hints.destructive
    assert op.annotations.read_only == (op.hints.read_only and not op.outputs)
    for name, field in op.request.model_fields.items():
        assert field.description, f"{op.tool}.{name} has no description"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_engine_takes_its_request(op):
    """The request model is the only place a parameter is written: the engine takes the model itself."""
    fn = op.engine_fn()
    assert getattr(fn, "request", None) is not None, f"{op.engine} is not declared with engine({op.request.__name__})"
    assert fn.request is op.request, f"{op.engine} is declared for {fn.request.__name__}, not {op.request.__name__}"
    params = list(inspect.signature(fn.__wrapped__).parameters.values())
    assert params[0].annotation in (op.request, op.request.__name__), f"{op.engine}: first parameter is not the request"
    assert [p.name for p in params[1:]] == (["progress"] if op.progress else [])


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_cli_options_are_the_request_fields(op):
    parser = _verb_parser(op)
    actions = {a.dest: a for a in parser._actions if a.dest != "help" and not a.dest.startswith("_")}
    expected = set(op.field_names) - ({op.remainder} if op.remainder else set())
    assert set(actions) == expected
    for name, action in actions.items():
        field = op.request.model_fields[name]
        spec = option_spec(name, field)
        if name in op.positional:
            assert not action.option_strings
        else:
            assert f"--{name.replace('_', '-')}" in action.option_strings
            assert set(op.aliases.get(name, ())) <= set(action.option_strings)
            assert action.default is argparse.SUPPRESS  # the model's default applies on both faces
        assert (field.description or "").replace("%", "%%") in (action.help or "")
        if "choices" in spec:
            assert list(action.choices) == spec["choices"]
        if field.annotation is bool:
            assert isinstance(action, argparse.BooleanOptionalAction)
    if op.remainder:  # the target argv after '--': a list of strings, never a shell string
        assert plain_type(op.request.model_fields[op.remainder].annotation) == list[str]


def _dummy(field):
    """A well-typed value for a required field (the call must fail on the unknown name, not on this)."""
    tp = option_spec("f", field).get("type")
    return 1 if tp is int else 1.0 if tp is float else "x"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_unknown_argument_refused_on_every_face(op, capsys):
    required = {n: _dummy(f) for n, f in op.request.model_fields.items() if f.is_required()}
    with pytest.raises(UnknownArgumentError) as exc:
        op.make_request({**required, "no_such_option": 1})
    assert "no_such_option" in str(exc.value) and op.field_names[0] in str(exc.value)

    async def call():
        async with Client(build_server(OPS)) as c:
            return await c.call_tool(op.tool, {**required, "no_such_option": 1})

    res = anyio.run(call)
    assert res.is_error
    text = res.content[0].text
    assert "no_such_option" in text and "accepted:" in text

    argv = [*op.verb.split(), *[str(_dummy(op.request.model_fields[n])) for n in op.positional],
            "--no-such-option", "1"]
    assert main(argv) == 2
    msg = capsys.readouterr().err
    assert "--no-such-option" in msg and ", ".join(cli_flags(op)) in msg


def test_diff_modules_takes_phase_over_mcp():
    """The drift this design removes: phase reached the engine only from the CLI."""
    async def call():
        async with Client(mcp) as c:
            return await c.call_tool("diff_modules", {
                "a": str(TRACES / "llama_decode_mixed.json.gz"), "b": str(TRACES / "llama_decode_mixed.json.gz"),
                "phase": "decode"})

    res = anyio.run(call)
    assert not res.is_error, res.content[0].text
    data = res.structured_content
    assert data["a"]["phases_present"] == ["decode"]
    assert not any(w["code"] == "mixed_phases" for w in data["warnings"])


def test_default_answer_is_a_summary_and_detail_is_everything(capsys):
    a, b = str(TRACES / "llama_prefill_eager.json.gz"), str(TRACES / "llama_prefill_sdpa.json.gz")
    assert main(["compare", a, b, "--json", "--top-n", "3"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert main(["compare", a, b, "--json", "--detail"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert len(full["blocks"]) > 3 and len(small["blocks"]) == 3
    _assert_prefix(small["blocks"], full["blocks"], 3)
    warn = [w for w in small["warnings"] if w["code"] == "summary_truncated"]
    assert len(warn) == 1 and f"blocks: 3 of {len(full['blocks'])}" in warn[0]["message"]
    assert not any(w["code"] == "summary_truncated" for w in full["warnings"])


def _assert_prefix(small, full, n, path=""):
    """``small`` is ``full`` with every list cut to its first ``n`` rows (nested: ``nested_rows(n)``)."""
    if isinstance(full, list):
        limit = n if "[*]" not in path else nested_rows(n)
        assert len(small) == min(limit, len(full)), path
        for s_item, f_item in zip(small, full):
            _assert_prefix(s_item, f_item, n, path + "[*]")
    elif isinstance(full, dict):
        assert small.keys() == full.keys()
        for k in full:
            if k in KEEP_WHOLE:
                assert small[k] == full[k] or k == "warnings"
            else:
                _assert_prefix(small[k], full[k], n, f"{path}.{k}" if path else k)
    elif isinstance(full, float):
        assert small == pytest.approx(full, rel=1e-5)
    elif isinstance(full, str) and len(full) > MAX_TEXT and "[*]" in path and _is_name(path):
        assert small.endswith("…") and full.startswith(small[:-1])
    else:
        assert small == full


def test_face_fields_belong_to_their_mixins():
    for op in OPS:
        names = set(op.field_names)
        assert ({"top_n", "detail"} <= names) == issubclass(op.request, SizedRequest), op.tool
        if op.outputs:  # confined outputs: the call can say overwrite=true
            assert "overwrite" in names, op.tool
            assert set(op.outputs) <= names, op.tool


def test_reference_page_is_generated_from_the_declarations():
    """docs/REFERENCE.md lists every tool with its parameters; regenerate it when this fails:
    python -m mcp_server.faces.reference > docs/REFERENCE.md"""
    from pathlib import Path

    from mcp_server.faces.reference import render_reference

    page = (Path(__file__).resolve().parent.parent / "docs" / "REFERENCE.md").read_text()
    assert page == render_reference(), "docs/REFERENCE.md is stale: python -m mcp_server.faces.reference > docs/REFERENCE.md"
    for op in OPS:
        assert f"## {op.tool}" in page
        for name in op.field_names:
            assert f"| `{name}` |" in page


def test_width_is_a_text_face_option_of_every_verb(capsys):
    """--width sets the text view's columns on every verb; it is not a request field (the tools never see it)."""
    a, b = str(TRACES / "llama_prefill_eager.json.gz"), str(TRACES / "llama_prefill_sdpa.json.gz")
    for width in (80, 160):
        assert main(["compare", a, b, "--width", str(width)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines and max(len(line) for line in lines) <= width
        if width == 160:
            assert max(len(line) for line in lines) > 80
    assert main(["analyze", a, "--width", "100"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100
    for op in OPS:
        assert "width" not in op.field_names


def test_console_runs_get_the_workers_limits(tmp_path):
    """`kernelscope VERB --max-memory / --time-limit` (the console script applies them; in-process calls do not)."""
    import subprocess
    import sys

    clean = []
    for limit in ("190M", "205M", "220M", "240M"):  # around what this analysis needs on top of the interpreter
        run = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", "analyze", str(TRACES / "dsv3_prefill.json.gz"),
                              "--json", "--max-memory", limit], capture_output=True, text=True, timeout=120)
        assert run.returncode in (0, 2) and "Traceback" not in run.stderr, (limit, run.stderr[-500:])
        clean.append(run.returncode == 2 and "out of memory under this run's limit" in run.stderr)
    assert any(clean)
    slow = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", "analyze", str(TRACES / "dsv3_prefill.json.gz"),
                           "--time-limit", "0.001"], capture_output=True, text=True, timeout=120)
    assert slow.returncode == 2 and "over its time limit" in slow.stderr and "Traceback" not in slow.stderr
    ok = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", "budget", str(TRACES / "llama_prefill_eager.json.gz"),
                         str(TRACES / "llama_prefill_sdpa.json.gz"), "--json", "--max-memory", "4G",
                         "--time-limit", "120"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr


def _unbounded(schema: dict, defs: dict) -> list[str]:
    """The string and array places of a JSON schema without a length bound (an enum bounds itself)."""
    if "$ref" in schema:
        return _unbounded(defs[schema["$ref"].split("/")[-1]], defs)
    out = []
    for alt in schema.get("anyOf", []) + schema.get("oneOf", []):
        out += _unbounded(alt, defs)
    t = schema.get("type")
    if t == "string" and "maxLength" not in schema and "enum" not in schema and "const" not in schema:
        out.append("string without maxLength")
    if t == "array":
        if "maxItems" not in schema:
            out.append("array without maxItems")
        out += [f"items: {x}" for x in _unbounded(schema.get("items", {}), defs)]
    for name, sub in schema.get("properties", {}).items():
        out += [f"{name}: {x}" for x in _unbounded(sub, defs)]
    return out


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_string_and_list_field_is_bounded(op):
    """core/argbounds.py: every str and list field of every request takes a bounded type."""
    schema = op.request.model_json_schema()
    assert _unbounded(schema, schema.get("$defs", {})) == []
