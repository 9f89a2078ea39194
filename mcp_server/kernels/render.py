"""Rich views of the kernels engine's results for the CLI."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from rich.markup import escape

from mcp_server.core.textable import Col, TextTable, print_line, print_warnings
from mcp_server.kernels.models import DecodeGemmResult, L2SweepResult, MlaBenchResult


def _tail(res: Any, con, paths: dict[str, Optional[str]], targets: Sequence[Any] = ()) -> None:
    """The targets met or missed, the files written and the warnings, below a result's tables."""
    for g in targets:
        mark = "n/a" if g.met is None else ("[green]met[/]" if g.met else "[red]missed[/]")
        worst = "n/a" if g.worst is None else f"{g.worst:.2f}x"
        con.print(f"{escape(g.target)}: worst {worst} over {g.rows} rows: {mark}", highlight=False)
    for label, path in paths.items():
        if path:
            print_line(con, f"{label}: {escape(path)}", highlight=False)
    print_warnings(con, res.warnings, highlight=False)


def render_mla(res: MlaBenchResult, con, request: Any = None) -> None:
    d = res.device
    con.print(escape(f"{res.model} on {d.name} ({d.sm_count} SMs, L2 {d.l2_mb:.0f} MB), torch {d.torch}, "
                     f"triton {d.triton}; copy {res.copy_tbps:.2f} TB/s (read + write)"
                     + (f", read {res.read_tbps:.2f} TB/s" if res.read_tbps else "")), highlight=False)
    cupti = any(r.int4_cupti_speedup is not None for r in res.rows)
    kernels = any(r.int4_kernel for r in res.rows)
    extra = ("INT4 x cupti", "FP8 x cupti") if cupti else ()
    t = TextTable([Col(c, justify="left" if c in ("weight", "cache", "INT4/FP8 kernel") else None)
                   for c in ("weight", "layers", "H", "M", "K", "N", "MB", "cache", "BF16", "INT4", "FP8", "INT4 x",
                             "FP8 x") + extra + ("INT4 TB/s", "BF16 TB/s") + (("INT4/FP8 kernel",) if kernels else ())],
                  title="reconstruction BMMs (CUDA-graph timed, µs)", title_justify="left")

    def x(v):
        return "-" if v is None else f"{v:.2f}"
    for r in res.rows:
        t.add_row(r.weight, str(r.layers), str(r.H), str(r.M), str(r.K), str(r.N), f"{r.weight_mb:.0f}", r.cache,
                  f"{r.bf16_us:.1f}", f"{r.int4_us:.1f}", f"{r.fp8_us:.1f}", f"{r.int4_speedup:.2f}",
                  f"{r.fp8_speedup:.2f}", *((x(r.int4_cupti_speedup), x(r.fp8_cupti_speedup)) if cupti else ()),
                  f"{r.int4_tbps:.2f}", f"{r.bf16_tbps:.2f}",
                  *((escape(f"{r.int4_kernel or '-'}/{r.fp8_kernel or '-'}"),) if kernels else ()))
    t.print(con)
    if res.checks:
        ct = TextTable([Col("shape", "text", min_width=12)] + [Col(h) for h in ("M", "INT4 kernel", "FP8 kernel",
                                                                                "INT4 quant", "FP8 quant", "BF16")],
                       title="correctness (relative error)", title_justify="left")
        for k in res.checks:
            ct.add_row(escape(k.shape), str(k.M), f"{k.int4_kernel_err:.1e}", f"{k.fp8_kernel_err:.1e}",
                      f"{k.int4_quant_err:.3f}", f"{k.fp8_quant_err:.3f}", f"{k.bf16_err:.1e}")
        ct.print(con)
    _tail(res, con, {"json": res.json_path}, res.targets)


def render_l2(res: L2SweepResult, con, request: Any = None) -> None:
    t = TextTable([Col(c) for c in ("H", "MB", "BF16", "BF16 cold", "INT4", "FP8", "INT4 x", "FP8 x", "warm/cold")],
                  title=f"L2 sweep on {escape(res.device.name)}: W_UK heads K={res.K} N={res.N} M={res.M} (µs, warm)",
                  title_justify="left")
    for pt in res.points:
        t.add_row(str(pt.H), f"{pt.weight_mb:.1f}", f"{pt.bf16_us:.2f}", f"{pt.bf16_cold_us:.2f}",
                  f"{pt.int4_us:.2f}", f"{pt.fp8_us:.2f}", f"{pt.int4_speedup:.2f}", f"{pt.fp8_speedup:.2f}",
                  f"{pt.warm_over_cold:.2f}")
    t.print(con)

    def mb(v):
        return "none" if v is None else f"{v:.1f} MB"
    con.print(f"L2 {res.l2_mb:.0f} MB; effective L2 boundary {mb(res.effective_l2_mb)}; INT4 wins from "
              f"{mb(res.int4_crossover_mb)}, FP8 from {mb(res.fp8_crossover_mb)}", highlight=False)
    _tail(res, con, {"json": res.json_path, "png": res.png_path})


def render_decode(res: DecodeGemmResult, con, request: Any = None) -> None:
    d = res.device
    con.print(escape(f"decode GEMMs on {d.name} ({d.sm_count} SMs), torch {d.torch}, triton {d.triton}; copy "
                     f"{res.copy_tbps:.2f} TB/s (read + write); tinygemm "
                     + ("present" if res.tinygemm else "absent in this torch")), highlight=False)

    def us(v):
        return "-" if v is None else f"{v:.2f}"

    t = TextTable([Col(c) for c in ("K", "N", "M", "BF16", "tinygemm", "INT4", "FP8", "INT4 x", "FP8 x", "BF16 cupti",
                                    "tiny cupti", "INT4 cupti", "FP8 cupti", "INT4 % roof")]
                  + [Col("INT4 variant", "text", justify="left")],
                  title="x[M, K] @ W[K, N], cold: graph µs | CUPTI µs (* untuned)", title_justify="left")
    for r in res.rows:
        v = r.int4_config.get("variant", "dot")
        if r.int4_config.get("SPLIT", 1) > 1:
            v += f" x{r.int4_config['SPLIT']}"
        t.add_row(str(r.K), str(r.N), str(r.M), us(r.bf16_us), us(r.tinygemm_us), us(r.int4_us), us(r.fp8_us),
                  f"{r.int4_speedup:.2f}", f"{r.fp8_speedup:.2f}", us(r.bf16_cupti_us), us(r.tinygemm_cupti_us),
                  us(r.int4_cupti_us), us(r.fp8_cupti_us),
                  "-" if r.int4_roof_pct is None else f"{r.int4_roof_pct:.0f}", escape(v + ("" if r.tuned else " *")))
    t.print(con)
    if res.checks:
        ct = TextTable([Col(h) for h in ("K", "N", "M", "INT4", "INT4 max", "FP8", "FP8 max", "BF16", "repeatable")],
                       title="correctness on quantized real weights (relative error vs dequantized reference)",
                       title_justify="left")
        for k in res.checks:
            ct.add_row(str(k.K), str(k.N), str(k.M), f"{k.int4_rel_err:.1e}", f"{k.int4_max_rel_err:.1e}",
                       f"{k.fp8_rel_err:.1e}", f"{k.fp8_max_rel_err:.1e}", f"{k.bf16_rel_err:.1e}",
                       "yes" if k.int4_repeatable and k.fp8_repeatable else "[red]no[/]")
        ct.print(con)
    _tail(res, con, {"json": res.json_path}, res.targets)
