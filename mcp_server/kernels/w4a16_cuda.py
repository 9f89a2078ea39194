"""INT4 W4A16 (and FP8 W8A16) BMM in CUDA C++, compiled at run time by NVRTC: ``variant="cuda"`` of
``w4a16_launch`` and ``w8a16_launch``.

Why a second implementation of the same product (docs/kernels.md, "the CUDA kernel"): the Triton kernels
load the packed words straight into the register layout of the dot (4-byte loads in the wgmma tiles) and
run at register-limited occupancy; on the stacked MLA BMMs they stream the packed weights at 2.0-2.8 TB/s.
Here every thread issues 8-byte loads for all of its weights at once, before anything else, and the
unpacked words feed ``mma.sync`` directly as the left operand, with no shared-memory round trip:

* **Swap A/B.** ``out^T = W^T x^T`` with ``mma.sync.m16n8k16`` (bf16 in, fp32 accumulate): 16 weight
  rows (output columns n) are the MMA's M side, the decode batch (8 per m-tile) its N side.
* **The packed layout is already the MMA's.** In ``quant.pack_int4``'s layout, nibble j of word i of a
  128-k block holds k = 16 j + i, and the A fragment of thread (g = lane / 4, t = lane % 4) holds rows
  g and g + 8 at k = 2t, 2t + 1, 2t + 8, 2t + 9 of a 16-k chunk: words 2t, 2t + 1, 2t + 8, 2t + 9 of the
  row, nibble j for chunk j. Two 8-byte loads per row and block give a thread its operands for all
  eight chunks of the block.
* **Unpack** as the Triton kernel's inline asm: ``prmt`` pairs two words' halves, then per chunk one
  shift, one ``lop3`` (two codes into the mantissas of bf16 128 + q) and one ``fma.rn.bf16x2``
  (subtract 128 + z: exact, so zero points cost nothing per weight).
* **Scales** multiply the fp32 partial sums once per group (exact weights, as the reference).
* **Activations** are staged in shared memory once per program (16-byte rows padded so ``ldmatrix`` is
  conflict-free) while the weight loads are in flight.
* **Split-K** (``SPLIT`` > 1, for an ordinary Linear layer whose N alone cannot fill the GPU): the
  programs of a tile store fp32 partials to the workspace shared with the Triton split-K kernels and
  the last to arrive sums them in a fixed order (deterministic), as ``splitk.py`` describes.
* **Persistent grid** (``PROGS`` programs per SM, no split-K): each program loops over heads and loads
  the next head's weights and activations into registers while it multiplies the current one's.
* **FP8 form** (``Fp8Weights``, shuffled layout, per-channel scales): 64-k blocks of 16 words, byte j of
  words 2t, 2t + 1, 2t + 8, 2t + 9 is chunk j; ``cvt.rn.f16x2.e4m3x2`` and f16 MMAs, the activations
  converted to f16 when staged, as the Triton W8A16 kernel does.
* **Streaming form** (``STAGES`` set; sm_90, INT4 and FP8): a persistent grid of ``CPS`` programs per SM,
  each one producer warp and ``WARPS`` consumer warps around a ring of ``STAGES`` shared-memory slots. A
  work unit is one head's 16*NT*WARPS rows over all of K (packed words, scales, zero points, the head's
  activation rows); the producer copies it into a free slot with ``cp.async.bulk`` (a few large copies:
  the copy engine's issue rate, not DRAM, limited one copy per row, ``PADW``), the slot's mbarrier counts
  the bytes, the consumers load their words out of it into the same registers as above, multiply, free the
  slot and store. ``DYN``: units past the first wave are claimed from a counter in the split-K workspace
  (the last program resets it), so a program that streams faster takes more; ``EVF`` marks the weights
  evict-first in L2; ``XONE`` copies a head's activations in one piece (rows unpadded), ``XCA`` in 16-byte
  ``cp.async`` pieces from all 32 producer lanes into the padded rows (their arrivals counted on the same
  mbarrier), instead of one bulk copy per row (measured slower at M = 64: 68.9 vs 39.7 us for INT4 W_UV,
  bench/RESULTS.md, "fifth round"). ``STAG``: the producer copies a program's second unit only once its
  first has landed, so the slots do not fill and land together (measured 0.7-3.4 % slower, "fifth round").
  The weight stream
  then never waits for a unit's multiplies, which the one-pass grid's latency-bound waves did.
* **Unpack options** (INT4, every form): the unpack's ``prmt``, shift and ``lop3`` all issue to the ALU pipe
  (16 lanes: two cycles a warp instruction), two per MMA register, while the FMA pipes take only the
  ``fma.rn.bf16x2``. ``MHI`` does the shifts as ``mul.hi.u32`` by 2^(32 - s), an IMAD on the FMA-heavy pipe
  (a zero read from a kernel argument keeps ptxas from turning it back into a shift). ``SXC`` drops the
  ``fma.rn.bf16x2``: the weights enter the MMA as 128 + q and each group's (128 + z) * sum(x) comes off the
  fp32 partial sums, the column sums of x from one more MMA per 16-k chunk and m-tile with an all-ones left
  operand ((128 + q) * x is exact in fp32; the offset costs a few bits of the fp32 sum, not of the result's
  bf16). Measured (bench/RESULTS.md, "sixth round"): ``MHI`` 0-18 % slower, ``SXC`` within the run-to-run
  spread; neither recorded.
* **Slot options** (the INT4 streaming form): ``ERL`` reads x's fragments, the scales and the zero points
  into registers with the words and frees the slot before the multiply (groups of 128 and more; smaller
  groups run without it). ``CG`` runs CG consumer groups of ``WARPS`` warps, group g taking the units of
  slots g, g + CG, ... (CG divides ``STAGES``), so units that land together are multiplied together; the
  producer puts the end mark in every group's next slot. Measured: ``ERL`` level, ``CG`` 1-9 % slower; neither
  recorded.

Config keys (``tuning``): ``NT`` 16-row tiles per warp, ``MT`` 8-row m-tiles per program (from M when
absent), ``KB`` K blocks per warp (128 k for INT4, 64 for FP8; K = KB * block * KWARP * SPLIT),
``WARPS``, ``KWARP`` (warps that split a program's K slice, summed through shared memory in a fixed
order), ``SPLIT``, ``PROGS``, ``MINB`` (``__launch_bounds__`` minimum programs per SM; 0 = none); the
streaming form's ``STAGES``, ``CPS``, ``DYN``, ``EVF``, ``PADW``, ``XONE``, ``XCA``, ``SWZ``, ``STAG``; the
unpack's ``MHI`` and ``SXC`` and the slot's ``ERL`` (INT4, 0 or 1) and ``CG`` (consumer groups);
``PROBE`` (measurement only, its output is garbage: 1 launches the streaming grid and returns, 2 copies every
unit and multiplies nothing; 3 is the full kernel recording its units' phases into ``probe_buf``, ``PCAP``
int64 slots, in the timeline probe format, ``tools/stream_timeline_h200.py``). INT4 groups 32, 64 and
multiples of 128, FP8 per-channel scales; anything else, or a torch without NVRTC kernel compilation, raises
``CudaKernelUnavailable``, and the launchers run the config's Triton ``fallback`` (``try_launch``).
"""
from __future__ import annotations

