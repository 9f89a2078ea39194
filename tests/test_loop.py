"""The loop engine with injected steps: accept / revert / abandon, no retry, resume, stops, changes restored.

The steps here are stand-ins for run_ncu / select_candidate / validate_candidate whose
answers are set by the proposal's spec (``fake_speedup``), so each test knows the verdict
it expects; they also check that the change is in place while it is validated.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcp_server.core.errors import ChangeConflictError, KernelscopeError, ProposalError, ToolMissingError
from mcp_server.ledger.engine import ledger_export, ledger_list, ledger_show
from mcp_server.loop.engine import drive
from mcp_server.loop.proposals import load_proposals
from mcp_server.loop.steps import LoopSteps, Selection, selection_from

BASE = "VERSION = 'base'\n"
FAST = "VERSION = 'fast'\n"
SLOW = "VERSION = 'slow'\n"
QUANT = "VERSION = 'int4'\n"


class FakeSteps:
    """select: always the BMM (DRAM-bound, quantization advised against when ``l2``); validate: the spec's
    fake_speedup decides; records what the kernel file held while each spec was validated."""

    def __init__(self, kernel_file: Path, *, l2: bool = False, sleep: float = 0.0):
        self.kernel_file = kernel_file
        self.l2 = l2
        self.sleep = sleep
        self.profiled: list[Path] = []
        self.validated: list[tuple[Any, str]] = []

    def profile(self, target, report: Path, cache_control):
        report.write_bytes(b"report of " + " ".join(target).encode() + b" " + self.kernel_file.read_bytes())
        self.profiled.append(report)
        return report

    def select(self, report: Path, cache_control) -> Selection:
        return Selection(kernel="bmm_kernel", short_name="bmm", diagnosis="memory_bound (dram)",
                         classification={"kernels": [{"name": "bmm_kernel", "class": "memory_bound",
                                                      "limiter": "l2" if self.l2 else "dram"}],
                                         "candidate": "bmm_kernel"},
                         avoid=["weight quantization"] if self.l2 else [])

    def validate(self, spec) -> dict[str, Any]:
        import time

        if self.sleep:
            time.sleep(self.sleep)
        held = self.kernel_file.read_text()
        self.validated.append((spec, held))
        if spec.get("fake_error"):
            raise KernelscopeError(spec["fake_error"])
        if spec.get("fake_interrupt"):
            raise KeyboardInterrupt
        s = float(spec["fake_speedup"])
        ok = s > 1.03 and held == spec["expect"]
        return {"accepted": ok, "verdict": "accepted" if ok else "not_faster",
                "reasons": [f"held {held.strip()}"], "speedup": {"median": s, "ci_low": s * 0.98,
                                                                  "ci_high": s * 1.02, "confidence": 0.95}}

    def steps(self) -> LoopSteps:
        return LoopSteps(profile=self.profile, select=self.select, validate=self.validate)


def _proposal(pid: str, *, swap: str | None, speedup: float, expect: str, extra: str = "") -> str:
    text = f'[[proposal]]\nid = "{pid}"\ntext = "try {pid}"\n{extra}'
    text += f'[proposal.spec]\nfake_speedup = {speedup}\nexpect = "{expect.strip()}\\n"\n'
    if swap:
        text += f'[proposal.apply]\nfile = "proj/kernel.py"\nwith = "variants/{swap}.py"\n'
    return text + "\n"


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "kernel.py").write_text(BASE)
    (tmp_path / "proj" / "bench.py").write_text("import kernel\n")
    (tmp_path / "variants").mkdir()
    for name, text in (("fast", FAST), ("slow", SLOW), ("int4", QUANT)):
        (tmp_path / "variants" / f"{name}.py").write_text(text)
    return tmp_path


def _write(proj: Path, *parts: str) -> str:
    (proj / "proposals.toml").write_text("".join(parts))
    return str(proj / "proposals.toml")


TARGET = ["python", "proj/bench.py"]


def test_slow_reverted_fast_accepted_advised_against_abandoned(proj):
    props = _write(proj,
                   _proposal("slow", swap="slow", speedup=0.9, expect=SLOW),
                   _proposal("quant", swap="int4", speedup=3.0, expect=QUANT, extra='kind = "quantization"\n'),
                   _proposal("fast", swap="fast", speedup=2.0, expect=FAST),
                   _proposal("gemm-only", swap=None, speedup=2.0, expect=BASE, extra='kernel = "gemm_kernel"\n'))
    fake = FakeSteps(proj / "proj" / "kernel.py", l2=True)
    res = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert [(s.proposal_id, s.decision) for s in res.steps] == [("slow", "reverted"), ("fast", "accepted")]
    # each change was in place while validated; the rejected one was gone before the next was applied
    assert [held for _, held in fake.validated] == [SLOW, FAST]
    assert (proj / "proj" / "kernel.py").read_text() == FAST
    skipped = {s.proposal_id: s.reason for s in res.skipped}
    assert "advises against weight quantization" in skipped["quant"]
    assert "gemm_kernel" in skipped["gemm-only"]
    assert res.stopped == "proposals_exhausted" and res.accepted == 1 and res.rejected == 1
    # profiled once, then again after the accepted change (the program changed)
    assert len(fake.profiled) == 2 and fake.profiled[1].read_bytes().endswith(FAST.encode())
    shown = ledger_show(id=res.experiment_id, ledger="l.db")
    assert [(v.candidate.proposal_id, v.status) for v in shown.candidates] == [
        ("slow", "reverted"), ("quant", "abandoned"), ("fast", "accepted")]
    assert shown.candidates[1].validations == []  # abandoned without running
    assert (proj / "loop" / "backup").is_dir()  # backups lived beside the ledger ...
    assert not list((proj / "loop" / "backup").glob("*/kernel.py"))  # ... and none is left behind


def test_started_again_it_resumes_and_never_retries(proj):
    props = _write(proj, _proposal("slow", swap="slow", speedup=0.9, expect=SLOW),
                   _proposal("fast", swap="fast", speedup=2.0, expect=FAST))
    fake = FakeSteps(proj / "proj" / "kernel.py")
    first = drive(TARGET, steps=fake.steps(), iters=1, proposals=props, ledger="l.db")
    assert [s.proposal_id for s in first.steps] == ["slow"] and first.stopped == "iters_done"
    assert (proj / "proj" / "kernel.py").read_text() == BASE
    second = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert second.resumed and second.experiment_id == first.experiment_id
    assert [s.proposal_id for s in second.steps] == ["fast"]
    assert {s.proposal_id: s.reason.split(" (")[0] for s in second.skipped} == {"slow": "already reverted"}
    third = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert third.steps == [] and third.stopped == "proposals_exhausted"
    # a fresh experiment on the same target still skips what was rejected or accepted
    fresh = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db", fresh=True)
    assert fresh.experiment_id != first.experiment_id and fresh.steps == []
    assert len(fake.validated) == 2
    assert ledger_list(ledger="l.db").total == 2


def test_editing_a_rejected_proposal_makes_it_new(proj):
    props = _write(proj, _proposal("slow", swap="slow", speedup=0.9, expect=SLOW))
    fake = FakeSteps(proj / "proj" / "kernel.py")
    drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    (proj / "variants" / "slow.py").write_text(FAST)  # the person improves the replacement
    props = _write(proj, _proposal("slow", swap="slow", speedup=2.0, expect=FAST))
    again = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert [(s.proposal_id, s.decision) for s in again.steps] == [("slow", "accepted")]


def test_validation_that_cannot_run_is_an_error_and_restored(proj):
    props = _write(proj,
                   '[[proposal]]\nid = "bad"\n[proposal.spec]\nfake_error = "spec.toml: no baseline"\n'
                   '[proposal.apply]\nfile = "proj/kernel.py"\nwith = "variants/fast.py"\n')
    fake = FakeSteps(proj / "proj" / "kernel.py")
    res = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    [step] = res.steps
    assert step.decision == "error" and "no baseline" in step.why and step.verdict is None
    assert res.errors == 1 and res.rejected == 0
    assert fake.validated[0][1] == FAST  # it was applied for the attempt
    assert (proj / "proj" / "kernel.py").read_text() == BASE


def test_interrupt_restores_baseline_and_the_next_run_finishes_the_candidate(proj):
    props = _write(proj, _proposal("fast", swap="fast", speedup=2.0, expect=FAST))
    fake = FakeSteps(proj / "proj" / "kernel.py")
    steps = fake.steps()
    steps.validate = lambda spec: fake.validate({**spec, "fake_interrupt": True})
    with pytest.raises(KeyboardInterrupt):
        drive(TARGET, steps=steps, iters=5, proposals=props, ledger="l.db")
    assert (proj / "proj" / "kernel.py").read_text() == BASE
    assert ledger_list(ledger="l.db").experiments[0].pending == 1
    res = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert [(s.proposal_id, s.decision, s.resumed) for s in res.steps] == [("fast", "accepted", True)]
    shown = ledger_show(id=res.experiment_id, ledger="l.db")
    assert len(shown.candidates) == 1 and len(shown.candidates[0].decisions) == 1


def test_pending_change_edited_meanwhile_is_a_conflict(proj):
    props = _write(proj, _proposal("fast", swap="fast", speedup=2.0, expect=FAST))
    fake = FakeSteps(proj / "proj" / "kernel.py")
    steps = fake.steps()
    steps.validate = lambda spec: fake.validate({**spec, "fake_interrupt": True})
    with pytest.raises(KeyboardInterrupt):
        drive(TARGET, steps=steps, iters=5, proposals=props, ledger="l.db")
    (proj / "proj" / "kernel.py").write_text("VERSION = 'hand edit'\n")
    with pytest.raises(ChangeConflictError, match="kernel.py.*neither its recorded original"):
        drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert (proj / "proj" / "kernel.py").read_text() == "VERSION = 'hand edit'\n"  # never overwritten


def test_max_rejects_stops_the_loop(proj):
    props = _write(proj, *[_proposal(f"slow{i}", swap="slow", speedup=0.95, expect=SLOW) for i in range(4)])
    fake = FakeSteps(proj / "proj" / "kernel.py")
    res = drive(TARGET, steps=fake.steps(), iters=10, proposals=props, ledger="l.db", max_rejects=2)
    assert res.stopped == "max_rejects" and len(res.steps) == 2
    assert {s.proposal_id for s in res.skipped} == {"slow2", "slow3"}


def test_without_proposals_it_profiles_selects_and_shows_the_candidate(proj):
    fake = FakeSteps(proj / "proj" / "kernel.py")
    res = drive(TARGET, steps=fake.steps(), ledger="l.db")
    assert res.stopped == "no_proposals" and res.candidate == "bmm_kernel"
    assert res.diagnosis == "memory_bound (dram)" and "for bmm" in res.stop_message and res.profile_id == 1
    assert Path(res.report).is_file() and Path(res.report).resolve() == (proj / "reports" / "e1-p1.ncu-rep")
    md = ledger_export(ledger="l.db").text
    assert "### Profile 1: `reports/e1-p1.ncu-rep`" in md and "Selected: `bmm_kernel`" in md


def test_given_report_is_used_instead_of_profiling(proj):
    (proj / "given.ncu-rep").write_bytes(b"an existing report")
    props = _write(proj, _proposal("fast", swap="fast", speedup=2.0, expect=FAST),
                   _proposal("slow", swap="slow", speedup=0.9, expect=SLOW))
    fake = FakeSteps(proj / "proj" / "kernel.py")
    steps = fake.steps()

    def no_ncu(*a):
        raise ToolMissingError("ncu not found")

    steps.profile = no_ncu
    res = drive(TARGET, steps=steps, iters=5, proposals=props, ledger="l.db", profile="given.ncu-rep")
    assert [(s.proposal_id, s.decision) for s in res.steps] == [("fast", "accepted"), ("slow", "reverted")]
    assert [w.code for w in res.warnings] == ["stale_profile"]
    shown = ledger_show(id=res.experiment_id, ledger="l.db")
    assert len(shown.profiles) == 1 and shown.profiles[0].report_path.endswith("given.ncu-rep")


def test_no_candidate_stops(proj):
    fake = FakeSteps(proj / "proj" / "kernel.py")
    steps = fake.steps()
    steps.select = lambda report, cc: Selection(kernel=None, stop_reason="every kernel within 10% of its roof")
    props = _write(proj, _proposal("fast", swap="fast", speedup=2.0, expect=FAST))
    res = drive(TARGET, steps=steps, proposals=props, ledger="l.db")
    assert res.stopped == "no_candidate" and "within 10% of its roof" in res.stop_message
    assert [s.reason for s in res.skipped] == ["not reached (no_candidate)"]


def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


def test_git_patch_applied_and_reverted(proj):
    repo = proj / "proj"
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    for name, text in (("fast", FAST), ("slow", SLOW)):
        (repo / "kernel.py").write_text(text)
        (proj / f"{name}.patch").write_text(_git(repo, "diff"))
        _git(repo, "checkout", "kernel.py")
    props = _write(proj,
                   '[[proposal]]\nid = "slow"\n[proposal.spec]\nfake_speedup = 0.9\nexpect = "x"\n'
                   '[proposal.apply]\npatch = "slow.patch"\nrepo = "proj"\n\n'
                   '[[proposal]]\nid = "fast"\n[proposal.spec]\nfake_speedup = 2.0\n'
                   f'expect = "{FAST.strip()}\\n"\n'
                   '[proposal.apply]\npatch = "fast.patch"\nrepo = "proj"\n')
    fake = FakeSteps(repo / "kernel.py")
    res = drive(TARGET, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    assert [(s.proposal_id, s.decision) for s in res.steps] == [("slow", "reverted"), ("fast", "accepted")]
    assert [held for _, held in fake.validated] == [SLOW, FAST]
    assert (repo / "kernel.py").read_text() == FAST
    shown = ledger_show(id=res.experiment_id, ledger="l.db")
    assert shown.candidates[0].candidate.change_kind == "patch"
    assert "+VERSION = 'slow'" in shown.candidates[0].candidate.change_text


@pytest.mark.parametrize("text, match", [
    ("", "no \\[\\[proposal\\]\\] tables"),
    ("[[proposal]]\nid = 'a'\nspec = 'nope.toml'\n", "spec file not found: nope.toml"),
    ("[[proposal]]\nid = 'a'\n[proposal.spec]\nx = 1\n[[proposal]]\nid = 'a'\n[proposal.spec]\nx = 1\n",
     "'a' given twice"),
    ("[[proposal]]\nid = 'a'\nspce = 'x'\n[proposal.spec]\nx = 1\n", "proposal 1: spce: Extra inputs"),
    ("[[proposal]]\nid = 'a'\n[proposal.spec]\nx = 1\n[proposal.apply]\nfile = 'proj/kernel.py'\n",
     "needs both apply.file and apply.with"),
    ("proposal = 3\nextra = 1\n", "unknown top-level key"),
    ("[[proposal\n", "not valid TOML"),
])
def test_bad_proposals_files_name_the_problem(proj, text, match):
    with pytest.raises(ProposalError, match=match):
        load_proposals(_write(proj, text))


def test_a_missing_apply_file_is_the_proposal_s_problem_not_the_file_s(proj):
    [p] = load_proposals(_write(proj, "[[proposal]]\nid = 'a'\n[proposal.spec]\nx = 1\n[proposal.apply]\n"
                                      "file = 'gone.py'\nwith = 'variants/fast.py'\n"))
    assert p.change.problem == "proposal 'a': apply.file not found: gone.py"


def test_inline_spec_paths_are_made_absolute_and_fingerprinted(proj):
    (proj / "cand.py").write_text("def f(x):\n    return x\n")
    props = load_proposals(_write(proj, '[[proposal]]\nid = "a"\n[proposal.spec]\ncandidate = "cand.py:f"\n'
                                        'baseline = "pkg.mod:f"\n'))
    assert props[0].spec["candidate"] == f"{(proj / 'cand.py').resolve()}:f"
    assert props[0].spec["baseline"] == "pkg.mod:f"
    before = props[0].fingerprint
    # the target's files change when a change is accepted: that must not make the proposal new
    (proj / "cand.py").write_text("def f(x):\n    return x + 0\n")
    assert load_proposals(proj / "proposals.toml")[0].fingerprint == before
    # editing the proposal itself does
    _write(proj, '[[proposal]]\nid = "a"\n[proposal.spec]\ncandidate = "cand.py:f"\nbaseline = "pkg.mod:g"\n')
    assert load_proposals(proj / "proposals.toml")[0].fingerprint != before


def test_selection_read_from_the_select_and_classify_results():
    """The loop's view of a real profile (H200, --cache-control none): select_candidate's candidate, its change
    kinds, a diagnosis from its bottleneck, and classify_bottleneck's per-kernel classes for the record."""
    from conftest import FIXTURES

    from mcp_server.ncu.classify import classify_bottleneck
    from mcp_server.ncu.select import select_candidate

    path = str(FIXTURES / "ncu" / "targets_none.raw.csv")
    chosen, classes = select_candidate(path), classify_bottleneck(path)
    sel = selection_from(chosen, classes)
    assert sel.kernel == sel.short_name == "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"
    assert sel.diagnosis.startswith("compute_bound on tensor (not L2-resident, 62% of kernel time, confidence 0.90): ")
    assert sel.avoid == chosen.does_not_fit and any("weight quantization" in a for a in sel.avoid)
    assert sel.fits == chosen.fits and sel.fits
    cls = sel.classification
    assert cls["cache_control"] == "none" and cls["candidate"] == sel.kernel and cls["diagnosis"] == sel.diagnosis
    assert [k["share"] for k in cls["kernels"]] == [k.time_share for k in classes.kernels]
    assert abs(sum(k["share"] for k in cls["kernels"]) - 1.0) < 1e-9
    assert cls["kernels"][0]["class"] == "compute_bound" and cls["kernels"][0]["limiter"] == "tensor"
    none = selection_from(select_candidate(path, min_share=0.99), classes)  # no kernel holds 99 % of the time
    assert none.kernel is None and none.stop_reason == "no kernel reaches 99% of kernel time with a known class"
    assert none.classification["candidate"] is None and len(none.classification["kernels"]) == len(classes.kernels)


