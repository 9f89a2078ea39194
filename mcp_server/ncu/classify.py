"""Bottleneck per kernel from its counters: class, limiter, L2 residency, confidence, evidence, advice.

Stage 1 is Nsight Compute's own speed-of-light reading (SM throughput against memory
throughput, ``gpu__compute_memory_throughput`` = max of DRAM/L2/L1, not DRAM):

* the higher of the two at 80 % or more: at that roof;
* both under 60 %: latency-bound (a grid under one wave: ``small_grid``);
* otherwise a gap of 10+ points makes the higher side the class; a smaller gap is ``balanced``.

Stage 2 refines with ncu's rule thresholds: memory-bound on DRAM vs L2 vs L1 (DRAM when it
is within 10 points of the busiest level), compute-bound on the tensor pipe vs FMA vs ALU
(or issue slots), latency-bound on the grid, the occupancy limiter, the issue rate or the top
warp stall. When both sides are high but the memory side is L1/shared traffic feeding a busy
tensor pipe (a GEMM's operands), the kernel is compute-bound.

Residency: ``--cache-control all`` (ncu's default) flushes the caches before every replay
pass, so a kernel whose weights stay in L2 between launches looks DRAM-bound. ``l2_resident``
is therefore decided only for warm profiles (``--cache-control none``): true when the L2 hit
rate is 80 %+ and DRAM throughput stays under 30 %; otherwise null with a
``residency_unknown`` warning.

Nothing is invented: a missing or ``n/a`` metric lowers the confidence and is named in
``missing``; without the speed-of-light pair the class is ``unknown``.
"""
from __future__ import annotations

from typing import Optional

from mcp_server.core.gpu_specs import GpuSpec, find_gpu, gpu_spec, load_gpu_specs
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.ncu.models import (
    Bottleneck,
    Classification,
    ClassifiedKernel,
    Evidence,
    KernelProfile,
    NcuProfile,
    RooflinePoint,
    SpecValue,
)
from mcp_server.ncu.parse import parse_ncu
from mcp_server.ncu.raw import warn
from mcp_server.ncu.requests import ClassifyRequest

ROOF = 80.0          # ncu: "at the roofline" at 80 % of a peak
LOW = 60.0           # ncu: both under 60 % -> latency issues
GAP = 10.0           # ncu: a 10-point gap makes one side dominant
PIPE_HIGH = 60.0     # ncu HighPipeUtilization rule
ISSUE_HIGH = 80.0    # issue slots busy
OCC_GAP = 0.5        # achieved under half of theoretical occupancy
OCC_LOW = 50.0       # theoretical occupancy under 50 %
L2_HIT_RESIDENT = 80.0
DRAM_RESIDENT_MAX = 30.0
LEVEL_MARGIN = 10.0
LAUNCH_SCALE_NS = 10_000.0  # a launch this short is comparable to launch overhead


def _pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


class _Verdict:
    def __init__(self) -> None:
        self.evidence: list[Evidence] = []
        self.advice: list[str] = []
        self.missing: list[str] = []
        self.penalty = 0.0

    def ev(self, metric: str, value: Optional[float], threshold: Optional[float], reads: str) -> None:
        self.evidence.append(Evidence(metric=metric, value=value, threshold=threshold, reads=reads))

    def need(self, m: dict, name: str) -> Optional[float]:
        v = m.get(name)
        if v is None and name not in self.missing:
            self.missing.append(name)
            self.penalty += 0.1
        return v


def _memory_level(m: dict, v: _Verdict) -> Optional[str]:
    levels = {"dram": v.need(m, "dram_throughput_pct"), "l2": v.need(m, "l2_throughput_pct"),
              "l1": v.need(m, "l1_throughput_pct")}
    known = {k: x for k, x in levels.items() if x is not None}
    if not known:
        return None
    top = max(known.values())
    for lvl in ("dram", "l2", "l1"):  # the farthest level within the margin of the busiest wins
        if lvl in known and known[lvl] >= top - LEVEL_MARGIN:
            v.ev(f"{lvl}_throughput_pct", known[lvl], top - LEVEL_MARGIN,
                 f"{lvl.upper()} throughput {_pct(known[lvl])} is within {LEVEL_MARGIN:.0f} points of the "
                 f"busiest memory level ({_pct(top)})")
            return lvl
    return None


