"""Compile the MLA Triton kernels for sm_90 on a machine without a GPU and print their resource
usage and SASS instruction mix (triton's bundled ptxas / cuobjdump). Pointers are declared
16-byte aligned and N divisible by 16, as Triton specializes them at run time.

    .venv/bin/python tools/mla_compile_check.py [--sass-dir DIR]
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from mcp_server.kernels import w4a16, w8a16  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def compile_one(fn, sig: dict, consts: dict, num_warps=4, num_stages=2):
    div = {}
    for i, (name, ty) in enumerate(sig.items()):
        if ty.startswith("*") or name in ("N",):
            div[(i,)] = [["tt.divisibility", 16]]
    full = dict(sig)
    for k in consts:
        full[k] = "constexpr"
    src = ASTSource(fn=fn, signature=full, constexprs=consts, attrs=div)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def report(k, tag: str, sass_dir: Path | None):
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    res = subprocess.run([str(BIN / "cuobjdump"), "--dump-resource-usage", f.name],
                         capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", res)
    stack = re.search(r"STACK:(\d+)", res)
    smem = re.search(r"SHARED:(\d+)", res)
    sass = subprocess.run([str(BIN / "cuobjdump"), "--dump-sass", f.name], capture_output=True, text=True).stdout
    ops = collections.Counter(m.group(1) for m in re.finditer(
        r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*(?:\.[A-Z0-9_]+)*)", sass, re.M))
    if sass_dir:
        sass_dir.mkdir(parents=True, exist_ok=True)
        (sass_dir / f"{tag}.sass").write_text(sass)
        (sass_dir / f"{tag}.ttgir").write_text(k.asm["ttgir"])
    top = ", ".join(f"{n} {c}" for c, n in sorted(((c, n) for n, c in ops.items()), reverse=True)[:14])
    print(f"{tag:34s} regs={regs and regs.group(1)} stack={stack and stack.group(1)} "
          f"smem={smem and smem.group(1)} | {top}")


I4 = {"x_ptr": "*bf16", "qw_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*bf16", "out_ptr": "*bf16",
      "M": "i32", "N": "i32"}
F8 = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*fp32", "out_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32",
      "M": "i32", "N": "i32"}
F8P = {k: v for k, v in F8.items() if k not in ("ws_ptr", "cnt_ptr")}
I4S = {"x_ptr": "*bf16", "qw_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*bf16", "out_ptr": "*bf16",
       "ws_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32", "N": "i32"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass-dir", type=Path, default=None)
    ap.add_argument("--splitk", action="store_true", help="only the split-K decode-GEMM kernels")
    a = ap.parse_args()
    if a.splitk:
        splitk(a.sass_dir)
        return
    for K in (128, 512):
        for bm in (16, 64):
            for bn, nw in ((128, 4), (256, 8)):
                for dep in (False, True):
                    c = {"K": K, "GROUP": 128, "HAS_ZERO": False, "UNPACK": 0, "BLOCK_N": bn, "BLOCK_M": bm,
                         "DEP": dep, "PF": dep}
                    report(compile_one(w4a16._w4a16_dot_kernel, I4, c, nw),
                           f"int4_dot_K{K}_BM{bm}_BN{bn}{'_dep' if dep else ''}", a.sass_dir)
                c = {"K": K, "GROUP": 0, "UNPACK": 0, "SUB": 2, "BLOCK_N": bn, "BLOCK_M": bm}
                report(compile_one(w8a16._w8a16_shuf_kernel, F8, c, nw), f"fp8_shuf_K{K}_BM{bm}_BN{bn}", a.sass_dir)



def splitk(sass_dir: Path | None = None):
    """The split-K decode-GEMM kernels (INT4 and FP8) at the sweep's typical configs."""
    for K, split in ((4096, 8), (512, 1)):
        for bn, sub in ((64, 2), (64, 4), (128, 2), (128, 4)):
            c = {"K": K, "GROUP": 128, "HAS_ZERO": False, "UNPACK": 0, "BLOCK_N": bn, "BLOCK_M": 16,
                 "SPLIT": split, "SUB": sub}
            report(compile_one(w4a16._w4a16_splitk_kernel, I4S, c, 4), f"int4_splitk_K{K}_BN{bn}_S{split}_U{sub}",
                   sass_dir)
            c = {"K": K, "GROUP": 0, "UNPACK": 0, "SUB": sub, "BLOCK_N": bn, "BLOCK_M": 16, "SPLIT": split}
            report(compile_one(w8a16._w8a16_shuf_kernel, F8, c, 4), f"fp8_shuf_K{K}_BN{bn}_S{split}_U{sub}", sass_dir)


def persistent():
    sig = dict(I4)
    sig["H"] = "i32"
    for K in (128, 512):
        for ns in (2, 3):
            c = {"K": K, "GROUP": 128, "HAS_ZERO": False, "UNPACK": 0, "BLOCK_N": 128, "BLOCK_M": 16}
            report(compile_one(w4a16._w4a16_persistent_kernel, sig, c, 4, ns), f"int4_pers_K{K}_s{ns}",
                   Path("/tmp/sassP"))


def persistent_fp8():
    sig = dict(F8P)
    sig["H"] = "i32"
    for K in (128, 512):
        c = {"K": K, "GROUP": 0, "UNPACK": 0, "BLOCK_N": 128, "BLOCK_M": 16}
        report(compile_one(w8a16._w8a16_persistent_kernel, sig, c, 4, 3), f"fp8_pers_K{K}_s3", Path("/tmp/sassP"))


if __name__ == "__main__":
    main()
