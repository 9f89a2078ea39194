"""classify_bottleneck and select_candidate on the H200 fixtures: classes known by construction.

tools/ncu_targets.py builds each target to be bound by one thing: a large bf16 GEMM (tensor pipe),
an FMA-chain Triton kernel (FMA pipe), a large elementwise add and an HBM-sized MLA-like BMM (DRAM),
the same BMM at an L2-resident size, and a one-block add (small grid).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_server.core.gpu_specs import GpuSpecError
from mcp_server.ncu.classify import classify_bottleneck
from mcp_server.ncu.select import select_candidate

NCU = Path(__file__).resolve().parent / "fixtures" / "ncu"


def _has_ncu_report() -> bool:
    try:
        import ncu_report  # noqa: F401
    except ImportError:
        return False
    return True


FORMATS = ["raw.csv", "details.csv"] + (["ncu-rep.xz"] if _has_ncu_report() else [])

EXPECTED = {
    "gemm_bf16": ("compute_bound", "tensor"),
    "fma_chain": ("compute_bound", "fma"),
    "elementwise": ("memory_bound", "dram"),
    "bmm_hbm": ("memory_bound", "dram"),
    "tiny_add": ("latency_bound", "small_grid"),
}


def classes(c):
    return {k.nvtx: k for k in c.kernels}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("cc", ["all", "none"])
def test_classes_known_by_construction(cc, fmt):
    c = classify_bottleneck(str(NCU / f"targets_{cc}.{fmt}"))
    assert c.gpu == "h200"
    k = classes(c)
    for name, (cls, lim) in EXPECTED.items():
        b = k[name].bottleneck
        assert (b.class_, b.limiter) == (cls, lim), name
        assert b.evidence and b.advice
    # the L2-sized BMM: under 60 % on both sides whether cold or warm (a 6-8 us launch)
    assert k["bmm_l2"].bottleneck.class_ == "latency_bound"
    gemm = k["gemm_bf16"].bottleneck
    assert any(e.metric == "tensor_pipe_pct" and e.value > 90 for e in gemm.evidence)


@pytest.mark.parametrize("fmt", FORMATS)
def test_residency_flips_between_cache_control_all_and_none(fmt):
    cold = classify_bottleneck(str(NCU / f"targets_all.{fmt}"))
    warm = classify_bottleneck(str(NCU / f"targets_none.{fmt}"))
    kc, kw = classes(cold), classes(warm)
    # cold: caches flushed before every pass, residency is not judged
    assert all(k.bottleneck.l2_resident is None for k in cold.kernels)
    assert [w.code for w in cold.warnings].count("residency_unknown") == 1
    assert "residency_unknown" not in [w.code for w in warm.warnings]
    # the 16 MiB BMM: DRAM-heavy with a low L2 hit rate cold, L2-resident warm
    assert kc["bmm_l2"].metrics["dram_throughput_pct"] > 30 and kc["bmm_l2"].metrics["l2_hit_rate_pct"] < 20
    assert kw["bmm_l2"].metrics["dram_throughput_pct"] < 5 and kw["bmm_l2"].metrics["l2_hit_rate_pct"] > 95
    assert kw["bmm_l2"].bottleneck.l2_resident is True
    assert any("do not quantize" in a for a in kw["bmm_l2"].bottleneck.advice)
    assert not any("do not quantize" in a for a in kc["bmm_l2"].bottleneck.advice)
    # the 512 MiB BMM streams from HBM either way
    assert kw["bmm_hbm"].bottleneck.l2_resident is False
    assert kw["elementwise"].bottleneck.l2_resident is False


def test_cache_control_argument_when_no_sidecar(tmp_path):
    f = tmp_path / "copy.csv"
    shutil.copy(NCU / "targets_none.raw.csv", f)
    c = classify_bottleneck(str(f))
    assert c.source.cache_control is None
    w = [x for x in c.warnings if x.code == "residency_unknown"]
    assert w and "unknown" in w[0].message
    c2 = classify_bottleneck(str(f), cache_control="none")
    assert c2.source.cache_control_from == "argument"
    assert classes(c2)["bmm_l2"].bottleneck.l2_resident is True


def test_conflicting_cache_control_warns():
    c = classify_bottleneck(str(NCU / "targets_all.raw.csv"), cache_control="none")
    assert any(w.code == "cache_control_conflict" for w in c.warnings)


def test_missing_metric_lowers_confidence_and_is_named(tmp_path):
    import csv
    import io

    rows = list(csv.reader(open(NCU / "targets_none.raw.csv", newline="")))
    keep = [i for i, h in enumerate(rows[0]) if not h.startswith("sm__pipe_tensor")]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    for r in rows:
        w.writerow([r[i] for i in keep])
    f = tmp_path / "no_tensor.csv"
    f.write_text(buf.getvalue())
    full = classes(classify_bottleneck(str(NCU / "targets_none.raw.csv")))
    cut = classes(classify_bottleneck(str(f), cache_control="none"))
    g = cut["gemm_bf16"].bottleneck
    assert "tensor_pipe_pct" in g.missing and "tensor_pipe_pct" in cut["gemm_bf16"].missing
    assert g.confidence < full["gemm_bf16"].bottleneck.confidence
    assert g.limiter != "tensor"  # never guessed: without the tensor pipe the GEMM is read from what is there
    # the DRAM-bound and small-grid kernels need no pipe metric: same verdict
    for n in ("elementwise", "bmm_hbm", "tiny_add"):
        assert (cut[n].bottleneck.class_, cut[n].bottleneck.limiter) == (
            full[n].bottleneck.class_, full[n].bottleneck.limiter)


def test_no_speed_of_light_gives_unknown(tmp_path):
    import csv
    import io

    rows = list(csv.reader(open(NCU / "targets_none.raw.csv", newline="")))
    na = {i for i, h in enumerate(rows[0]) if h.startswith(("sm__throughput", "gpu__compute_memory"))}
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    for j, r in enumerate(rows):
        w.writerow(["n/a" if (j >= 2 and i in na) else v for i, v in enumerate(r)])
    f = tmp_path / "na.csv"
    f.write_text(buf.getvalue())
    c = classify_bottleneck(str(f), cache_control="none")
    assert all(k.bottleneck.class_ == "unknown" and k.bottleneck.confidence == 0 for k in c.kernels)
    assert all("sm_throughput_pct" in k.bottleneck.missing for k in c.kernels)
    assert any(w.code == "metric_missing" and "unknown" in w.message for w in c.warnings)


def test_gpu_argument():
    c = classify_bottleneck(str(NCU / "targets_none.raw.csv"), gpu="h100")
    assert c.gpu == "h100"
    assert (c.gpu_spec["hbm_tb_s"].value, c.gpu_spec["hbm_tb_s"].source) == (3.35, "datasheet")
    h = classify_bottleneck(str(NCU / "targets_none.raw.csv"))
    assert (h.gpu_spec["hbm_tb_s"].value, h.gpu_spec["hbm_tb_s"].source) == (4.3, "measured")
    assert h.gpu_spec["fp32_tflops"].source == "datasheet"
    with pytest.raises(GpuSpecError, match="known: .*h200"):
        classify_bottleneck(str(NCU / "targets_none.raw.csv"), gpu="tpu-v5")


def test_json_contract_field_names():
    c = classify_bottleneck(str(NCU / "targets_none.raw.csv"))
    d = c.model_dump(mode="json")
    assert set(d["source"]) >= {"path", "format", "ncu_version", "cache_control"}
    assert d["gpu"] == "h200"
    k = d["kernels"][0]
    assert set(k) >= {"id", "name", "short_name", "launches", "duration_ns", "metrics", "bottleneck"}
    assert set(k["duration_ns"]) == {"total", "mean", "median", "min", "max"}
    assert set(k["bottleneck"]) >= {"class", "limiter", "l2_resident", "confidence", "evidence", "advice"}
    assert set(k["bottleneck"]["evidence"][0]) == {"metric", "value", "threshold", "reads"}
    assert "class_" not in k["bottleneck"]
    assert "class" in c.model_json_schema(mode="serialization")["$defs"]["Bottleneck"]["properties"]


def test_select_candidate_ranks_share_times_headroom(tmp_path):
    md, png = tmp_path / "sel.md", tmp_path / "sel.png"
    s = select_candidate(str(NCU / "targets_none.raw.csv"), md_path=str(md), png_path=str(png))
    assert s.candidate.nvtx == "gemm_bf16"  # 62 % of kernel time, 5 % from its roof: still the top score
    assert any("quantization" in x and "compute-bound" in x for x in s.does_not_fit)
    ranked = {r.id: r for r in s.ranking}
    assert ranked[s.candidate.id].why_not is None
    small = [r for r in s.ranking if r.time_share < 0.05]
    assert small and all("under the 5% threshold" in r.why_not for r in small)
    assert all(r.why_not for r in s.ranking if r.id != s.candidate.id)
    text = md.read_text()
    assert "## Candidate" in text and "gemm_bf16" in text and "| kernel | share |" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_select_with_a_high_share_threshold_skips_everything():
    s = select_candidate(str(NCU / "targets_none.raw.csv"), min_share=0.9)
    assert s.candidate is None
    assert any(w.code == "no_candidate" for w in s.warnings)


def test_select_l2_resident_candidate_gets_no_quantization(tmp_path):
    # only the two BMMs: keep their rows of the warm raw CSV
    import csv
    import io

    rows = list(csv.reader(open(NCU / "targets_none.raw.csv", newline="")))
    nv = next(i for i, h in enumerate(rows[0]) if "Push/Pop" in h)
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(rows[0])
    w.writerow(rows[1])
    for r in rows[2:]:
        if ":bmm_l2:" in r[nv]:
            w.writerow(r)
    f = tmp_path / "bmm_l2.csv"
    f.write_text(buf.getvalue())
    s = select_candidate(str(f), cache_control="none")
    assert s.candidate.nvtx == "bmm_l2" and s.candidate.bottleneck.l2_resident is True
    assert any("L2-resident" in x for x in s.does_not_fit)
    assert not any("quantization" in x for x in s.fits)


@pytest.mark.parametrize("fmt", FORMATS)
def test_roofline_position_against_the_measured_h200_ceilings(fmt):
    k = classes(classify_bottleneck(str(NCU / f"targets_none.{fmt}")))
    # executed FLOPs and DRAM bytes over time: the streaming kernels sit on the measured 4.3 TB/s roof,
    # the GEMM on the measured 790 TFLOP/s roof (its executed FLOPs include the tile padding)
    for name, peak, side in (("gemm_bf16", "bf16_tflops", False), ("elementwise", "fp32_tflops", True),
                             ("bmm_hbm", "bf16_tflops", True), ("fma_chain", "fp32_tflops", False)):
        r = k[name].roofline
        assert r is not None and r.peak == peak and r.memory_bound_side is side, name
        assert 0.9 < r.fraction_of_roof < 1.1, (name, r.fraction_of_roof)
    assert k["gemm_bf16"].roofline.sources == {"bf16_tflops": "measured", "hbm_tb_s": "measured"}
    # warm, the L2-resident BMM reads almost nothing from DRAM: far right of the ridge, far below the roof
    assert k["bmm_l2"].roofline.fraction_of_roof < 0.1 and not k["bmm_l2"].roofline.memory_bound_side


def test_a_grid_that_reaches_every_sm_is_not_small_and_two_binaries_of_one_name_stay_apart():
    """Under one wave is not a small grid when the blocks reach every SM: the streaming INT4 kernel (264
    persistent blocks on 132 SMs, 0.67 waves) and tinygemm (512 blocks, 0.97 waves) were told "the grid does
    not fill the GPU: ... split-K/stream-K" before; cuBLAS's 128 blocks on 132 SMs still are
    (persistent_grid_h200.details.csv: four kernels of the H200 profile in bench/results/stream_ncu_h200.csv)."""
    c = classify_bottleneck(str(NCU / "persistent_grid_h200.details.csv"), cache_control="all")
    # one name, grid and block, two binaries (the INT4 and FP8 forms: 96 and 64 registers): two kernels, not a mean
    mma = sorted((x for x in c.kernels if x.name == "w4a16_mma"), key=lambda x: x.id)
    assert [(x.id, x.launches, x.registers_per_thread) for x in mma] == [(5, 1, 96), (6, 1, 64)]
    assert (mma[1].bottleneck.class_, mma[1].bottleneck.limiter) == ("memory_bound", "dram")   # FP8: DRAM 66.5 %
    k = {x.name.split("(")[0].split("<")[0].split()[-1].split("::")[-1][:14]: x.bottleneck for x in c.kernels
         if x.id != 6}
    assert set(k) == {"nvjet_sm90_tst", "tinygemm_m16n8", "w4a16_mma"}, set(k)
    assert (k["nvjet_sm90_tst"].class_, k["nvjet_sm90_tst"].limiter) == ("latency_bound", "small_grid")
    for name in ("w4a16_mma", "tinygemm_m16n8"):
        b = k[name]
        assert b.class_ == "latency_bound" and b.limiter != "small_grid", (name, b.limiter)
        assert any("reach all 132 SMs" in e.reads for e in b.evidence), name
        assert not any("does not fill the GPU" in a for a in b.advice), name
    assert any("(2.0 per SM" in e.reads for e in k["w4a16_mma"].evidence)
