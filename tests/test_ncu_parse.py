"""The ncu parser on the H200 fixtures (tests/fixtures/ncu, made by tools/make_ncu_fixtures.py)."""
from __future__ import annotations

import csv
import io
import lzma
import shutil
from pathlib import Path

import pytest

from mcp_server.core.errors import FileMissingError, KernelscopeError
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.parse import parse_ncu
from mcp_server.ncu.raw import NcuFormatError, convert, parse_number

NCU = Path(__file__).resolve().parent / "fixtures" / "ncu"
TARGETS = ["gemm_bf16", "fma_chain", "elementwise", "bmm_hbm", "bmm_l2", "tiny_add"]

def _has_ncu_report() -> bool:
    try:
        import ncu_report  # noqa: F401
    except ImportError:
        return False
    return True


needs_ncu_report = pytest.mark.skipif(not _has_ncu_report(), reason="ncu-report package not installed")


def by_nvtx(profile):
    return {k.nvtx: k for k in profile.kernels}


@pytest.mark.parametrize("cc", ["all", "none"])
def test_raw_csv_groups_launches_per_kernel(cc):
    p = parse_ncu(str(NCU / f"targets_{cc}.raw.csv"))
    assert p.source.format == "csv-raw"
    assert p.source.cache_control == cc and p.source.cache_control_from == "sidecar"
    assert p.source.device == "NVIDIA H200"
    assert p.source.ncu_version == "2025.3.1.0"
    k = by_nvtx(p)
    assert sorted(k) == sorted(TARGETS)
    # bmm_hbm and bmm_l2 run the same cuBLAS kernel with the same grid: only the NVTX range tells them apart
    assert k["bmm_hbm"].name == k["bmm_l2"].name and k["bmm_hbm"].grid == k["bmm_l2"].grid
    assert all(x.launches == 2 and len(x.launch_rows) == 2 for x in p.kernels)
    assert k["tiny_add"].grid == "(1, 1, 1)" and k["elementwise"].grid == "(65536, 1, 1)"
    # sorted by total time; the 8192^3 GEMM dominates (about 1.39 ms per launch)
    assert p.kernels[0].nvtx == "gemm_bf16"
    assert 1.3e6 < k["gemm_bf16"].duration_ns.median < 1.5e6
    assert p.total_duration_ns == pytest.approx(sum(x.duration_ns.total for x in p.kernels))


def _durations(p):
    return {k.nvtx: (k.duration_ns.total, k.duration_ns.min, k.duration_ns.max) for k in p.kernels}


@needs_ncu_report
@pytest.mark.parametrize("cc", ["all", "none"])
def test_every_format_of_a_run_gives_the_same_durations(cc):
    rep = _durations(parse_ncu(str(NCU / f"targets_{cc}.ncu-rep.xz")))
    raw = _durations(parse_ncu(str(NCU / f"targets_{cc}.raw.csv")))
    det = _durations(parse_ncu(str(NCU / f"targets_{cc}.details.csv")))
    assert rep == raw  # base units: exact nanoseconds
    for name, (tot, lo, _hi) in rep.items():
        # the details page prints auto units with 3 significant digits ("1.39 ms")
        assert det[name][0] == pytest.approx(tot, rel=5e-3)
        assert det[name][1] == pytest.approx(lo, rel=5e-3)
    if cc == "none":
        auto = _durations(parse_ncu(str(NCU / "targets_none.raw_auto.csv")))
        for name, v in rep.items():
            assert auto[name] == pytest.approx(v, rel=1e-6)


@needs_ncu_report
def test_report_and_csv_agree_on_metrics():
    rep = by_nvtx(parse_ncu(str(NCU / "targets_none.ncu-rep.xz")))
    raw = by_nvtx(parse_ncu(str(NCU / "targets_none.raw.csv")))
    for name in TARGETS:
        for m in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l2_hit_rate_pct",
                  "registers_per_thread", "dram_read_bytes"):
            assert raw[name].metrics[m] == pytest.approx(rep[name].metrics[m], rel=1e-3, abs=0.02), (name, m)
    assert rep["gemm_bf16"].registers_per_thread == 168
    assert rep["gemm_bf16"].occupancy_limiter == "registers"
    # FMA chain: 132*64 blocks of 256 threads x 4 chains x 2048 FMAs = 17.7 G FFMA -> 35.4 GFLOP
    assert rep["fma_chain"].flops == pytest.approx(2 * 132 * 64 * 256 * 4 * 2048, rel=0.01)