def _compute_pipe(m: dict, v: _Verdict) -> Optional[str]:
    pipes = {k: v.need(m, f"{k}_pipe_pct") for k in ("tensor", "fma", "alu")}
    known = {k: x for k, x in pipes.items() if x is not None}
    if known:
        top_pipe, top = max(known.items(), key=lambda t: t[1])
        if top >= PIPE_HIGH:
            v.ev(f"{top_pipe}_pipe_pct", top, PIPE_HIGH, f"{top_pipe} pipe {_pct(top)} busy (ncu flags pipes over "
                                                           f"{PIPE_HIGH:.0f}%)")
            return top_pipe
    issue = m.get("issue_active_pct")
    if issue is not None and issue >= ISSUE_HIGH:
        v.ev("issue_active_pct", issue, ISSUE_HIGH, f"issue slots {_pct(issue)} busy: instruction-issue bound")
        return "issue"
    if known:  # top_pipe, top: the busiest pipe found above
        v.ev(f"{top_pipe}_pipe_pct", top, PIPE_HIGH, f"busiest pipe {top_pipe} at {_pct(top)}, under the "
                                                       f"{PIPE_HIGH:.0f}% rule threshold")
        v.penalty += 0.15
        return top_pipe
    return None


def _occupancy(k: KernelProfile, v: _Verdict) -> Optional[str]:
    m = k.metrics
    ach, theo = m.get("achieved_occupancy_pct"), m.get("theoretical_occupancy_pct")
    if theo is not None and theo < OCC_LOW:
        lim = k.occupancy_limiter or "unknown"
        v.ev("theoretical_occupancy_pct", theo, OCC_LOW,
             f"theoretical occupancy {_pct(theo)}, limited by {lim}"
             + (f" ({k.registers_per_thread:.0f} registers/thread)"
                if lim == "registers" and k.registers_per_thread else ""))
        return lim
    if ach is not None and theo and ach < OCC_GAP * theo:
        v.ev("achieved_occupancy_pct", ach, OCC_GAP * theo,
             f"achieved occupancy {_pct(ach)} is under half the theoretical {_pct(theo)} (imbalance or tail)")
        return "achieved"
    return None


def _small_grid(k: KernelProfile, v: _Verdict, sm_count: Optional[int]) -> bool:
    waves = k.metrics.get("waves_per_sm")
    grid = k.metrics.get("grid_size")
    sms = k.metrics.get("sm_count") or sm_count
    if grid is not None and sms and grid < sms:
        v.ev("grid_size", grid, float(sms), f"{grid:.0f} blocks on {sms:.0f} SMs: the grid does not fill the GPU")
        return True
    if waves is not None and waves < 1.0 and waves != 0.0:
        if grid is not None and sms and grid >= sms:
            # every SM has blocks: under one wave only because an SM could hold more (a persistent grid of
            # N blocks per SM, or a grid sized to the SMs), which is an occupancy question, not a small grid
            v.ev("waves_per_sm", waves, 1.0,
                 f"{waves:.2f} waves per SM, but the {grid:.0f} blocks reach all {sms:.0f} SMs "
                 f"({grid / sms:.1f} per SM: a persistent-style grid, not a small one)")
            return False
        v.ev("waves_per_sm", waves, 1.0, f"{waves:.2f} waves per SM: under one wave")
        return True
    if waves == 0.0 and grid is not None and grid <= 1:
        v.ev("waves_per_sm", waves, 1.0, "a single block: under one wave")
        return True
    return False


