"""Report workbooks: the writer on the real H200 fixtures, the reader on kernelscope and upstream layouts."""
from __future__ import annotations

import os
import re
from functools import lru_cache

import openpyxl
import pytest
from conftest import TRACES
from upstream_layout import UDetail, UKernel, UpstreamSpec, build_upstream_report, make_analysis, make_large_spec

from mcp_server.core.errors import FileMissingError, ReportFormatError, WriteError
from mcp_server.reports import layout as L
from mcp_server.reports.reader import kernel_table, read_report
from mcp_server.reports.xlsx_writer import write_analysis_report
from mcp_server.traces.models import KERNEL_COLUMNS

FIXTURES = sorted(p.name for p in TRACES.glob("*.json.gz"))


@lru_cache(maxsize=None)
def _analysis(name: str):
    from mcp_server.traces import analyze_trace

    return analyze_trace(str(TRACES / name))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("reports")
    out = {}
    for name in FIXTURES:
        p = d / name.replace(".json.gz", ".xlsx")
        write_analysis_report(_analysis(name), str(p))
        out[name] = p
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_round_trip_on_real_fixture(reports, name):
    a = _analysis(name)
    df = a.kernels
    rep = read_report(reports[name])
    assert rep.source == "kernelscope" and rep.kernels_from == "full"
    assert len(rep.kernels) == a.kernel_count == len(df)
    assert rep.kernels["dur_us"].sum() == pytest.approx(a.total_kernel_us, rel=1e-12)
    # per-kernel values come back exactly, in order
    assert rep.kernels["name"].tolist() == df["name"].astype(str).tolist()
    assert rep.kernels["dur_us"].tolist() == pytest.approx(df["dur_us"].astype(float).tolist())
    assert rep.kernels["module_path"].tolist() == df["module_path"].astype(str).tolist()
    # Summary category table = the analysis' category totals
    cats = {c.category: (c.count, c.total_us) for c in a.categories}
    got = {r.category: (r.count, r.total_us) for r in rep.summary_categories.itertuples()}
    assert set(got) == set(cats)
    for k, (cnt, us) in cats.items():
        assert got[k][0] == cnt and got[k][1] == pytest.approx(us, abs=2e-3)
    assert rep.total_kernel_us == pytest.approx(a.total_kernel_us, abs=0.1)
    # GPU Kernels: one row per unique name, totals add up, not truncated for these small traces
    assert not rep.gpu_kernels_truncated
    assert len(rep.gpu_kernels) == df["name"].nunique()
    assert rep.gpu_kernels["total_us"].sum() == pytest.approx(a.total_kernel_us, abs=0.01 * len(rep.gpu_kernels))
    assert rep.gpu_kernels["count"].sum() == a.kernel_count
    # Module Tree: the root rows carry the analysis' root totals
    roots = {n.path: n.total_us for n in a.tree if n.depth == 0}
    troots = rep.tree[rep.tree["depth"] == 0]
    assert dict(zip(troots["path"], troots["total_us"])) == pytest.approx(roots, abs=2e-3)
    # Metadata: categories hash and counts
    assert rep.metadata["categories_sha256"] == a.categories_sha256
    assert int(rep.metadata["kernel_count"]) == a.kernel_count
    # the KERNEL_COLUMNS view
    kt = kernel_table(rep)
    assert list(kt.columns[:len(KERNEL_COLUMNS)]) == list(KERNEL_COLUMNS)


