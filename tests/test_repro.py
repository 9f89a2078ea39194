"""make_repro / run_repro on the bundled H200 traces: which ops launched the kernels, their arguments rebuilt
as the trace recorded them (checked against the raw events), the generated replay running on the CPU, the
spec it writes accepted by validate_candidate, and typed errors on both faces."""
from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import anyio
import pytest
from conftest import TRACES
from mcp import Client

from mcp_server.core.errors import ReproError
from mcp_server.faces.cli import main as cli_main
from mcp_server.faces.server import mcp
from mcp_server.repro.extract import make_repro, rebuild_args
from mcp_server.repro.run import run_repro

FIELD = Path(__file__).resolve().parents[2] / "shared" / "field"
SGLANG = FIELD / "tracelens" / "inference" / "sglang_prefilldecode" / "sglang_Qwen3-8B_prefilldecode.json.gz"
BUNDLED = ["llama_prefill_eager", "llama_prefill_sdpa", "dsv3_prefill"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("repro") / "llama"
    return make_repro(str(TRACES / "llama_prefill_eager.json.gz"), str(out), top=200), out


def _raw_ops(trace: Path) -> list[dict]:
    with gzip.open(trace, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op"]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"repro_{abs(hash(path))}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_traces_rebuilt_over_90_percent(name, tmp_path):
    res = make_repro(str(TRACES / f"{name}.json.gz"), str(tmp_path / name), top=200)
    assert res.coverage_pct >= 90.0, (res.coverage_pct, [(o.name, o.reason) for o in res.not_rebuilt])
    assert res.torch_only_pct == res.coverage_pct  # our own models: aten ops only
    # everything selected is either rebuilt or listed with a reason, and the two add up
    listed = sum(o.kernel_us for o in res.ops) + sum(o.kernel_us for o in res.not_rebuilt)
    assert listed == pytest.approx(res.selected_kernel_us, rel=1e-6)
    assert all(o.reason for o in res.not_rebuilt) and all(not o.reason for o in res.ops)
    assert [o.kernel_us for o in res.ops] == sorted((o.kernel_us for o in res.ops), reverse=True)


@pytest.mark.skipif(not SGLANG.exists(), reason="field corpus not present")
def test_sglang_field_trace_custom_ops_named(tmp_path):
    res = make_repro(str(SGLANG), str(tmp_path / "sgl"), top=200)
    assert res.coverage_pct >= 90.0 and res.torch_only_pct < res.coverage_pct
    libs = {o.library for o in res.ops if o.library}
    assert {"aiter", "sgl_kernel"} <= libs
    reasons = {o.name: o.reason for o in res.not_rebuilt}
    assert "data-dependent" in reasons["aiter::mha_batch_prefill"]  # paged KV indices


def test_arguments_match_the_trace(llama):
    res, out = llama
    raw = _raw_ops(TRACES / "llama_prefill_eager.json.gz")
    mm = next(o for o in res.ops if o.name == "aten::mm")
    rec = next(e for e in raw if e["name"] == "aten::mm"
               and e["args"]["Input Dims"] == [a.shape for a in mm.args])
    a = rec["args"]
    assert [x.stride for x in mm.args] == a["Input Strides"]
    assert [x.dtype for x in mm.args] == ["bfloat16", "bfloat16"] == [
        {"c10::BFloat16": "bfloat16"}[t] for t in a["Input type"]]
    add = next(o for o in res.ops if o.name == "aten::add" and len(o.args) == 3 and o.args[2].kind == "scalar")
    assert add.args[2].value == 1  # alpha, from Concrete Inputs
    assert mm.kernels and all(k.mean_us > 0 for k in mm.kernels)
    assert mm.module_type == "Linear" and "LlamaDecoderLayer" in mm.module_path
    doc = json.loads((out / "ops.json").read_text())
    assert doc["ops"][0]["id"] == "op0" and doc["ops"][0]["kernel_us"] == res.ops[0].kernel_us


def test_rebuild_args_reasons():
    args, reason = rebuild_args("aten::cat", {"Input Dims": [[[1, 2], [1, 2]], []], "Input type": ["TensorList", "Scalar"],
                                              "Concrete Inputs": ["", "1"]})
    assert "tensor list" in reason
    _, reason = rebuild_args("aten::embedding", {"Input Dims": [[10, 4], [3]], "Input type": ["float", "long int"]})
    assert "data-dependent" in reason
    _, reason = rebuild_args("aten::add", {"Input Dims": [[4], [], []], "Input type": ["float", "double", "Scalar"]})
    assert "not recorded" in reason  # a PyTorch without Concrete Inputs: the alpha value is unknown
    args, reason = rebuild_args("aten::mm", {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]})
    assert not reason and args[1].stride == [4, 1]  # no strides recorded: contiguous
    _, reason = rebuild_args("aten::mm", {"Input type": ["float"]})
    assert "record_shapes" in reason


def test_replay_runs_on_cpu_and_matches_shapes(llama):
    res, out = llama
    mod = _load(out / "repro.py")
    torch = pytest.importorskip("torch")
    for o in res.ops[:12]:
        args = mod.make_inputs({"op": o.id}, None, "cpu", 1)
        tensors = [x for x in args if isinstance(x, torch.Tensor)]
        assert [list(t.shape) for t in tensors] == [a.shape for a in o.args if a.kind == "tensor"]
        assert [list(t.stride()) for t in tensors] == [a.stride for a in o.args if a.kind == "tensor"]
        y = getattr(mod, o.id)(*args)
        if o.name == "aten::mm":
            assert list(y.shape) == [o.args[0].shape[0], o.args[1].shape[1]]
    a0 = mod.make_inputs({"op": "op0"}, None, "cpu", 1)
    a1 = mod.make_inputs({"op": "op0"}, None, "cpu", 2)
    assert not torch.equal(a0[0], a1[0])  # fresh values per seed


def test_script_standalone_cpu(llama, tmp_path):
    pytest.importorskip("torch")
    _, out = llama
    import subprocess

    js = tmp_path / "t.json"
    r = subprocess.run([sys.executable, str(out / "repro.py"), "--device", "cpu", "--iters", "2", "--only",
                        "op0", "op1", "op2", "--json", str(js)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-500:]
    rows = json.loads(js.read_text())["ops"]
    assert [x["id"] for x in rows] == ["op0", "op1", "op2"] and not any("error" in x for x in rows)
    assert "trace us" in r.stdout


def test_run_repro_cpu_and_spec_validates(llama, monkeypatch):
    monkeypatch.chdir(llama[1].parent)
    pytest.importorskip("torch")
    res, out = llama
    rr = run_repro(out.name, device="cpu", only=["op0", "op2"], iters=3, timeout_s=300)
    assert [t.id for t in rr.ops] == ["op0", "op2"] and all(t.replay_warm_us for t in rr.ops)
    assert all(t.ratio is None for t in rr.ops)  # CPU time is not comparable with the trace's GPU time
    from mcp_server.validate.spec import load_spec

    spec = load_spec(str(out / "spec.toml"))
    assert spec.baseline.func == res.ops[0].function and spec.shapes == [{"op": res.ops[0].id}]


def test_module_selection_and_sequence(tmp_path):
    res = make_repro(str(TRACES / "llama_prefill_eager.json.gz"), str(tmp_path / "mlp"), module="LlamaMLP", top=50)
    assert res.ops and all("LlamaMLP" in o.module_path for o in res.ops)
    doc = json.loads((tmp_path / "mlp" / "ops.json").read_text())
    seq = doc["sequence"]
    assert seq["module"].endswith("LlamaMLP_0") and len(seq["ops"]) >= 3
    names = [next(o.name for o in res.ops if o.id == i) for i in seq["ops"]]
    assert names.count("aten::mm") == 3  # gate, up, down projections in order
    res2 = make_repro(str(TRACES / "llama_prefill_eager.json.gz"), str(tmp_path / "k"), kernel="gemm|gemv", top=50)
    assert {o.name for o in res2.ops} <= {"aten::mm", "aten::bmm", "aten::addmm", "aten::matmul"}


def test_errors(tmp_path):
    with gzip.open(TRACES / "llama_prefill_eager.json.gz", "rt") as f:
        d = json.load(f)
    for e in d["traceEvents"]:
        if e.get("cat") == "cpu_op":
            e["args"] = {k: v for k, v in e["args"].items() if k not in ("Input Dims", "Input type")}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(d))
    with pytest.raises(ReproError, match="record_shapes=True"):
        make_repro(str(bare), str(tmp_path / "o"))
    with pytest.raises(ReproError, match="no GPU kernel matches"):
        make_repro(str(TRACES / "llama_prefill_eager.json.gz"), str(tmp_path / "o"), module="NoSuchModule")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReproError, match="not a repro directory"):
        run_repro(str(tmp_path / "empty"))