def _residency(k: KernelProfile, cache_control: Optional[str], v: _Verdict) -> Optional[bool]:
    if cache_control != "none":
        return None
    hit, dram = k.metrics.get("l2_hit_rate_pct"), k.metrics.get("dram_throughput_pct")
    if hit is None:
        v.missing.append("l2_hit_rate_pct")
        return None
    resident = hit >= L2_HIT_RESIDENT and (dram is None or dram < DRAM_RESIDENT_MAX)
    v.ev("l2_hit_rate_pct", hit, L2_HIT_RESIDENT,
         f"warm profile (cache-control none): L2 hit rate {_pct(hit)}, DRAM {_pct(dram)}: "
         + ("data stays L2-resident between launches" if resident else "data is not L2-resident"))
    return resident


def classify_kernel(k: KernelProfile, cache_control: Optional[str] = None,
                    spec: Optional[GpuSpec] = None) -> Bottleneck:
    m = k.metrics
    v = _Verdict()
    resident = _residency(k, cache_control, v)
    sm, mem = v.need(m, "sm_throughput_pct"), v.need(m, "memory_throughput_pct")
    if sm is None or mem is None:  # no class: the confidence is 0 whatever the penalty
        v.advice.append("collect the SpeedOfLight section (kernelscope ncu run does by default); "
                        "without it no class is given")
        return Bottleneck(class_="unknown", limiter=None, l2_resident=resident, confidence=0.0,
                          evidence=v.evidence, advice=v.advice, missing=v.missing)
    v.ev("sm_throughput_pct", sm, ROOF, f"SM (compute) throughput {_pct(sm)} of peak")
    v.ev("memory_throughput_pct", mem, ROOF, f"memory throughput {_pct(mem)} of peak (max of DRAM, L2, L1)")
    top = max(sm, mem)
    gap = abs(sm - mem)
    margin = abs(top - LOW) if top < LOW else min(abs(top - LOW), abs(gap - GAP))
    cls: str
    limiter: Optional[str]
    if top < LOW:
        cls = "latency_bound"
        issue = m.get("issue_active_pct")
        if _small_grid(k, v, spec.sm_count if spec else None):
            limiter = "small_grid"
        elif _occupancy(k, v) is not None:
            limiter = "occupancy"
        elif issue is not None and issue >= ISSUE_HIGH:
            v.ev("issue_active_pct", issue, ISSUE_HIGH, f"issue slots {_pct(issue)} busy")
            limiter = "issue"
        else:
            limiter = "latency"
        if k.top_stalls:
            r, c = k.top_stalls[0]
            v.ev(f"stall_{r}", c, None,
                 f"top warp stall: {r.replace('_', ' ')} ({c:.1f} cycles per issued instruction)")
        v.ev("max_throughput_pct", top, LOW, f"both compute and memory under {LOW:.0f}% of peak: latency-bound")
        med = k.duration_ns.median
        if med and med < LAUNCH_SCALE_NS:
            v.ev("duration_ns", med, LAUNCH_SCALE_NS, f"{med / 1e3:.1f} us per launch: the scale of launch "
                                                      "overhead; fusion or CUDA graphs remove whole launches")
    else:
        l1_feeds_tensor = (mem >= sm and (m.get("tensor_pipe_pct") or 0) >= PIPE_HIGH
                           and max(m.get("dram_throughput_pct") or 0, m.get("l2_throughput_pct") or 0) < ROOF)
        if sm - mem >= GAP or l1_feeds_tensor:
            cls = "compute_bound"
            if l1_feeds_tensor and sm - mem < GAP:
                v.ev("l1_throughput_pct", m.get("l1_throughput_pct"), None,
                     "the memory side is L1/shared traffic feeding the tensor pipe (operand loads), "
                     "DRAM and L2 stay under the roof")
            limiter = _compute_pipe(m, v)
        elif mem - sm >= GAP:
            cls = "memory_bound"
            limiter = _memory_level(m, v)
        else:
            cls = "balanced"
            pipe = _compute_pipe(m, v)
            level = _memory_level(m, v)
            limiter = pipe if (sm >= mem and pipe) else (level or pipe)
            v.ev("throughput_gap", abs(sm - mem), GAP, f"compute and memory within {GAP:.0f} points of each other")
        if top >= ROOF:
            v.ev("max_throughput_pct", top, ROOF, f"{_pct(top)} of a peak: at the roofline")
        else:
            _occ = _occupancy(k, v)
            if _occ is not None:
                v.advice.append(f"occupancy is limited ({_occ}); more warps in flight may reach the roof")
    _advise(cls, limiter, resident, k, m, v, sm, mem)
    conf = 0.9 - v.penalty - (0.2 if margin < 5 else 0.0)
    return Bottleneck(class_=cls, limiter=limiter, l2_resident=resident,
                      confidence=round(max(0.05, min(0.95, conf)), 2),
                      evidence=v.evidence, advice=v.advice, missing=v.missing)