def test_loop_operation_is_declared():
    from mcp_server.loop.ops import OPERATIONS

    [op] = OPERATIONS
    assert op.tool == "run_loop" and op.verb == "loop" and op.remainder == "target" and op.progress
    assert not op.hints.read_only and not op.hints.idempotent and op.hints.open_world
    req = op.make_request({"target": ["python", "x.py"], "iters": 2})
    assert req.target == ["python", "x.py"]


def test_a_validation_answer_that_is_not_a_result_is_an_error_and_restored(proj):
    props = _write(proj, _proposal("fast", swap="fast", speedup=2.0, expect=FAST))
    fake = FakeSteps(proj / "proj" / "kernel.py")
    steps = fake.steps()
    steps.validate = lambda spec: {"speedup": 9.9}  # not a validate_candidate answer: never accepted
    res = drive(TARGET, steps=steps, proposals=props, ledger="l.db")
    [step] = res.steps
    assert step.decision == "error" and "not a validate_candidate result" in step.why
    assert (proj / "proj" / "kernel.py").read_text() == BASE


def test_an_inline_spec_validate_candidate_refuses_is_an_error_named_by_field(proj):
    """The default validate step gives a proposal's inline spec to validate_candidate as its arguments: one its
    request model refuses (an unknown key, a dtype it does not take) is recorded as an error with the faces' text,
    before anything runs, and the change is put back."""
    from mcp_server.loop.steps import validate

    (proj / "proposals.toml").write_text('[[proposal]]\nid = "bad"\n[proposal.spec]\ndtype = "int8"\nsped = 2\n'
                                         '[proposal.apply]\nfile = "proj/kernel.py"\nwith = "variants/fast.py"\n')
    fake = FakeSteps(proj / "proj" / "kernel.py")
    res = drive(TARGET, steps=LoopSteps(profile=fake.profile, select=fake.select, validate=validate),
                proposals="proposals.toml", ledger="l.db")
    [step] = res.steps
    assert step.decision == "error" and step.why.startswith(
        "validation could not run: validate_candidate: invalid argument(s): dtype: Input should be ")
    assert "; sped: Extra inputs are not permitted" in step.why
    assert (proj / "proj" / "kernel.py").read_text() == BASE