def test_stdout_csv_with_application_output_mixed_in():
    p = parse_ncu(str(NCU / "stdout_mixed.csv"))
    assert p.source.format == "csv-raw"
    assert [(k.grid, k.launches) for k in p.kernels] == [("(65536, 1, 1)", 2), ("(1, 1, 1)", 2)]
    w = [x for x in p.warnings if x.code == "foreign_lines_skipped"]
    assert w and w[0].count == 5  # the target's 5 chatty lines
    assert 1.5e5 < p.kernels[0].duration_ns.median < 2.5e5
    # no sidecar for a stdout capture: ncu's own notes say the caches were controlled (flushed)
    assert (p.source.cache_control, p.source.cache_control_from) == ("all", "report")


def test_cache_control_from_the_log_beside(tmp_path):
    for cc in ("all", "none"):
        shutil.copy(NCU / f"targets_{cc}.raw.csv", tmp_path / f"t_{cc}.raw.csv")
        p = parse_ncu(str(tmp_path / f"t_{cc}.raw.csv"))
        assert p.source.cache_control is None  # no sidecar, no log
        shutil.copy(NCU / f"targets_{cc}.log", tmp_path / f"t_{cc}.log")
        p = parse_ncu(str(tmp_path / f"t_{cc}.raw.csv"))
        assert (p.source.cache_control, p.source.cache_control_from) == (cc, "log")


def test_details_page_without_rule_columns_and_old_layout(tmp_path):
    rows = list(csv.reader(open(NCU / "targets_all.details.csv", newline="")))
    drop = {"Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup",
            "Block Size", "Grid Size", "Device", "CC"}
    keep = [i for i, h in enumerate(rows[0]) if h not in drop]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    for r in rows:
        w.writerow([r[i] for i in keep if i < len(r)])
    f = tmp_path / "old.csv"
    f.write_text(buf.getvalue())
    p = parse_ncu(str(f))
    ref = parse_ncu(str(NCU / "targets_all.details.csv"))
    assert p.source.format == "csv-details"
    # without Grid/Block the tiny and the large add collapse only if their NVTX range is equal: they are not
    assert len(p.kernels) == len(ref.kernels) == 6
    assert all(k.grid is None for k in p.kernels)
    assert _durations(p) == _durations(ref)


def test_raw_csv_older_layout_without_launch_columns(tmp_path):
    rows = list(csv.reader(open(NCU / "targets_none.raw.csv", newline="")))
    drop = {"Block Size", "Grid Size", "Device", "CC"}
    keep = [i for i, h in enumerate(rows[0]) if h not in drop and "Range" not in h]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    for r in rows:
        w.writerow([r[i] for i in keep])
    f = tmp_path / "old_raw.csv"
    f.write_text(buf.getvalue())
    p = parse_ncu(str(f))
    # no grid, block or NVTX: launches group by name alone, so the two BMM sizes (one cuBLAS kernel) and
    # the tiny and the large add (one elementwise kernel) each fall together -> 4 kernels
    assert len(p.kernels) == 4
    assert sorted(k.launches for k in p.kernels) == [2, 2, 4, 4]
    assert sum(k.launches for k in p.kernels) == 12


def test_values_and_units():
    assert parse_number("n/a") is None and parse_number("no data") is None and parse_number("") is None
    assert parse_number('"2,592"') == 2592.0
    assert parse_number("1,980,000") == 1980000.0
    assert convert(1.39, "ms", "ns") == pytest.approx(1.39e6)
    assert convert(548.77, "us", "ns") == pytest.approx(548770)
    assert convert(548.77, "usecond", "ns") == pytest.approx(548770)
    assert convert(1.26, "Gbyte", "bytes") == pytest.approx(1.26e9)
    assert convert(188.64, "Kbyte/block", "bytes") == pytest.approx(188640)
    assert convert(1.59, "Ghz", "hz") == pytest.approx(1.59e9)
    assert convert(1.59, "cycle/nsecond", "hz") == pytest.approx(1.59e9)
    assert convert(94.6, "%", "pct") == 94.6


# --------------------------------------------------------------------------- bad input

def test_missing_file(tmp_path):
    with pytest.raises(FileMissingError):
        parse_ncu(str(tmp_path / "nope.ncu-rep"))


def test_empty_csv(tmp_path):
    f = tmp_path / "empty.csv"
    f.write_text("")
    with pytest.raises(NcuFormatError, match="empty"):
        parse_ncu(str(f))