def test_faces(tmp_path, capsys, monkeypatch):
    rc = cli_main(["repro", str(TRACES / "llama_prefill_sdpa.json.gz"), "-o", str(tmp_path / "cli"), "--top", "5",
                   "--json"])
    assert rc == 0
    ans = json.loads(capsys.readouterr().out)
    assert len(ans["ops"]) == 5 and ans["ops"][0]["id"] == "op0"
    rc = cli_main(["repro", "run", str(tmp_path)])
    assert rc == 2 and "not a repro directory" in capsys.readouterr().err

    async def go():
        async with Client(mcp) as c:
            ok = await c.call_tool("make_repro", {"trace_path": str(TRACES / "dsv3_prefill.json.gz"),
                                                  "output_dir": str(tmp_path / "mcp"), "top": 3})
            bad = await c.call_tool("run_repro", {"output_dir": str(tmp_path / "nowhere")})
            return ok, bad

    monkeypatch.setenv("KERNELSCOPE_ROOTS", str(tmp_path))
    ok, bad = anyio.run(go)
    assert not ok.is_error and ok.structured_content["coverage_pct"] > 0
    assert (tmp_path / "mcp" / "repro.py").exists()
    assert bad.is_error and "not a directory" in bad.content[0].text and "Traceback" not in bad.content[0].text