def test_layout_headers_and_detail_sheets(reports):
    """Exact upstream sheet names and header rows; detail sheets titled and named as documented."""
    seen_detail = 0
    for p in reports.values():
        wb = openpyxl.load_workbook(p)
        assert wb.sheetnames[:4] == ["Summary", "Overview", "Module Tree", "GPU Kernels"]
        assert wb.sheetnames[-2:] == ["Kernels (full)", "Metadata"]
        row1 = lambda ws: [c.value for c in ws[1] if c.value is not None]  # noqa: E731
        assert row1(wb["Summary"]) == L.SUMMARY_HEADERS
        assert row1(wb["Overview"]) == L.OVERVIEW_HEADERS
        assert row1(wb["Module Tree"])[:5] == L.TREE_HEADERS
        assert row1(wb["GPU Kernels"]) == L.GPU_KERNEL_HEADERS
        assert row1(wb["Kernels (full)"]) == list(KERNEL_COLUMNS)
        summary = [[c.value for c in r] for r in wb["Summary"].iter_rows()]
        assert summary[1][0] == "Total Kernel Time"
        assert any(r[:5] == L.SUMMARY_CATEGORY_HEADERS for r in summary)
        tree = wb["Module Tree"]
        for r in range(2, tree.max_row + 1):
            label = tree.cell(r, 1).value
            depth = 0 if "├── " not in label else label.index("├── ") // 4
            assert tree.row_dimensions[r].outline_level == min(depth, 7)
            bd = tree.cell(r, 4).value
            if bd:
                assert re.fullmatch(r"[^:,]+: [\d,]+ us \(\d+\.\d%\)(, [^:,]+: [\d,]+ us \(\d+\.\d%\))*", bd)
        for sn in [s for s in wb.sheetnames[4:-2] if s != L.GPU_TIME]:
            seen_detail += 1
            # phase suffix pre/dec/gra (graph replays of unknown phase); none for kernels of unknown phase
            assert re.fullmatch(r".{1,28}( \(((pre|dec|gra)(,[A-Z])?|[A-Z])\))?", sn) and len(sn) <= 31
            ws = wb[sn]
            assert isinstance(ws["A1"].value, str) and isinstance(ws["B1"].value, int)
            assert ws["A2"].value.startswith("Kernel sum: ")
            rows = [[c.value for c in r] for r in ws.iter_rows()]
            kh = next(i for i, r in enumerate(rows) if r[0] == "Module")
            assert rows[kh][:10] == L.DETAIL_KERNEL_HEADERS
            assert len([r for r in rows[kh + 1:] if r[2]]) == ws["B1"].value
            assert any(r[:3] == L.DETAIL_CATEGORY_HEADERS for r in rows[:kh])
    assert seen_detail >= 4


def test_dsv3_dense_and_moe_layers_get_variant_sheets(reports):
    """The DeepSeek-style fixture has dense and MoE decoder layers: two variants of one type."""
    rep = read_report(reports["dsv3_prefill.json.gz"], need=("details",))
    variants = {(d.module_type, d.variant) for d in rep.detail_sheets}
    assert {("DeepseekV3DecoderLayer", "A"), ("DeepseekV3DecoderLayer", "B")} <= variants
    by_v = {d.variant: d for d in rep.detail_sheets}
    # the variants differ in what they hold: their kernel counts differ
    assert by_v["A"].title_count != by_v["B"].title_count
    for d in rep.detail_sheets:
        assert d.phase == "prefill" and d.layout == "new"
        assert sum(d.categories.values()) == pytest.approx(d.kernel_sum_us, abs=1.0)


def test_sdpa_detail_sheet_shows_fused_attention_kernel(reports):
    rep = read_report(reports["llama_prefill_sdpa.json.gz"], need=("details",))
    assert [d.module_type for d in rep.detail_sheets] == ["LlamaDecoderLayer"]
    rep_k = read_report(reports["llama_prefill_sdpa.json.gz"], need=("kernels",))
    a = _analysis("llama_prefill_sdpa.json.gz")
    attn = a.kernels[a.kernels["category"] == "attention"]
    assert len(attn) > 0 and set(attn["name"]) <= set(rep_k.kernels["name"])