def _advise(cls: str, limiter: Optional[str], resident: Optional[bool], k: KernelProfile, m: dict,
            v: _Verdict, sm: float, mem: float) -> None:
    a = v.advice
    if cls == "compute_bound":
        if limiter == "tensor":
            a.append("at the tensor-core roof: only less math helps (a faster format such as FP8 matrix math, "
                     "no padded rows/tiles); memory tuning and weight-only quantization do not")
        elif limiter == "fma":
            a.append("FMA pipe saturated: move the math onto tensor cores (tl.dot / mma) or cut FP32 instructions")
        elif limiter == "alu":
            a.append("ALU (integer/logic) pipe saturated: cut index math, unpacking and conversions per element")
        elif limiter == "issue":
            a.append("instruction-issue bound: fewer instructions per byte (vector loads, unpack several values "
                     "per instruction, hoist address math)")
        a.append("weight quantization saves bytes that are not the bottleneck here")
    elif cls == "memory_bound":
        if limiter == "dram":
            a.append("HBM bytes are the bottleneck: move fewer bytes (weight quantization, fusing producer and "
                     "consumer, no re-reads)" + ("" if (m.get("dram_throughput_pct") or 0) >= ROOF else
                                                 "; or keep more loads in flight to reach the DRAM roof"))
        elif limiter == "l2":
            a.append("L2 bandwidth: improve reuse in shared memory/registers (larger tiles, swizzled block order); "
                     "DRAM-byte savings such as quantization help little")
        elif limiter == "l1":
            a.append("L1/shared-memory bound: check bank conflicts and uncoalesced accesses; widen loads")
    elif cls == "latency_bound":
        if limiter == "small_grid":
            a.append("the grid does not fill the GPU: fuse with neighbouring kernels, batch more work per launch, "
                     "split-K/stream-K, or capture in a CUDA graph to cut launch overhead")
        elif limiter == "occupancy":
            lim = k.occupancy_limiter
            a.append(f"occupancy limited by {lim}: " + {
                "registers": "cap registers (launch bounds, fewer live values)",
                "shared_mem": "smaller shared-memory tiles or fewer stages",
                "warps": "a different block size",
                "blocks": "larger blocks (fewer, fuller)",
            }.get(lim or "", "see the Occupancy section") + "; or more independent work per warp")
        elif limiter == "issue":
            a.append("issue-bound at low throughput: cut instruction count")
        else:
            r = k.top_stalls[0][0] if k.top_stalls else None
            a.append("stalls dominate" + (f" ({r.replace('_', ' ')})" if r else "")
                     + ": more independent work per warp, prefetch, or fewer dependent loads")
    elif cls == "balanced":
        a.append("compute and memory are both busy: gains need less work on both sides (fusion, lower precision)")
    memory_side = cls == "memory_bound" or (cls in ("latency_bound", "balanced") and mem > sm)
    if resident and memory_side:
        a.append("weights stay L2-resident between launches: quantizing them saves DRAM bytes that are not the "
                 "bottleneck; do not quantize; fuse with neighbours or batch instead")