def test_forced_proposal_is_validated_with_a_warning(proj):
    props = _write(proj, _proposal("quant", swap="int4", speedup=0.97, expect=QUANT,
                                   extra='kind = "quantization"\nforce = true\n'))
    fake = FakeSteps(proj / "proj" / "kernel.py", l2=True)
    res = drive(TARGET, steps=fake.steps(), proposals=props, ledger="l.db")
    assert [(s.proposal_id, s.decision) for s in res.steps] == [("quant", "reverted")]
    assert [w.code for w in res.warnings] == ["forced_proposal"]
    assert (proj / "proj" / "kernel.py").read_text() == BASE



# -- a make_repro directory as the target: its op profiled alone, its spec the baseline -------------------------

@pytest.fixture(scope="module")
def attn_repro(tmp_path_factory):
    """The eager Llama prefill's attention ops rebuilt by make_repro (op2 an in-place copy_ without a spec,
    op3 aten::_softmax with spec_op3.toml)."""
    from conftest import TRACES

    from mcp_server.repro.extract import make_repro

    out = tmp_path_factory.mktemp("loop_repro") / "attn"
    res = make_repro(str(TRACES / "llama_prefill_eager.json.gz"), str(out), module="LlamaAttention", top=5)
    return res, out.resolve()


class ReproSteps:
    """Stand-ins that record what the loop profiles and the spec it validates (accepted when fake_speedup > 1.03)."""

    def __init__(self) -> None:
        self.profiled: list[list[str]] = []
        self.specs: list[Any] = []

    def profile(self, target, report: Path, cache_control):
        self.profiled.append(list(target))
        report.write_bytes(b"replay report")
        return report

    def select(self, report: Path, cache_control) -> Selection:
        return Selection(kernel="softmax_warp_forward", short_name="softmax_warp_forward",
                         diagnosis="latency_bound (small_grid)",
                         classification={"kernels": [{"name": "softmax_warp_forward"}]})

    def validate(self, spec) -> dict[str, Any]:
        self.specs.append(spec)
        s = float(spec.get("fake_speedup", 1.0))
        return {"accepted": s > 1.03, "verdict": "accepted" if s > 1.03 else "not_faster", "reasons": [],
                "speedup": {"median": s}}

    def steps(self) -> LoopSteps:
        return LoopSteps(profile=self.profile, select=self.select, validate=self.validate)