def test_header_only_csv(tmp_path):
    f = tmp_path / "header.csv"
    lines = (NCU / "targets_all.raw.csv").read_text().splitlines()
    f.write_text("\n".join(lines[:2]) + "\n")  # header + units row
    with pytest.raises(NcuFormatError, match="no kernel rows"):
        parse_ncu(str(f))


def test_unknown_columns(tmp_path):
    f = tmp_path / "other.csv"
    f.write_text('"ID","Kernel Name","foo__bar.sum","baz"\n"0","k","1","2"\n')
    with pytest.raises(NcuFormatError, match="catalogue knows.*foo__bar.sum"):
        parse_ncu(str(f))


def test_not_an_ncu_csv(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(NcuFormatError, match="not an ncu CSV"):
        parse_ncu(str(f))


def test_error_output_instead_of_csv(tmp_path):
    f = tmp_path / "err.csv"
    f.write_text((NCU / "targets_all.log").read_text().splitlines()[0] + "\n"
                 "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                 "Performance Counters on the target device 0.\n")
    with pytest.raises(NcuFormatError, match="ERR_NVGPUCTRPERM"):
        parse_ncu(str(f))


def test_na_everywhere_is_missing_not_zero(tmp_path):
    rows = list(csv.reader(open(NCU / "targets_none.raw.csv", newline="")))
    h = rows[0]
    na = {i for i, c in enumerate(h) if c.startswith(("sm__throughput", "gpu__compute_memory_throughput"))}
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(h)
    w.writerow(rows[1])
    for r in rows[2:]:
        w.writerow(["n/a" if i in na else v for i, v in enumerate(r)])
    f = tmp_path / "na.csv"
    f.write_text(buf.getvalue())
    p = parse_ncu(str(f))
    assert all("sm_throughput_pct" not in k.metrics for k in p.kernels)
    assert all(r.metrics["sm_throughput_pct"] is None for k in p.kernels for r in k.launch_rows)
    assert all("sm_throughput_pct" in k.missing for k in p.kernels)
    assert any(w.code == "metric_missing" and "sm_throughput_pct" in w.message for w in p.warnings)


@needs_ncu_report
def test_truncated_report(tmp_path):
    data = lzma.decompress((NCU / "targets_none.ncu-rep.xz").read_bytes())
    f = tmp_path / "cut.ncu-rep"
    f.write_bytes(data[:4096])
    with pytest.raises(NcuFormatError) as ei:
        parse_ncu(str(f))
    assert "cut.ncu-rep" in str(ei.value)


@needs_ncu_report
def test_empty_and_foreign_report(tmp_path):
    f = tmp_path / "zero.ncu-rep"
    f.write_bytes(b"")
    with pytest.raises(NcuFormatError, match="empty"):
        parse_ncu(str(f))
    g = tmp_path / "text.ncu-rep"
    g.write_text("hello")
    with pytest.raises(NcuFormatError, match="not an Nsight Compute report"):
        parse_ncu(str(g))


def test_report_without_the_package(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "ncu_report":
            raise ImportError("no")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    monkeypatch.setattr("mcp_server.ncu.repfile.ncu_python_dirs", lambda: [])  # and no ncu install to fall back on
    f = tmp_path / "r.ncu-rep"
    shutil.copy(NCU / "targets_all.ncu-rep.xz", tmp_path / "r.ncu-rep.xz")
    f.write_bytes(lzma.decompress((tmp_path / "r.ncu-rep.xz").read_bytes()))
    with pytest.raises(KernelscopeError, match="ncu-report"):
        parse_ncu(str(f))


# --------------------------------------------------------------------------- other GPUs and ncu versions (issue 23)


def test_metric_aliases_resolve_to_one_catalogue_name():
    """The H200 raw page rewritten into other spellings (tools/make_ncu_alias_fixtures.py): per-SM FP32 counters
    (sm__sass_*), one dram__bytes.sum, pipe utilisations under their _elapsed names only; or, as SpeedOfLight's
    roofline records them on other GPUs, rates per cycle and bytes per second. Every spelling gives the same
    FLOPs and DRAM bytes per kernel; nothing is reported missing that the file holds under another name."""
    orig = by_nvtx(parse_ncu(str(NCU / "targets_all.raw.csv")))
    aliases = parse_ncu(str(NCU / "targets_all.aliases.raw.csv"))
    rates = parse_ncu(str(NCU / "targets_all.rates.raw.csv"))
    for prof in (aliases, rates):
        got = by_nvtx(prof)
        assert set(got) == set(TARGETS)
        for t in TARGETS:
            assert got[t].flops == pytest.approx(orig[t].flops, rel=1e-6), t
            assert got[t].dram_bytes == pytest.approx(orig[t].dram_bytes, rel=1e-6), t
            assert not {"ffma_thread_inst", "fadd_thread_inst", "fmul_thread_inst"} & set(got[t].missing)
    al = by_nvtx(aliases)
    # ncu's own dram__bytes.sum.per_second x duration is the read + write counters' sum (H200 fma_chain: 8.79 MB)
    assert by_nvtx(rates)["fma_chain"].dram_bytes == pytest.approx(8_790_400, rel=1e-9)
    for t in TARGETS:
        for pipe in ("fma_pipe_pct", "alu_pipe_pct", "lsu_pipe_pct", "tensor_pipe_pct"):
            assert pipe in al[t].metrics and pipe not in al[t].missing
    # normalised by elapsed cycles: never above the active-cycle figure of the same launch
    assert al["fma_chain"].metrics["fma_pipe_pct"] == pytest.approx(96.63, abs=0.01)
    assert al["fma_chain"].metrics["fma_pipe_pct"] <= orig["fma_chain"].metrics["fma_pipe_pct"]


def test_metrics_the_catalogue_does_not_know_are_listed():
    al = parse_ncu(str(NCU / "targets_all.aliases.raw.csv"))
    assert al.unrecognized_metrics == ["sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_elapsed"]
    raw = parse_ncu(str(NCU / "targets_all.raw.csv"))
    assert "sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_elapsed" in raw.unrecognized_metrics
    assert not any(m.startswith("device__attribute_") for m in raw.unrecognized_metrics)
    assert not set(raw.unrecognized_metrics) & set(cat.BY_NCU_NAME)
    details = parse_ncu(str(NCU / "targets_all.details.csv"))
    assert details.unrecognized_metrics and all(": " in m or "__" in m for m in details.unrecognized_metrics)
    from mcp_server.ncu.classify import classify_bottleneck
    assert classify_bottleneck(str(NCU / "targets_all.aliases.raw.csv")).unrecognized_metrics == \
        al.unrecognized_metrics


@needs_ncu_report
def test_ncu_rep_read_through_the_installed_ncus_own_module(tmp_path):
    """Without the ncu-report package, a .ncu-rep is read through the ncu install's extras/python/ncu_report.py
    (found from $CUDA_HOME/nsight-compute*): an install laid out like NVIDIA's, holding the same module and
    native library, in a process where ``import ncu_report`` fails."""
    import os
    import subprocess
    import sys

    import ncu_report

    pkg = Path(ncu_report.__file__).resolve().parent
    extras = tmp_path / "cuda" / "nsight-compute-2099.1.0" / "extras" / "python"
    extras.mkdir(parents=True)
    (extras / "ncu_report.py").symlink_to(pkg / "__init__.py")
    for lib in pkg.glob("*.so"):
        (extras / lib.name).symlink_to(lib)
    rep = tmp_path / "targets_all.ncu-rep"
    rep.write_bytes(lzma.decompress((NCU / "targets_all.ncu-rep.xz").read_bytes()))
    code = ("import sys, json; sys.modules['ncu_report'] = None\n"
            "from mcp_server.ncu.parse import parse_ncu\nfrom mcp_server.ncu.repfile import ncu_python_dirs\n"
            "p = parse_ncu(sys.argv[1])\n"
            "print(json.dumps([[str(d) for d in ncu_python_dirs()], p.source.format,"
            " [(k.nvtx, k.launches, k.duration_ns.total, k.flops) for k in p.kernels]]))")
    env = {**os.environ, "CUDA_HOME": str(tmp_path / "cuda"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("NCU", None)
    out = subprocess.run([sys.executable, "-c", code, str(rep)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    dirs, fmt, kernels = json.loads(out.stdout.strip().splitlines()[-1])
    assert str(extras) in dirs and fmt == "ncu-rep"  # first unless the machine has an ncu of its own on /usr/bin
    direct = parse_ncu(str(rep))
    assert kernels == [[k.nvtx, k.launches, k.duration_ns.total, k.flops] for k in direct.kernels]
    if dirs != [str(extras)]:
        return  # this machine has an ncu install of its own: the no-install error cannot be reached here
    # and with neither the package nor an install: the one-line error says where it looked
    env["CUDA_HOME"] = str(tmp_path / "nothing")
    out = subprocess.run([sys.executable, "-c", code, str(rep)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "no Nsight Compute install with extras/python/ncu_report.py" in out.stderr
