"""GPU tests of the probe writers (CUDA header and Triton helper): build, run, decode.

They need an NVIDIA GPU (and nvcc / torch + triton); elsewhere they skip. The decoder part
they use needs only numpy, so they run on the GPU machine without the server's dependencies.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "mcp_server" / "timeline" / "include"


def _has_cuda_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except Exception:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_cuda_gpu(), reason="no NVIDIA GPU here")]

SMALL_CU = r"""
#include <cstdio>
#include <vector>
#include "kernelscope_probe.cuh"
__global__ void k(float* x, uint64_t* buf, unsigned long long slots, int iters) {
  KS_PROBE_INIT(buf, slots, 1, 0, threadIdx.x == 0);
  float v = x[threadIdx.x];
  for (int p = 0; p < 3; ++p) {
    KS_PROBE_BEGIN(p);
    for (int i = 0; i < iters * (blockIdx.x == 3 && p == 1 ? 8 : 1); ++i) v = fmaf(v, 0.999f, 0.001f);
    __syncthreads();
    KS_PROBE_END(p);
  }
  KS_PROBE_INSTANT(3);
  x[threadIdx.x] = v;
}
int main(int argc, char** argv) {
  const unsigned nb = 8; float* x; cudaMalloc(&x, 128 * sizeof(float)); cudaMemset(x, 0, 128 * sizeof(float));
  for (int round = 0; round < 2; ++round) {
    unsigned recs = round == 0 ? 7 : 3;   // 7 = 3 begin/end pairs + the instant; 3 = overflow
    uint64_t* buf; uint64_t slots;
    if (kernelscope::probe::alloc_buffer(nb, 1, recs, &buf, &slots) != cudaSuccess) return 3;
    k<<<nb, 128>>>(x, buf, slots, 20000);
    if (cudaDeviceSynchronize() != cudaSuccess) return 4;
    std::vector<uint64_t> h(slots);
    cudaMemcpy(h.data(), buf, slots * 8, cudaMemcpyDeviceToHost);
    FILE* f = fopen(argv[1 + round], "wb"); fwrite(h.data(), 8, slots, f); fclose(f);
  }
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_cuda_header_roundtrip_and_guard(tmp_path: Path) -> None:
    from mcp_server.timeline.decode import decode_buffer

    src = tmp_path / "small.cu"
    src.write_text(SMALL_CU)
    exe = tmp_path / "small"
    cp = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-DKERNELSCOPE_PROBE", "-I", str(INCLUDE), str(src),
                         "-o", str(exe)],
                        capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stderr
    ok, small = tmp_path / "ok.bin", tmp_path / "small.bin"
    cp = subprocess.run([str(exe), str(ok), str(small)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    d = decode_buffer(ok)
    assert (d.nblocks, d.ngroups, d.tag_layout) == (8, 1, "sm")
    assert not d.stats.overflow and d.stats.tag_mismatches == 0
    assert d.stats.unmatched_begins == d.stats.unmatched_ends == 0
    assert d.event.size == 8 * 3 and d.instant_event.size == 8
    dur = d.end - d.begin
    ph1 = d.event == 1
    slow = d.lane[ph1][np.argmax(dur[ph1])]
    assert slow == 3  # block 3 does 8x the work in phase 1
    assert (d.lane_sm >= 0).all()
    g = decode_buffer(small)
    assert g.stats.overflow  # guard set bit 63 instead of writing past the end
    assert g.stats.unmatched_begins == 8  # 3 records per writer: begin, end, begin


def test_triton_helper_records_real_kernel() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    sys.path.insert(0, str(ROOT / "tools"))
    from timeline_triton_kernel import rows_kernel

    from mcp_server.timeline.decode import decode_buffer
    from mcp_server.timeline.triton_probe import alloc_probe_buffer

    nprog, rows, n = 64, 2, 4096
    x = torch.rand(nprog * rows, n, device="cuda") + 0.5
    y = torch.empty_like(x)
    buf, cap = alloc_probe_buffer(nprog, 2 * 2 * rows + 1)
    rows_kernel[(nprog,)](x, y, n, buf, cap, ROWS=rows, BLOCK=1024, PROBE=True)
    torch.cuda.synchronize()
    ref = x / x.sum(dim=1, keepdim=True)
    assert ((y - ref).norm() / ref.norm()).item() < 1e-5
    d = decode_buffer(buf)
    assert (d.nblocks, d.ngroups) == (nprog, 1)
    assert not d.stats.overflow and d.stats.tag_mismatches == 0 and d.stats.zero_slots == 0
    assert d.event.size == nprog * rows * 2 and d.stats.unmatched_begins == 0
    assert d.instant_event.size == nprog
    assert (d.end >= d.begin).all()
    # per program: rowsum of row r ends before scale of row r begins
    for lane in range(0, nprog, 7):
        m = d.lane == lane
        order = np.argsort(d.begin[m])
        assert d.event[m][order].tolist() == [0, 1] * rows
    # overflow: too small a buffer sets the header's bit 63 through the guard
    small, cap2 = alloc_probe_buffer(nprog, 3)
    rows_kernel[(nprog,)](x, y, n, small, cap2, ROWS=rows, BLOCK=1024, PROBE=True)
    torch.cuda.synchronize()
    assert decode_buffer(small).stats.overflow