def test_repro_dir_target_and_candidate_against_the_op_spec(attn_repro, tmp_path, monkeypatch):
    import sys

    monkeypatch.chdir(tmp_path)
    res, out = attn_repro
    op = next(o for o in res.ops if o.name == "aten::_softmax")
    assert op.spec == f"spec_{op.id}.toml"
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "softmax_fast.py").write_text("def op3(x, dim, half):\n    return x.softmax(dim)\n")
    props = _write(tmp_path, f'[[proposal]]\nid = "fast"\ncandidate = "kernels/softmax_fast.py:{op.id}"\n'
                             '[proposal.spec]\ncache = "warm"\nfake_speedup = 1.2\n\n'
                             f'[[proposal]]\nid = "same"\ncandidate = "kernels/softmax_fast.py:{op.id}"\n')
    fake = ReproSteps()
    r = drive([str(out)], repro_op=op.id, steps=fake.steps(), iters=5, proposals=props, ledger="l.db")
    replay = [sys.executable, str(out / "repro.py"), "--only", op.id, "--cache", "cold", "--iters", "5", "--nvtx"]
    assert fake.profiled[0] == replay  # the op's replay, as run_ncu expands the directory
    assert [(s.proposal_id, s.decision) for s in r.steps] == [("fast", "accepted"), ("same", "reverted")]
    spec = fake.specs[0]  # the repro op's spec, the proposal's candidate and fields over it
    assert spec["baseline"] == f"{out / 'repro.py'}:{op.id}" and spec["inputs"] == f"{out / 'repro.py'}:make_inputs"
    assert spec["candidate"] == f"{tmp_path / 'kernels' / 'softmax_fast.py'}:{op.id}"
    assert spec["shapes"] == [{"op": op.id}] and spec["dtype"] == "float32" and spec["mode"] == "ab"
    assert spec["cache"] == "warm" and "cache" not in fake.specs[1]
    shown = ledger_show(id=r.experiment_id, ledger="l.db")
    assert shown.experiment.target == replay  # the ledger keys the experiment by what runs
    # the same directory and op again resumes that experiment (and never re-tries the proposals)
    again = drive([str(out)], repro_op=op.id, steps=ReproSteps().steps(), iters=5, proposals=props, ledger="l.db")
    assert again.experiment_id == r.experiment_id and again.resumed and not again.steps
    other = drive([str(out)], steps=ReproSteps().steps(), iters=5, ledger="l.db")  # op0 by default: another target
    assert other.experiment_id != r.experiment_id and other.stopped == "no_proposals"