from pathlib import Path

from mcp_server.kernels.quant import PACK_K, Int4Weights


def source() -> str:
    """The kernel's CUDA C++ (``cuda/w4a16_mma.cu``, package data), read once."""
    global _SOURCE
    if _SOURCE is None:
        _SOURCE = (Path(__file__).resolve().parent / "cuda" / "w4a16_mma.cu").read_text()
    return _SOURCE


_SOURCE: str | None = None

def supports_group(group: int) -> bool:
    """Whether the INT4 form handles this group (a scale step is 2+ chunks of 16 k and divides the 128-k block)."""
    return group in (32, 64) or (group >= PACK_K and group % PACK_K == 0)


class CudaKernelUnavailable(RuntimeError):
    """The CUDA kernel cannot run here (no NVRTC kernel compilation in this torch, or a shape or group
    it does not handle): the caller runs the Triton fallback."""


def macros(cfg: dict, M: int, group: int, zero_point: bool, fp8: bool = False) -> dict[str, int]:
    """The compile-time parameters of one config (MT from M when the config leaves it out). The FP8 form
    has per-channel scales; GROUP is then a placeholder the INT4 code path needs to parse."""
    mt = int(cfg.get("MT") or min(8, -(-M // 8)))
    return {"NT": int(cfg.get("NT", 1)), "MT": mt, "KB": int(cfg.get("KB", 1)), "GROUP": PACK_K if fp8 else group,
            "ZP": int(zero_point), "WARPS": int(cfg.get("WARPS", 4)), "SPLIT": int(cfg.get("SPLIT", 1)),
            "MINB": int(cfg.get("MINB", 0)), "KWARP": int(cfg.get("KWARP", 1)), "PF": int(bool(cfg.get("PROGS"))),
            "FP8": int(fp8), "STREAM": int(bool(cfg.get("STAGES"))), "STAGES": int(cfg.get("STAGES", 0)),
            **{k: int(cfg.get(k, 0)) for k in ("PADW", "EVF", "DYN", "XONE", "XCA", "SWZ", "STAG", "PROBE", "PCAP",
                                                 "MHI", "SXC", "CG")},
            # early release: the INT4 streaming form with groups of 128+ (smaller groups: too many scales to hold)
            "ERL": int(bool(cfg.get("ERL")) and bool(cfg.get("STAGES")) and not fp8 and group >= PACK_K)}


def _a128(b: int) -> int:
    return -(-b // 128) * 128


def stream_plan(mc: dict, cfg: dict, H: int, M: int, K: int, N: int, group: int, sms: int) -> tuple:
    """The streaming form's launch (``STAGES`` set): a persistent grid of ``CPS`` programs per SM (default 1),
    each a producer warp and ``WARPS`` consumer warps over a ring of ``STAGES`` slots, one work unit (a head's
    16*NT*WARPS rows, all of K) per slot. The slot layout is the kernel's (``SLOT``): words (rows padded by
    ``PADW`` words when set), scales, zero points, activations (8*MT rows of K + 8)."""
    if mc["SPLIT"] != 1 or mc["KWARP"] != 1 or mc["PF"]:
        raise CudaKernelUnavailable("the streaming form (STAGES) takes no SPLIT, KWARP or PROGS")
    bk = 64 if mc["FP8"] else PACK_K
    if K != bk * mc["KB"]:
        raise CudaKernelUnavailable(f"K={K} != KB*{bk}={bk * mc['KB']} (a unit holds all of K)")
    if not mc["FP8"] and (group > K or K % group):
        raise CudaKernelUnavailable(f"group={group} does not divide K={K}")
    if M > 8 * mc["MT"]:
        raise CudaKernelUnavailable(f"M={M} > 8*MT={8 * mc['MT']} (a unit holds all of M)")
    if mc["XCA"] and mc["XONE"]:
        raise CudaKernelUnavailable("XCA and XONE are two ways to copy x: set one")
    if mc["PADW"] % 4:
        raise CudaKernelUnavailable(f"PADW={mc['PADW']} is not a multiple of 4 words (16-byte rows)")
    groups = max(1, mc["CG"])
    if mc["STAGES"] % groups:
        raise CudaKernelUnavailable(f"CG={groups} consumer groups do not divide STAGES={mc['STAGES']} slots")
    rows = 16 * mc["NT"] * mc["WARPS"]
    kw = mc["KB"] * 16
    scales = rows * 4 if mc["FP8"] else K // group * rows * 2        # per-channel fp32, or bf16 per group
    slot = (_a128(rows * (kw + mc["PADW"]) * 4) + _a128(scales) * (1 + mc["ZP"])
            + _a128(8 * mc["MT"] * (K + (0 if mc["XONE"] else 8)) * 2))
    smem = _a128(16 * mc["STAGES"]) + mc["STAGES"] * slot
    if smem > 226 * 1024:       # 227 KiB a block on sm_90, less the kernel's static shared memory (under 1 KiB)
        raise CudaKernelUnavailable(f"{mc['STAGES']} slots of {slot} bytes exceed 226 KiB of shared memory")
    units = H * (N // rows)
    return mc, (min(units, int(cfg.get("CPS", 1)) * sms), 1, 1), 32 * (mc["WARPS"] * groups + 1), smem


def plan(cfg: dict, H: int, M: int, K: int, N: int, group: int, zero_point: bool,
         sms: int = 132, fp8: bool = False) -> tuple[dict, tuple, int, int]:
    """(macros, grid, threads, shared bytes) of a launch, or ``CudaKernelUnavailable`` naming why not.
    ``PROGS`` (programs per SM) makes the grid persistent over heads, each program prefetching its next head.
    ``fp8``: the e4m3 form (shuffled layout, 64-k blocks, per-channel scales: ``group`` 0)."""
    mc = macros(cfg, M, group, zero_point, fp8)
    if fp8 and group:
        raise CudaKernelUnavailable(f"group={group}: the CUDA FP8 form handles per-channel scales (group 0)")
    if not fp8 and not supports_group(group):
        raise CudaKernelUnavailable(f"group={group}: the CUDA kernel handles 32, 64 and multiples of 128")
    rows = 16 * mc["NT"] * mc["WARPS"]
    if N % rows:
        raise CudaKernelUnavailable(f"N={N} is not a multiple of 16*NT*WARPS={rows}")
    if mc["STREAM"]:
        return stream_plan(mc, cfg, H, M, K, N, group, sms)
    bk = 64 if fp8 else PACK_K
    kc = bk * mc["KB"] * mc["KWARP"]
    if K != kc * mc["SPLIT"]:
        raise CudaKernelUnavailable(f"K={K} != KB*{bk}*KWARP*SPLIT={kc * mc['SPLIT']}")
    m_progs = -(-M // (8 * mc["MT"]))
    heads = H
    if mc["PF"]:
        if mc["SPLIT"] > 1:
            raise CudaKernelUnavailable("PROGS (a persistent grid) and SPLIT > 1 do not combine")
        heads = min(H, max(1, int(cfg["PROGS"]) * sms // ((N // rows) * m_progs)))
    grid = ((N // rows) * m_progs, heads, mc["SPLIT"])
    warps = mc["WARPS"] * mc["KWARP"]
    red = (mc["KWARP"] - 1) * mc["WARPS"] * mc["NT"] * mc["MT"] * 4 * 32 * 4
    return mc, grid, 32 * warps, 8 * mc["MT"] * (kc + 8) * 2 + red


_KERNELS: dict = {}
_SMEM_SET: dict[int, int] = {}       # id(kernel) -> the dynamic shared memory it was configured for (kernels live on)


def compiled(mc: dict):
    """The NVRTC-compiled kernel for these macros, on the current device (a loaded module belongs to one
    device's context: cached per process and device)."""
    import torch

    dev = torch.cuda.current_device()
    key = (dev, tuple(sorted(mc.items())))
    if key not in _KERNELS:
        cap = torch.cuda.get_device_capability(dev)
        compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
        if compile_kernel is None or cap < (8, 0):
            raise CudaKernelUnavailable(
                "this torch cannot compile CUDA kernels at run time (torch.cuda._compile_kernel, NVRTC)"
                if compile_kernel is None else f"compute capability {cap} < 8.0 (no bf16 mma.sync)")
        if mc.get("STREAM") and cap < (9, 0):
            raise CudaKernelUnavailable(f"compute capability {cap} < 9.0 (the streaming form needs cp.async.bulk)")
        opts = [f"-D{k}={v}" for k, v in sorted(mc.items())] + ["-std=c++17"]
        if mc.get("PROBE") == 3:        # the timeline probes' header
            opts.append(f"-I{Path(__file__).resolve().parent.parent / 'timeline' / 'include'}")
        try:
            _KERNELS[key] = compile_kernel(source(), "w4a16_mma", nvcc_options=opts)
        except (RuntimeError, OSError) as exc:      # no NVRTC library, no CUDA include path
            raise CudaKernelUnavailable(f"NVRTC could not build the kernel: {str(exc)[:400]}") from exc
    return _KERNELS[key]


def launch(x, w, out, cfg: dict):
    """Run the CUDA kernel: ``x[H, M, K]`` bf16 (contiguous) times ``w`` (``Int4Weights``, or ``Fp8Weights`` in
    the shuffled layout) into ``out[H, M, N]``. Returns (kernel, out); ``CudaKernelUnavailable`` when it cannot
    run this shape here."""
    import torch

    from mcp_server.kernels.launch import sm_count
    from mcp_server.kernels.splitk import workspace

    H, M, K = x.shape
    fp8 = not isinstance(w, Int4Weights)
    if fp8:
        if w.layout != "shuffled":
            raise CudaKernelUnavailable("the CUDA FP8 form reads the shuffled layout")
        words, scales, zeros = w.weight.view(torch.int32), w.scales, w.scales
    else:
        words, scales = w.qweight, w.scales
        zeros = w.zeros if w.zeros is not None else w.scales
    if x.data_ptr() % 16 or words.data_ptr() % 16:
        raise CudaKernelUnavailable("x and the packed weights must be 16-byte aligned")
    mc, grid, threads, smem = plan(cfg, H, M, K, w.N, w.group, not fp8 and w.zeros is not None,
                                   sm_count(x.device), fp8)
    if mc["STREAM"] and (scales.data_ptr() % 16 or zeros.data_ptr() % 16):   # bulk copies: 16-byte sources
        raise CudaKernelUnavailable("the streaming form copies the scales in bulk: they must be 16-byte aligned")
    if (x.device.index or 0) != torch.cuda.current_device():     # the module and stream are the current device's
        raise CudaKernelUnavailable(f"x is on {x.device}, not the current CUDA device")
    kernel = compiled(mc)
    if smem >= 48 * 1024 and _SMEM_SET.get(id(kernel), 0) < smem:
        # once per kernel and size (a driver call: not on every launch)
        kernel.set_shared_memory_config(smem)
        _SMEM_SET[id(kernel)] = smem
    ws, cnt = workspace(x.device, H * mc["SPLIT"] * M * w.N if mc["SPLIT"] > 1 else 1, max(2, H * grid[0]))
    if mc["PROBE"] == 3:        # the timeline probe buffer takes the place of the (unused) split-K partials
        ws = probe_buffer(cfg, mc, x.device)
    kernel(grid=grid, block=(threads, 1, 1), args=[words, scales, zeros, x, out, ws, cnt, M, K, w.N, H],
           shared_mem=smem)
    return kernel, out


def probe_buffer(cfg: dict, mc: dict, device):
    """``cfg["probe_buf"]``: an int64 tensor of ``PCAP`` slots on ``device`` (the streaming form's ``PROBE`` 3)."""
    buf = cfg.get("probe_buf")
    if not mc["STREAM"] or buf is None or buf.device != device or buf.numel() != mc["PCAP"] or buf.element_size() != 8:
        raise CudaKernelUnavailable("PROBE = 3 (the streaming form's timeline probes) needs probe_buf: an int64 "
                                    "tensor of PCAP slots on the input's device")
    return buf


def try_launch(x, w, out, cfg: dict):
    """``launch`` where it can run; else, when ``cfg`` names a ``fallback`` config, None after a warning (once
    per reason), and the caller runs the fallback; without one the ``CudaKernelUnavailable`` propagates."""
    from mcp_server.kernels.launch import interpreting

    try:
        if x.device.type != "cuda" or interpreting():
            raise CudaKernelUnavailable("not on a CUDA device")
        return launch(x, w, out, cfg)
    except CudaKernelUnavailable as exc:
        if not cfg.get("fallback"):
            raise
        warn_fallback(exc)
        return None


_WARNED: set = set()


def warn_fallback(exc: Exception) -> None:
    """Once per reason: the CUDA kernel could not run and the Triton fallback config ran instead."""
    why = str(exc)
    if why not in _WARNED:
        _WARNED.add(why)
        import warnings

        warnings.warn(f"kernelscope INT4/FP8 BMM: the CUDA kernel cannot run ({why}); running its Triton "
                      "fallback config", RuntimeWarning, stacklevel=3)


_USABLE: dict = {}


def usable(fp8: bool = False, stream: bool = False) -> bool:
    """Whether the CUDA kernel (its FP8 form with ``fp8``: ``cvt.rn.f16x2.e4m3x2`` needs sm_89; its streaming
    form with ``stream``: sm_90) builds on the current device (capability 8.0+, NVRTC through torch); the answer
    of one trial build, cached per device."""
    import torch

    if not torch.cuda.is_available():
        return False
    key = (torch.cuda.current_device(), fp8, stream)
    if key not in _USABLE:
        try:
            compiled(macros({"STAGES": 2} if stream else {}, 1, 0 if fp8 else PACK_K, False, fp8))
            _USABLE[key] = True
        except CudaKernelUnavailable:
            _USABLE[key] = False
    return _USABLE[key]


def resolve(cfg: dict, fp8: bool = False) -> dict:
    """The config that will run: ``cfg``, or its Triton fallback where the CUDA kernel does not build here."""
    if cfg.get("variant") == "cuda" and cfg.get("fallback") and not usable(fp8, bool(cfg.get("STAGES"))):
        return dict(cfg["fallback"])
    return cfg