def test_writer_caps_gpu_kernels_and_detail_tables(tmp_path):
    """> 1000 unique names and > 1000 kernels in a layer: capped tables, truncated lines, full table intact."""
    a = make_analysis(n_layers=2)
    df = a.kernels.copy()
    import pandas as pd

    layer = df[df["module_path"].str.contains("LlamaDecoderLayer_0/")].iloc[:1]
    extra = pd.concat([layer] * 1200, ignore_index=True)
    extra["name"] = [f"triton_poi_fused_add_{i}" for i in range(1200)]
    extra["ts_us"] = [1e6 + i for i in range(1200)]
    extra["category"] = "elementwise"
    big = pd.concat([df, extra], ignore_index=True)
    # rebuild the tree numbers from the kernels so the fixture stays consistent
    b = make_analysis(n_layers=2)
    nodes = []
    for n in b.tree:
        sub = big[(big["module_path"] == n.path) | big["module_path"].str.startswith(n.path + "/")]
        nodes.append(n.model_copy(update={"total_us": float(sub["dur_us"].sum()), "kernel_count": len(sub)}))
    b = b.model_copy(update={"tree": nodes, "kernel_count": len(big),
                             "total_kernel_us": float(big["dur_us"].sum())}).with_kernels(big)
    out = tmp_path / "big.xlsx"
    write_analysis_report(b, str(out))
    rep = read_report(out)
    assert rep.gpu_kernels_truncated and len(rep.gpu_kernels) == L.MAX_ROWS
    assert len(rep.kernels) == len(big)
    wb = openpyxl.load_workbook(out, read_only=True)
    ws = wb["GPU Kernels"]
    last = list(ws.iter_rows(values_only=True))[-1]
    assert last[0] == "... truncated at 1000 rows"
    layer_sheets = [d for d in rep.detail_sheets if d.title_count and d.title_count > L.MAX_ROWS]
    assert layer_sheets and all(d.truncated and d.rows == L.MAX_ROWS for d in layer_sheets)


def _old_new_spec(n_unique_extra: int = 0):
    spec = make_large_spec(sheets=3, rows=1200, seed=1)
    if n_unique_extra:
        allk = spec.kernels() + [(f"extra_kernel_{i}", "other", 0.5, "Misc") for i in range(n_unique_extra)]
        spec.all_kernels = allk
    return spec


@pytest.mark.parametrize("layout", ["old", "new"])
def test_upstream_layouts_read(tmp_path, layout):
    spec = _old_new_spec(n_unique_extra=1200)
    p = tmp_path / f"up_{layout}.xlsx"
    build_upstream_report(str(p), spec, layout)
    rep = read_report(p)
    assert rep.source == f"upstream-{layout}"
    assert rep.kernels_from == "detail" and rep.kernels_truncated
    assert [d.sheet for d in rep.detail_sheets] == [d.sheet for d in spec.details]
    for d, ds in zip(spec.details, rep.detail_sheets):
        assert ds.module == d.instance and ds.module_type == d.module_type and ds.phase == d.phase
        assert ds.title_count == 1200 and ds.rows == L.MAX_ROWS and ds.truncated
        assert ds.layout == layout
        assert ds.parent_path == (d.parent_path if layout == "new" else "")
        # category table built from all 1200 kernels
        assert sum(ds.categories.values()) == pytest.approx(sum(k.dur for k in d.kernels), abs=0.5)
        mine = rep.kernels[rep.kernels["sheet"] == d.sheet]
        assert mine["name"].tolist() == [k.name for k in d.kernels[:L.MAX_ROWS]]
        assert mine["module"].tolist() == [k.module for k in d.kernels[:L.MAX_ROWS]]
        assert set(mine["module_type"]) == {d.module_type} and set(mine["phase"]) == {d.phase}
    assert rep.gpu_kernels_truncated and len(rep.gpu_kernels) == L.MAX_ROWS
    allk = spec.kernels()
    assert rep.total_kernel_us == pytest.approx(sum(k[2] for k in allk), abs=0.1)
    assert rep.summary_categories["count"].sum() == len(allk)
    kt = kernel_table(rep)
    assert (kt["ts_us"] == -1).all() and (kt["device"] == -1).all() and (kt["cpu_op"] == "").all()
    # detail rows, then (issue 13) the kernels outside the kept sheets taken from GPU Kernels
    assert len(kt[kt["sheet"] != ""]) == 3 * L.MAX_ROWS
    from mcp_server.reports.reader import RESIDUAL_SOURCE
    assert (kt.loc[kt["sheet"] == "", "source"] == RESIDUAL_SOURCE).all()
    stored = rep.stored_categories()
    assert all(stored[k.name] == k.category for d in spec.details for k in d.kernels[:10])


