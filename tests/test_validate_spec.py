"""validate: the spec (TOML file or arguments), its errors, and the operation's declaration."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from mcp_server.core.errors import FileMissingError, InputError
from mcp_server.validate.spec import DEFAULT_TOL, eval_expr, load_spec

FIX = Path(__file__).resolve().parent / "fixtures" / "validate"


def test_toml_spec_paths_are_relative_to_the_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # not the spec's folder
    spec = load_spec(str(FIX / "cpu.toml"))
    assert spec.baseline.kind == "file" and spec.baseline.target == str(FIX / "base.py")
    assert spec.baseline.func == "matmul" and spec.inputs.func == "make_inputs"
    assert spec.candidate.target == str(FIX / "cand_wrong.py")
    assert spec.shapes == [{"M": 1, "K": 64, "N": 128}, {"M": 8, "K": 64, "N": 128}]
    assert (spec.dtype, spec.device, spec.cache, spec.seed, spec.time_budget_s) == ("float32", "cpu", "warm", 7, 3.0)
    assert (spec.rtol, spec.atol) == DEFAULT_TOL["float32"]
    assert spec.settings()["baseline"] == "base.py:matmul"


def test_arguments_override_the_file_and_resolve_from_cwd(monkeypatch):
    monkeypatch.chdir(FIX.parent)
    spec = load_spec(str(FIX / "cpu.toml"), {"candidate": "validate/cand_nan.py:candidate", "dtype": "bfloat16",
                                             "rtol": None, "mode": "ab"})
    assert spec.candidate.target == str(FIX / "cand_nan.py")
    assert spec.dtype == "bfloat16" and (spec.rtol, spec.atol) == DEFAULT_TOL["bfloat16"]


def test_fields_without_a_file_and_module_references():
    spec = load_spec(None, {"baseline": "torch.nn.functional:relu", "inputs": f"{FIX}/base.py:make_inputs",
                            "shapes": [{"M": 2}], "mode": "aa", "device": "cpu"})
    assert spec.baseline.kind == "module" and spec.baseline.target == "torch.nn.functional"
    assert spec.candidate is None and spec.spec_path is None
    assert 0 <= spec.seed < 2 ** 24  # random, reported in the settings


@pytest.mark.parametrize("over, needle", [
    ({"dtype": "int8"}, "'dtype' must be one of"),
    ({"device": "tpu"}, "'device'"),
    ({"shapes": []}, "'shapes'"),
    ({"mode": "abc"}, "'mode'"),
    ({"candidate": "cand_wrong.py"}, "'candidate' must be"),
    ({"min_gain": "3%"}, "'min_gain' must be a number"),
    ({"seeds": 1}, "'seeds'"),
    ({"flops": "2*M*Q"}, "uses Q"),
    ({"bytes": "__import__('os')"}, "not plain arithmetic"),
])
def test_bad_fields_are_named(over, needle):
    with pytest.raises(InputError, match=None) as err:
        load_spec(str(FIX / "cpu.toml"), over)
    assert needle in str(err.value)


def test_missing_things_are_typed_errors(tmp_path):
    with pytest.raises(FileMissingError):
        load_spec(str(tmp_path / "nope.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("baseline = \n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_spec(str(bad))
    unk = tmp_path / "unk.toml"
    unk.write_text('baselin = "x.py:f"\n')
    with pytest.raises(InputError, match="unknown key"):
        load_spec(str(unk))
    miss = tmp_path / "miss.toml"
    miss.write_text('baseline = "gone.py:f"\ninputs = "gone.py:g"\nshapes = [{M = 1}]\nmode = "aa"\n')
    with pytest.raises(FileMissingError, match="gone.py"):
        load_spec(str(miss))
    noin = tmp_path / "noin.toml"
    noin.write_text(f'baseline = "{FIX}/base.py:matmul"\nshapes = [{{M = 1}}]\nmode = "aa"\n')
    with pytest.raises(InputError, match="'inputs' is missing"):
        load_spec(str(noin))


def test_expressions_use_the_shape_keys():
    assert eval_expr("2*M*N*K", {"M": 2, "N": 3, "K": 4}, 2) == 48
    assert eval_expr("(M*K + K*N)*elem", {"M": 1, "K": 2, "N": 3}, 2) == 16


def test_operation_declaration():
    from mcp_server.core.operation import EXECUTES_CODE
    from mcp_server.faces.registry import operations
    op = next(o for o in operations() if o.tool == "validate_candidate")
    assert op.verb == "validate" and op.positional == ("spec_path",) and op.progress
    assert op.hints == EXECUTES_CODE and not op.hints.read_only and not op.hints.idempotent
    assert op.hints.open_world
    fn = op.engine_fn()
    assert fn.request is op.request  # the engine takes the request model: its fields are its parameters
    assert list(inspect.signature(fn.__wrapped__).parameters) == ["req", "progress"]
    assert "timeout_s" in op.field_names
    with pytest.raises(InputError, match="unknown argument"):
        op.make_request({"spec_path": "x.toml", "timeout": 3})
