#!/usr/bin/env python3
"""Rewrite the H200 raw-page ncu CSV into the metric spellings other GPUs and ncu versions write.

Traits seen in the field corpus (issue 23): an A10G report (ncu's SpeedOfLight roofline) records FP32
instruction *rates* per elapsed cycle and DRAM bytes *per second* instead of counts, and pipe
utilisations normalised by elapsed cycles only; other exports name the FP32 counters per SM
(``sm__sass_thread_inst_executed_op_ffma_pred_on.sum``, not ``smsp__``) and DRAM traffic as one
``dram__bytes.sum``. The values stay the H200's, so the parser must read the same FLOPs and bytes.

    python3 tools/make_ncu_alias_fixtures.py [--src tests/fixtures/ncu/targets_all.raw.csv] [--out tests/fixtures/ncu]

Writes:
  targets_all.aliases.raw.csv  sm__sass_* counts, dram__bytes.sum (= read + write), pipe and issue
                               utilisations under their _elapsed names only, two metrics the catalogue
                               does not know (kept as columns)
  targets_all.rates.raw.csv    no counts: smsp__sass_*.sum.per_cycle_elapsed (= count / (clock x duration))
                               with smsp__cycles_elapsed.avg.per_second (= the SM clock column), and
                               ncu's own dram__bytes.sum.per_second
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INFO = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
        "Grid Size", "Device", "CC"]
COMMON = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
          "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
          "l1tex__throughput.avg.pct_of_peak_sustained_active", "sm__warps_active.avg.pct_of_peak_sustained_active",
          "launch__grid_size", "launch__block_size", "launch__waves_per_multiprocessor",
          "device__attribute_multiprocessor_count", "lts__t_sector_hit_rate.pct", "sm__cycles_elapsed.avg.per_second",
          "device__attribute_display_name", "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum"]
OPS = ("ffma", "fadd", "fmul")
ELAPSED = ["sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"]
UNKNOWN = ["sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum.peak_sustained"]


def num(s: str) -> float:
    return float(s.replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(ROOT / "tests" / "fixtures" / "ncu" / "targets_all.raw.csv"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "ncu"))
    args = ap.parse_args()
    rows = list(csv.reader(open(args.src, newline="")))
    head, units, body = rows[0], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(head)}
    INFO.extend(h for h in head if "Push/Pop_Range" in h or "Start/Stop_Range" in h)  # NVTX: launches group by it

    def get(r: list[str], name: str) -> str:
        i = col.get(name)
        return r[i] if i is not None else ""

    def unit(name: str) -> str:
        i = col.get(name)
        return units[i] if i is not None else ""

    # aliases
    names = INFO + COMMON + [f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in OPS] + \
        ["dram__bytes.sum"] + ELAPSED + [n for n in UNKNOWN if n in col]
    out_units = [unit(n) for n in INFO + COMMON] + ["inst"] * 3 + ["byte"] + [unit(n) for n in ELAPSED] + \
        [unit(n) for n in UNKNOWN if n in col]
    out = [names, out_units]
    for r in body:
        row = [get(r, n) for n in INFO + COMMON]
        row += [get(r, f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum") for op in OPS]
        row.append(f"{num(get(r, 'dram__bytes_read.sum')) + num(get(r, 'dram__bytes_write.sum')):.0f}")
        row += [get(r, n) for n in ELAPSED] + [get(r, n) for n in UNKNOWN if n in col]
        out.append(row)
    dst = Path(args.out) / "targets_all.aliases.raw.csv"
    with open(dst, "w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(out)
    print(dst)

    # rates
    rate_names = [f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed" for op in OPS]
    names = INFO + COMMON + rate_names + ["smsp__cycles_elapsed.avg.per_second", "dram__bytes.sum.per_second"]
    out_units = [unit(n) for n in INFO + COMMON] + ["inst/cycle"] * 3 + ["hz", "byte/s"]
    out = [names, out_units]
    for r in body:
        hz = num(get(r, "sm__cycles_elapsed.avg.per_second"))
        dur_s = num(get(r, "gpu__time_duration.sum")) * 1e-9
        row = [get(r, n) for n in INFO + COMMON]
        row += [f"{num(get(r, f'smsp__sass_thread_inst_executed_op_{op}_pred_on.sum')) / (hz * dur_s):.9g}"
                for op in OPS]
        row += [get(r, "sm__cycles_elapsed.avg.per_second"), get(r, "dram__bytes.sum.per_second")]
        out.append(row)
    dst = Path(args.out) / "targets_all.rates.raw.csv"
    with open(dst, "w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(out)
    print(dst)


if __name__ == "__main__":
    main()