def test_upstream_without_truncation(tmp_path):
    d = UDetail("LlamaDecoderLayer", "LlamaDecoderLayer_3", "decode", "LlamaForCausalLM_0/LlamaModel_0", [
        UKernel("Linear_0", "nvjet_tst_128x256", 10.0, "gemm", ts=0),
        UKernel("LlamaAttention_0", "flash_fwd_kernel", 20.0, "attention", ts=11),
    ])
    spec = UpstreamSpec(details=[d], root_type="LlamaForCausalLM", chain=["LlamaModel", "LlamaDecoderLayer"])
    for layout in ("old", "new"):
        p = tmp_path / f"{layout}.xlsx"
        build_upstream_report(str(p), spec, layout)
        rep = read_report(p)
        assert not rep.kernels_truncated and not rep.gpu_kernels_truncated
        assert rep.detail_sheets[0].sheet == "LlamaDecoderLayer (dec)"
        assert rep.kernels["dur_us"].tolist() == [10.0, 20.0]
        assert rep.summary_modules["detail_tab"].tolist()[-1] == "LlamaDecoderLayer (dec)"


def _mutate(src, dst, fn):
    wb = openpyxl.load_workbook(src)
    fn(wb)
    wb.save(dst)


def test_missing_sheet_and_columns_name_file_sheet_and_column(tmp_path):
    p = tmp_path / "u.xlsx"
    build_upstream_report(str(p), make_large_spec(sheets=2, rows=20, seed=2), "new")
    sheet = L.detail_sheet_name("DecoderLayerKind00", "prefill")

    q = tmp_path / "no_gpu.xlsx"
    _mutate(p, q, lambda wb: wb.remove(wb["GPU Kernels"]))
    with pytest.raises(ReportFormatError) as e:
        read_report(q, need=("gpu_kernels",))
    assert str(q) in str(e.value) and "GPU Kernels" in str(e.value) and "missing" in str(e.value)
    read_report(q, need=("kernels",))  # not needed: no error

    r = tmp_path / "no_cat.xlsx"

    def drop_category(wb):
        ws = wb[sheet]
        for row in ws.iter_rows():
            if row[0].value == "Module":
                row[5].value = "Kategorie"
    _mutate(p, r, drop_category)
    with pytest.raises(ReportFormatError) as e:
        read_report(r, need=("kernels",))
    msg = str(e.value)
    assert str(r) in msg and sheet in msg and "'Category'" in msg

    s = tmp_path / "no_total.xlsx"
    _mutate(p, s, lambda wb: wb["GPU Kernels"].cell(1, 3, "Dauer"))
    with pytest.raises(ReportFormatError) as e:
        read_report(s, need=("gpu_kernels",))
    assert "GPU Kernels" in str(e.value) and "'Total Duration (us)'" in str(e.value)

    t = tmp_path / "no_summary_cats.xlsx"

    def drop_cat_table(wb):
        ws = wb["Summary"]
        for row in ws.iter_rows():
            if row[0].value == "Category":
                row[0].value = None
    _mutate(p, t, drop_cat_table)
    with pytest.raises(ReportFormatError) as e:
        read_report(t, need=("summary",))
    assert "Summary" in str(e.value) and "category table" in str(e.value)

    bad = tmp_path / "not.xlsx"
    bad.write_text("hello")
    with pytest.raises(ReportFormatError, match="not an xlsx"):
        read_report(bad)
    with pytest.raises(FileMissingError):
        read_report(tmp_path / "missing.xlsx")