def test_output_dir_rules(tmp_path, monkeypatch):
    """A directory holding other files is never written into without overwrite; an earlier replay is
    replaced (its stale specs removed) on the CLI, and over MCP only with overwrite=true."""
    trace = str(TRACES / "llama_prefill_sdpa.json.gz")
    other = tmp_path / "project"
    other.mkdir()
    (other / "spec.toml").write_text("mine\n")
    with pytest.raises(ReproError, match="did not write"):
        make_repro(trace, str(other), top=2)
    assert (other / "spec.toml").read_text() == "mine\n"
    out = tmp_path / "r"
    make_repro(trace, str(out), top=6)
    n6 = len(list(out.glob("spec_op*.toml")))
    make_repro(trace, str(out), top=1)  # the CLI's rule: an earlier replay is replaced
    assert len(list(out.glob("spec_op*.toml"))) == 1 < n6
    make_repro(trace, str(other), top=1, overwrite=True)
    assert (other / "spec.toml").read_text() != "mine\n"

    async def go():
        async with Client(mcp) as c:
            again = await c.call_tool("make_repro", {"trace_path": trace, "output_dir": str(out), "top": 1})
            forced = await c.call_tool("make_repro", {"trace_path": trace, "output_dir": str(out), "top": 1,
                                                      "overwrite": True})
            return again, forced

    monkeypatch.setenv("KERNELSCOPE_ROOTS", str(tmp_path))
    again, forced = anyio.run(go)
    assert again.is_error and "overwrite=true" in again.content[0].text
    assert not forced.is_error


HF_DECODE = Path(__file__).resolve().parents[1] / "examples" / "repro_hf_decode" / "traces"