@pytest.mark.parametrize("body,op,text", [
    ('candidate = "k.py:op3"\n', None, "candidate needs a repro directory"),
    ('text = "no spec"\n', "op3", "spec missing"),
    ('candidate = "k.py:op2"\n', "op2", r"op2 \(aten::copy_\) has no spec"),
    ('candidate = "missing.py:op3"\n', "op3", "candidate file not found: missing.py"),
    ('candidate = "k.py:op3"\nspec = "s.toml"\n', "op3", "candidate or a spec file, not both"),
    ('candidate = "k.py"\n', "op3", "not 'file.py:function'"),
])
def test_repro_proposal_errors(attn_repro, tmp_path, monkeypatch, body, op, text):
    monkeypatch.chdir(tmp_path)
    _, out = attn_repro
    (tmp_path / "k.py").write_text("def op3(*a):\n    return None\n")
    (tmp_path / "s.toml").write_text("")
    props = _write(tmp_path, f'[[proposal]]\nid = "p"\n{body}')
    target = [str(out)] if op else ["python", "bench.py"]
    with pytest.raises(ProposalError, match=text):
        drive(target, repro_op=op, steps=ReproSteps().steps(), proposals=props, ledger="l.db")


def test_repro_dir_default_profile_step_passes_the_op_to_run_ncu(attn_repro, monkeypatch, tmp_path):
    from mcp_server.core.replay_dir import repro_target
    from mcp_server.loop import steps as steps_mod
    from mcp_server.ncu import runner

    _, out = attn_repro
    calls: list[dict] = []

    def fake_run_ncu(**arguments):
        calls.append(arguments)
        return type("Run", (), {"report": arguments["report"] + ".ncu-rep"})()

    monkeypatch.setattr(runner, "run_ncu", fake_run_ncu)
    rt = repro_target([str(out)], "op1")
    assert rt is not None
    got = steps_mod.default_steps(None, rt).profile(list(rt.argv), tmp_path / "r", "none")
    assert got == tmp_path / "r.ncu-rep"  # the report run_ncu says it wrote
    assert calls == [{"target": [str(out)], "repro_op": "op1", "report": str(tmp_path / "r"),
                      "cache_control": "none", "overwrite": True}]
    from mcp_server.ncu.requests import RunNcuRequest

    RunNcuRequest.model_validate(calls[0])  # the arguments run_ncu's request model takes