def roofline_point(k: KernelProfile, spec: Optional[GpuSpec]) -> Optional[RooflinePoint]:
    if spec is None or not k.flops or not k.dram_bytes or not k.duration_ns.mean:
        return None
    tensor = k.metrics.get("tensor_ops_bf16") or 0.0
    key = "bf16_tflops" if tensor > k.flops / 2 else "fp32_tflops"
    peak_c, bw_c = spec.ceiling(key), spec.ceiling("hbm_tb_s")
    if peak_c is None or bw_c is None:
        return None
    peak, bw = peak_c.value * 1e12, bw_c.value * 1e12
    ai = k.flops / k.dram_bytes
    achieved = k.flops / (k.duration_ns.mean * 1e-9)
    roof = min(peak, ai * bw)
    return RooflinePoint(arithmetic_intensity=ai, flops_per_s=achieved, roof_flops_per_s=roof,
                         fraction_of_roof=achieved / roof if roof else 0.0, peak=key,
                         memory_bound_side=ai * bw < peak,
                         sources={key: peak_c.source, "hbm_tb_s": bw_c.source})


def _spec_summary(spec: Optional[GpuSpec]) -> Optional[dict[str, SpecValue]]:
    if spec is None:
        return None
    out: dict[str, SpecValue] = {}
    for key in ("hbm_tb_s", "bf16_tflops", "fp32_tflops", "l2_mb", "sm_count"):
        c = spec.ceiling(key)
        if c is not None:
            out[key] = SpecValue(value=c.value, source="measured" if c.source == "measured" else "datasheet")
    return out


def resolve_gpu(gpu: Optional[str], device: Optional[str],
                warnings: list[Warning_]) -> tuple[Optional[str], Optional[GpuSpec]]:
    specs = load_gpu_specs()
    name = gpu or device
    spec = find_gpu(name, specs) if name else None
    if spec is None:
        if gpu:
            gpu_spec(gpu)  # raises the typed error naming the known GPUs
        warnings.append(warn("gpu_unknown", f"device {device!r} is not in gpu_specs.toml: no roofline ceilings"
                              if device else "no GPU named and none recorded in the profile: no roofline ceilings"))
        return None, None
    return spec.key, spec


def classify_profile(profile: NcuProfile, gpu: Optional[str] = None) -> Classification:
    warnings = list(profile.warnings)
    key, spec = resolve_gpu(gpu, profile.source.device, warnings)
    cc = profile.source.cache_control
    if cc != "none":
        warnings.append(warn("residency_unknown", (
            "profile collected with --cache-control all (caches flushed before every pass): "
            "L2 residency cannot be judged and L2-resident kernels look DRAM-bound; profile with "
            "--cache-control none" if cc == "all" else
            "cache control of this profile is unknown (no sidecar, no flag): pass cache_control, "
            "or profile with --cache-control none to judge L2 residency")))
    total = profile.total_duration_ns or 0.0
    out: list[ClassifiedKernel] = []
    for k in profile.kernels:
        b = classify_kernel(k, cc, spec)
        out.append(ClassifiedKernel(**k.model_dump(), bottleneck=b, roofline=roofline_point(k, spec),
                                    time_share=(k.duration_ns.total / total) if total else 0.0))
    n_unknown = sum(1 for k in out if k.bottleneck.class_ == "unknown")
    if n_unknown:
        warnings.append(warn("metric_missing", f"{n_unknown} kernel(s) classed unknown: speed-of-light "
                              "metrics absent or n/a", n_unknown))
    return Classification(source=profile.source, gpu=key, gpu_spec=_spec_summary(spec),
                          total_duration_ns=total, kernels=out, unrecognized_metrics=profile.unrecognized_metrics,
                          warnings=warnings)


@engine(ClassifyRequest)
def classify_bottleneck(req: ClassifyRequest) -> Classification:
    """Classify every kernel of an ncu report or CSV."""
    return classify_profile(parse_ncu(req.path, cache_control=req.cache_control), gpu=req.gpu)