def test_writer_is_atomic(tmp_path, monkeypatch):
    a = make_analysis()
    out = tmp_path / "r.xlsx"
    out.write_bytes(b"previous report")
    import openpyxl.workbook.workbook as wbmod

    real_save = wbmod.Workbook.save

    def boom(self, filename):  # the temp file gets written, then the disk fills up
        real_save(self, filename)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(wbmod.Workbook, "save", boom)
    with pytest.raises(WriteError) as e:
        write_analysis_report(a, str(out))
    assert str(out) in str(e.value)
    assert out.read_bytes() == b"previous report"
    assert os.listdir(tmp_path) == ["r.xlsx"]
    with pytest.raises(WriteError, match="does not exist"):
        write_analysis_report(a, str(tmp_path / "nodir" / "r.xlsx"))


def test_full_table_split_over_several_sheets(tmp_path, monkeypatch):
    """Past Excel's row limit the full table continues on 'Kernels (full 2)', ...; readers and
    recategorize treat them as one table (row limit lowered here to keep the test small)."""
    import mcp_server.reports.xlsx_writer as W
    from mcp_server.compare.recategorize import recategorize

    monkeypatch.setattr(W, "FULL_SHEET_ROWS", 15)
    a = make_analysis(n_layers=4)
    out = tmp_path / "split.xlsx"
    write_analysis_report(a, str(out))
    rep = read_report(out)
    full = [s for s in rep.sheets if s.startswith("Kernels (full")]
    assert full == ["Kernels (full)", "Kernels (full 2)", "Kernels (full 3)"]
    assert rep.kernels["correlation"].tolist() == a.kernels["correlation"].tolist()
    csv = tmp_path / "c.csv"
    csv.write_text("category,pattern\ngemmish,nvjet\n")
    res = recategorize([str(out)], categories=str(csv))
    n_nvjet = int(a.kernels["name"].str.contains("nvjet").sum())
    names = a.kernels["name"]
    assert res.files[0].changed == names.nunique()  # every name changes: nvjet -> gemmish, the rest -> other
    after = read_report(out)
    assert (after.kernels["category"] == "gemmish").sum() == n_nvjet
    assert set(after.kernels["category"]) == {"gemmish", "other"}
    assert dict(zip(after.summary_categories["category"], after.summary_categories["count"])) == {
        "gemmish": n_nvjet, "other": len(a.kernels) - n_nvjet}


def test_full_table_append_refuses_a_shared_strings_workbook_with_a_typed_error(tmp_path):
    import zipfile

    import pandas as pd

    from mcp_server.reports.fast_table import fill_full_tables

    plain = tmp_path / "plain.xlsx"
    wb = openpyxl.Workbook()
    wb.active.title = L.FULL_KERNELS
    wb.active.append(["name", "category"])
    wb.save(plain)
    src = tmp_path / "with_sst.xlsx"  # as Excel saves it: strings in a shared-strings part
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(src, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        zout.writestr("xl/sharedStrings.xml", '<sst xmlns="http://schemas.openxmlformats.org/'
                      'spreadsheetml/2006/main" count="0" uniqueCount="0"/>')
    target = tmp_path / "report.xlsx"
    with pytest.raises(WriteError) as e:
        fill_full_tables(str(src), str(tmp_path / "tmp.xlsx"), [(L.FULL_KERNELS, pd.DataFrame({"name": ["k"]}))],
                         ["name", "category"], target=str(target))
    assert str(target) in str(e.value) and "shared-strings" in str(e.value)


def test_plotting_starts_once_with_a_file_backend():
    import subprocess
    import sys

    code = ("import sys\nfrom mcp_server.reports import pyplot\nplt = pyplot()\nimport matplotlib\n"
            "assert pyplot() is plt\nprint(matplotlib.get_backend().lower())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MPLBACKEND": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "agg"
    # a host that already chose pyplot's backend keeps it
    code2 = ("import matplotlib\nmatplotlib.use('svg')\nimport matplotlib.pyplot\n"
             "from mcp_server.reports import pyplot\npyplot()\nprint(matplotlib.get_backend().lower())\n")
    out = subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg"