def test_repro_candidate_spec_is_one_validate_candidate_runs(attn_repro, tmp_path, monkeypatch):
    """The spec a candidate proposal gets (the repro op's, paths made absolute) through the real validate_candidate
    (on the CPU): the candidate is checked against the replayed op and timed; the loop decides on that answer."""
    pytest.importorskip("torch")
    from mcp_server.loop.steps import validate

    monkeypatch.chdir(tmp_path)
    _, out = attn_repro
    (tmp_path / "k.py").write_text("import torch\n\n\ndef op3(x, dim, half_to_float):\n    return torch.softmax(x, dim)\n")
    props = _write(tmp_path, '[[proposal]]\nid = "cpu-softmax"\ncandidate = "k.py:op3"\n'
                             '[proposal.spec]\ndevice = "cpu"\ntime_budget_s = 1\n')
    fake = ReproSteps()
    r = drive([str(out)], repro_op="op3", steps=LoopSteps(profile=fake.profile, select=fake.select, validate=validate),
              proposals=props, ledger="l.db")
    (step,) = r.steps
    assert step.verdict in ("accepted", "not_faster"), step.why  # correct against the replayed aten::_softmax
    assert step.decision == ("accepted" if step.verdict == "accepted" else "reverted")
    assert isinstance((step.speedup or {}).get("median"), float)
