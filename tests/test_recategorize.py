"""recategorize on kernelscope reports of the real fixtures and on upstream-layout reports."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import defaultdict

import anyio
import openpyxl
import pytest
from conftest import TRACES
from upstream_layout import build_upstream_report, make_large_spec

from mcp_server.compare.recategorize import recategorize
from mcp_server.core.categories import load_categories
from mcp_server.core.errors import FileMissingError, ReportFormatError, WriteError
from mcp_server.reports import layout as L
from mcp_server.reports.reader import read_report

DEFAULT = load_categories()


@pytest.fixture(scope="module")
def custom_csv(tmp_path_factory):
    """Moves vectorized elementwise kernels and RMSNorm kernels into a new category 'pointwise',
    and softmax into 'softmax'; everything else follows the shared rules."""
    d = tmp_path_factory.mktemp("cats")
    src = DEFAULT.source
    lines = open(src, encoding="utf-8").read().splitlines()
    text = "\n".join([lines[0], "pointwise,vectorized_elementwise|rms_?norm", "softmax,softmax"] + lines[1:]) + "\n"
    p = d / "custom.csv"
    p.write_text(text)
    return str(p)


@pytest.fixture(scope="module")
def ks_report(tmp_path_factory):
    from mcp_server.traces import analyze_trace

    d = tmp_path_factory.mktemp("ks")
    out = d / "eager.xlsx"
    a = analyze_trace(str(TRACES / "llama_prefill_eager.json.gz"), output_xlsx=str(out))
    return out, a


def _sha(p) -> str:
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def test_recategorize_kernelscope_report(tmp_path, ks_report, custom_csv):
    src, a = ks_report
    p = tmp_path / "eager.xlsx"
    shutil.copy(src, p)
    rules = load_categories(custom_csv)
    df = a.kernels
    names = df["name"].astype(str)
    new_cat = names.map(rules.classify)
    moved = df[new_cat != df["category"].astype(str)]
    expect_names = set(moved["name"])
    assert len(expect_names) > 0 and "softmax" in set(new_cat)  # the eager trace has a softmax kernel
    before = read_report(p)
    detail_rows = before.kernels  # full table; detail sheets hold a subset
    res = recategorize([str(p)], categories=custom_csv)
    f = res.files[0]
    assert f.source == "kernelscope" and f.output == str(p)
    assert f.changed == len(expect_names)
    assert {(c.kernel, c.old, c.new) for c in f.changes} == {
        (n, o, rules.classify(n)) for n, o in zip(moved["name"], moved["category"])}
    # rows rewritten: every moved kernel in the full table + its GPU Kernels row + detail rows
    gk_moved = before.gpu_kernels["name"].isin(expect_names).sum()
    det = read_report(src, need=("details", "kernels"))
    n_detail = 0
    import python_calamine as pc
    wb = pc.CalamineWorkbook.from_path(str(src))
    for ds in det.detail_sheets:
        rows = wb.get_sheet_by_name(ds.sheet).to_python()
        n_detail += sum(1 for r in rows if len(r) > 5 and r[2] in expect_names)
    assert f.rows_changed == len(moved) + gk_moved + n_detail
    assert len(detail_rows) == len(df)

    after = read_report(p)
    assert after.kernels["category"].tolist() == new_cat.tolist()
    # Summary category table = recomputed from the full table
    exp = df.assign(category=new_cat).groupby("category")["dur_us"].agg(["count", "sum"])
    got = after.summary_categories.set_index("category")
    assert set(got.index) == set(exp.index)
    for cat, r in exp.iterrows():
        assert got.loc[cat, "count"] == r["count"] and got.loc[cat, "total_us"] == pytest.approx(r["sum"], abs=2e-3)
    assert list(got["total_us"]) == sorted(got["total_us"], reverse=True)
    # GPU Kernels follow the new rules
    assert all(rules.classify(n) == c for n, c in zip(after.gpu_kernels["name"], after.gpu_kernels["category"]))
    # each detail sheet's category table = its kernel rows' categories
    for ds in after.detail_sheets:
        rows = wb.get_sheet_by_name(ds.sheet).to_python()
        kh = next(i for i, r in enumerate(rows) if r[0] == "Module")
        sums = defaultdict(float)
        for r in rows[kh + 1:]:
            if r[2]:
                sums[rules.classify(r[2])] += float(r[3])
        assert ds.categories == pytest.approx(dict(sums), abs=2e-3)
    # Module Tree breakdowns: the root's breakdown shows the new categories with their exact time
    root = after.tree[after.tree["depth"] == 0].iloc[0]
    bd = L.parse_breakdown(root["breakdown"])
    sub = df[df["module_path"].astype(str).str.startswith(root["path"])]
    exp_root = sub.assign(category=sub["name"].map(rules.classify)).groupby("category")["dur_us"].sum()
    for cat, us in exp_root.items():
        if round(us) > 0:
            assert bd[cat] == pytest.approx(us, abs=0.51)
    assert "softmax" in bd and "pointwise" in bd
    # formatting survives: header fill, bold title, outline levels
    wbx = openpyxl.load_workbook(p)
    assert wbx["Summary"]["A1"].font.b and wbx["GPU Kernels"]["A1"].fill.fgColor.rgb.endswith("CCE5FF")
    tree = wbx["Module Tree"]
    assert any(tree.row_dimensions[r].outline_level > 0 for r in range(2, tree.max_row + 1))

    # idempotent: a second run changes nothing and leaves the bytes alone
    sha = _sha(p)
    again = recategorize([str(p)], categories=custom_csv)
    assert again.files[0].changed == 0 and again.files[0].rows_changed == 0 and again.total_changed == 0
    assert _sha(p) == sha
    # and back to the shared rules restores the analysis' categories
    back = recategorize([str(p)])
    assert back.files[0].changed == len(expect_names)
    restored = read_report(p)
    assert restored.kernels["category"].tolist() == df["category"].astype(str).tolist()
    assert {r.category: r.count for r in restored.summary_categories.itertuples()} == {
        c.category: c.count for c in a.categories}


@pytest.mark.parametrize("layout", ["old", "new"])
def test_recategorize_upstream_report(tmp_path, custom_csv, layout):
    spec = make_large_spec(sheets=4, rows=300, seed=3)
    p = tmp_path / f"up_{layout}.xlsx"
    build_upstream_report(str(p), spec, layout)
    rules = load_categories(custom_csv)
    allk = spec.kernels()
    moved_names = {n for n, c, _, _ in allk if rules.classify(n) != c}
    assert moved_names
    detail_rows_moved = sum(1 for d in spec.details for k in d.kernels if k.name in moved_names)
    res = recategorize([str(p)], categories=custom_csv, output_dir=str(tmp_path / "out"))
    f = res.files[0]
    out = tmp_path / "out" / p.name
    assert f.output == str(out) and f.source == f"upstream-{layout}"
    assert f.changed == len(moved_names)
    assert f.rows_changed == detail_rows_moved + len(moved_names)  # detail rows + one GPU Kernels row per name
    orig = read_report(p)
    assert all(r.category != "pointwise" for r in orig.summary_categories.itertuples())  # input untouched

    rep = read_report(out)
    assert rep.source == f"upstream-{layout}"
    assert all(rules.classify(n) == c for n, c in zip(rep.kernels["name"], rep.kernels["category"]))
    # Summary: time moved exactly as the re-classified GPU Kernels rows say
    exp = defaultdict(lambda: [0.0, 0])
    for n, _c, dur, _ in allk:
        e = exp[rules.classify(n)]
        e[0] += dur
        e[1] += 1
    got = {r.category: (r.total_us, r.count) for r in rep.summary_categories.itertuples()}
    assert set(got) == set(exp)
    for cat, (us, cnt) in exp.items():
        assert got[cat][1] == cnt and got[cat][0] == pytest.approx(us, abs=0.05 * len(moved_names) + 0.2)
    # detail category tables
    for d, ds in zip(spec.details, rep.detail_sheets):
        sums = defaultdict(float)
        for k in d.kernels:
            sums[rules.classify(k.name)] += k.dur
        assert ds.categories == pytest.approx(dict(sums), abs=0.5)
    # Module Tree: detail-instance rows hold their own kernels: breakdown consistent with the new categories
    tree = rep.tree
    for d in spec.details:
        row = tree[tree["module"] == d.instance].iloc[0]
        bd = L.parse_breakdown(row["breakdown"])
        assert "pointwise" in bd
        assert sum(bd.values()) == pytest.approx(row["total_us"], abs=len(bd) * 0.5 + 1)
    # the tree of an upstream report is an estimate when a category was split; the result says so
    split = any(0 < sum(1 for n, c, _, _ in allk if c == old and rules.classify(n) != old) <
                sum(1 for n, c, _, _ in allk if c == old) for old in {c for _, c, _, _ in allk})
    assert split == any(w.code == "tree_breakdown_estimated" for w in f.warnings)

    again = recategorize([str(out)], categories=custom_csv)
    assert again.files[0].changed == 0


def test_upstream_truncated_gpu_kernels_warns(tmp_path, custom_csv):
    spec = make_large_spec(sheets=2, rows=50, seed=4)
    spec.all_kernels = spec.kernels() + [(f"void vllm::rms_norm_kernel_{i}", "normalization", 0.1, "RMSNorm")
                                         for i in range(1100)]
    p = tmp_path / "trunc.xlsx"
    build_upstream_report(str(p), spec, "new")
    res = recategorize([str(p)], categories=custom_csv)
    f = res.files[0]
    assert any(w.code == "gpu_kernels_truncated" for w in f.warnings)
    rep = read_report(p)
    assert rep.gpu_kernels_truncated
    listed = set(rep.gpu_kernels["name"])
    rules = load_categories(custom_csv)
    assert f.changed == len({n for n, c, _, _ in spec.all_kernels if n in listed and rules.classify(n) != c} |
                            {k.name for d in spec.details for k in d.kernels if rules.classify(k.name) != k.category})


def test_interrupted_write_leaves_original_intact(tmp_path, ks_report, custom_csv, monkeypatch):
    src, _ = ks_report
    p = tmp_path / "r.xlsx"
    shutil.copy(src, p)
    sha = _sha(p)
    import zipfile

    real = zipfile.ZipFile.writestr
    calls = {"n": 0}

    def failing(self, *a, **k):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)
    monkeypatch.setattr(zipfile.ZipFile, "writestr", failing)
    with pytest.raises(WriteError) as e:
        recategorize([str(p)], categories=custom_csv)
    assert str(p) in str(e.value)
    assert calls["n"] > 3  # it failed midway through the archive
    assert _sha(p) == sha
    assert os.listdir(tmp_path) == ["r.xlsx"]  # no temp file left behind
    monkeypatch.undo()
    assert recategorize([str(p)], categories=custom_csv).files[0].changed > 0


def test_bad_inputs(tmp_path, custom_csv):
    with pytest.raises(FileMissingError):
        recategorize([str(tmp_path / "nope.xlsx")])
    t = tmp_path / "trace.json"
    t.write_text("{}")
    with pytest.raises(ReportFormatError, match="not an .xlsx report"):
        recategorize([str(t)])
    x = tmp_path / "fake.xlsx"
    x.write_text("not a zip")
    with pytest.raises(ReportFormatError, match="not a readable xlsx"):
        recategorize([str(x)])
    p = tmp_path / "u.xlsx"
    build_upstream_report(str(p), make_large_spec(sheets=1, rows=10, seed=5), "old")
    wb = openpyxl.load_workbook(p)
    wb.remove(wb["GPU Kernels"])
    wb.save(p)
    with pytest.raises(ReportFormatError) as e:
        recategorize([str(p)], categories=custom_csv)
    assert str(p) in str(e.value) and "GPU Kernels" in str(e.value)


def test_mcp_tool_and_cli(tmp_path, ks_report, custom_csv, capsys, monkeypatch):
    from mcp import Client

    from mcp_server.faces.cli import main
    from mcp_server.faces.server import mcp

    src, a = ks_report
    p = tmp_path / "r.xlsx"
    shutil.copy(src, p)
    monkeypatch.setenv("KERNELSCOPE_ROOTS", str(tmp_path))  # over MCP, in-place edits are confined to the roots

    async def go():
        async with Client(mcp) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            ok = await c.call_tool("recategorize", {"paths": [str(p)], "categories": custom_csv,
                                                    "output_dir": str(tmp_path / "o")})
            bad = await c.call_tool("recategorize", {"paths": [str(tmp_path / "missing.xlsx")]})
            return tools["recategorize"], ok, bad

    tool, ok, bad = anyio.run(go)
    assert tool.annotations.read_only_hint is False and tool.annotations.idempotent_hint is True
    assert {"paths", "categories", "output_dir"} <= set(tool.input_schema["properties"])
    assert tool.input_schema.get("required") == ["paths"]
    assert "files" in tool.output_schema["properties"]
    assert not ok.is_error
    sc = ok.structured_content
    assert sc["files"][0]["changed"] > 0 and sc["files"][0]["output"] == str(tmp_path / "o" / "r.xlsx")
    assert bad.is_error and "not found" in bad.content[0].text

    assert main(["recategorize", str(tmp_path / "o" / "r.xlsx"), "--categories", custom_csv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"][0]["changed"] == 0  # already done by the tool call
    assert main(["recategorize", str(p), "--categories", custom_csv]) == 0
    text = capsys.readouterr().out
    assert "kernelscope" in text and str(sc["files"][0]["changed"]) in text


def test_unchanged_report_is_copied_through_the_atomic_writer(tmp_path, ks_report):
    src, _ = ks_report
    out_dir = tmp_path / "out"
    res = recategorize([str(src)], output_dir=str(out_dir))  # the rules it was written with: nothing moves
    f = res.files[0]
    assert f.changed == 0 and f.rows_changed == 0 and f.output == str(out_dir / src.name)
    assert _sha(out_dir / src.name) == _sha(src)
    assert os.listdir(out_dir) == [src.name]  # no temp file left behind
    blocked = tmp_path / "blocked"
    (blocked / src.name).mkdir(parents=True)  # the target name is taken by a directory
    with pytest.raises(WriteError) as e:
        recategorize([str(src)], output_dir=str(blocked))
    assert src.name in str(e.value)
    assert os.listdir(blocked) == [src.name]


def test_reports_public_api_decides_report_kind_once(tmp_path, ks_report):
    from mcp_server import reports
    src, _ = ks_report
    up = tmp_path / "up.xlsx"
    build_upstream_report(str(up), make_large_spec(sheets=2, rows=10, seed=6), "new")
    assert reports.is_kernelscope_report(src) and not reports.is_kernelscope_report(up)
    assert not reports.is_kernelscope_report(tmp_path / "missing.xlsx")
    assert read_report(src, need=()).source == "kernelscope" and read_report(up, need=()).source == "upstream-new"
    plan, source = reports.plan_recategorize(up, load_categories())
    assert source == "upstream-new" and not plan.patch.edits  # built with the shared rules
    names = [L.full_table_sheet_name(i) for i in range(3)]
    assert names == ["Kernels (full)", "Kernels (full 2)", "Kernels (full 3)"]
    assert all(L.is_full_table_sheet(n) for n in names)
    assert not any(L.is_full_table_sheet(n) for n in ("Summary", "GPU Kernels", "Kernels (full", "Linear (dec)"))
    assert [s for s in openpyxl.load_workbook(src, read_only=True).sheetnames if L.is_full_table_sheet(s)]