def test_hf_decode_attention_rebuilt_as_recorded(tmp_path):
    """The worked example's trace (transformers' LlamaForCausalLM, eager attention, decode batch 8, KV 2052):
    the attention block's slowest ops are repeat_kv's copy (an expanded, stride-0 source) and the two M = 1
    bmm; their arguments are those of the raw events, and the in-place copy gets no spec."""
    trace = HF_DECODE / "hf_decode_eager.json.gz"
    res = make_repro(str(trace), str(tmp_path / "attn"), module="LlamaAttention", top=10)
    assert res.coverage_pct >= 85.0 and {o.name for o in res.not_rebuilt} == {"aten::cat"}  # the DynamicCache
    copy, bmm1, bmm2 = res.ops[:3]
    assert copy.name == "aten::copy_" and copy.calls == 16 and not copy.spec  # K and V of 8 layers
    assert copy.args[1].shape == [8, 8, 4, 2052, 64] and copy.args[1].stride[2] == 0  # expand(): the 4 repeats
    raw = _raw_ops(trace)
    for o in (bmm1, bmm2):
        assert o.name == "aten::bmm" and o.calls == 8 and o.spec == f"spec_{o.id}.toml"
        rec = [e["args"] for e in raw if e["name"] == "aten::bmm"
               and e["args"]["Input Dims"] == [a.shape for a in o.args]]
        assert len(rec) == 8 and all(r["Input Strides"] == [a.stride for a in o.args] for r in rec)
    qk = next(o for o in (bmm1, bmm2) if o.args[0].shape == [256, 1, 64])
    assert qk.args[1].shape == [256, 64, 2052] and qk.args[1].stride == [131328, 1, 64]  # K^T: a transposed view
    assert res.spec.endswith("spec.toml") and (tmp_path / "attn" / "spec.toml").read_text() == \
        (tmp_path / "attn" / f"spec_{bmm1.id}.toml").read_text()


def test_replay_builds_wrapped_numbers_on_the_cpu_and_writes_inf(tmp_path):
    """A Python number given to a tensor op is recorded as a 0-dim double tensor (``variance + eps`` in the
    RMSNorm): the replay keeps it a CPU scalar, as the model had it, whatever the device; recorded -inf scalars
    (masked_fill) are valid Python in repro.py."""
    torch = pytest.importorskip("torch")
    res = make_repro(str(TRACES / "dsv3_prefill.json.gz"), str(tmp_path / "d"), top=200)
    mod = _load(tmp_path / "d" / "repro.py")
    add = next(o for o in res.ops if o.name == "aten::add"
               and any(a.kind == "tensor" and a.shape == [] and a.dtype == "float64" for a in o.args))
    args = mod.make_inputs({"op": add.id}, torch.bfloat16, "meta", 0)
    assert [str(a.device) for a in args if isinstance(a, torch.Tensor)] == ["meta", "cpu"]
    assert args[1].dtype == torch.float64  # not replaced by the spec's dtype
    assert getattr(mod, add.id)(*args).device.type == "meta"
    fill = next(o for o in res.ops if any(a.kind == "scalar" and a.value == float("-inf") for a in o.args))
    assert getattr(mod, fill.id)(*mod.make_inputs({"op": fill.id}, None, "cpu", 0)) is not None


def test_band_from_the_h200_replay_of_dsv3(tmp_path):
    """run_repro's band on the H200's answer for dsv3 (bench/results/repro_h200): an op is in the band when its
    warm or its cold (L2 flushed) kernel time is within 20 % of the trace; the wrapped-number add runs the
    trace's own kernel."""
    from mcp_server.repro.run import summarize

    root = Path(__file__).resolve().parents[1]
    answer = json.loads((root / "bench" / "results" / "repro_h200" / "replay_dsv3_prefill.json").read_text())
    make_repro(str(TRACES / "dsv3_prefill.json.gz"), str(tmp_path / "d"), top=30)
    doc = json.loads((tmp_path / "d" / "ops.json").read_text())
    res = summarize(tmp_path / "d", doc, answer, "cuda")
    assert res.within_band_pct == pytest.approx(answer["within_band_pct"]) and res.within_band_pct >= 80.0
    by = {o.id: o for o in res.ops}
    soft = next(o for o in res.ops if o.name == "aten::_softmax")
    assert soft.ratio < 0.8 and 0.8 <= soft.ratio_cold <= 1.25 and soft.band == "cold" and soft.within_band
    out = [o for o in res.ops if not o.within_band]
    assert out and all(o.ratio < 0.8 and o.ratio_cold > 1.25 for o in out)  # between warm and cold
    assert {w.message.split(" ", 1)[0] for w in res.warnings} == {o.id for o in out}
    add = next(o for o in doc["ops"] if o["name"] == "aten::add" and any(
        a["kind"] == "tensor" and a.get("shape") == [] and a.get("dtype") == "float64" for a in o["args"]))
    assert by[add["id"]].kernels[0] == add["kernels"][0]["name"] and by[add["id"]].within_band
