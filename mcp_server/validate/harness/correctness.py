"""Correctness: the candidate against a higher-precision reference on fresh random inputs, shape by shape.

For every shape and seed: fresh inputs (checked random; the second seed is copied into the first seed's
tensors, so a result cached by pointer shows), the baseline's output and a higher-precision reference from
clones, freed memory poisoned with NaN bytes, then the candidate: inputs unchanged, outputs complete on the
current stream, structure, shape, dtype, device, layout, finite, and values within atol + rtol*|ref|.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from mcp_server.validate.harness.base import Base, Fatal
from mcp_server.validate.harness.tensors import bitwise_equal, compare, copy_into, meta, shape_str, tensors


@dataclass
class _FirstSeed:
    """A shape's first seed: its inputs (the second seed reuses their addresses), their values, its outputs."""

    args: Any = None
    vals: Any = None
    outs: Any = None
    io_bytes: int | None = None


@dataclass
class _Errors:
    """The largest errors over every output, and the worst elements."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    worst: list[dict] = field(default_factory=list)


class Correctness(Base):
    def correctness(self) -> None:
        shapes = self.cfg["shapes"]
        n_seeds = int(self.cfg["seeds"])
        total = len(shapes) * n_seeds
        done = 0
        errs = _Errors()
        for si, shape in enumerate(shapes):
            first = _FirstSeed()
            for k in range(n_seeds):
                seed = int(self.cfg["seed"]) + 1000 * si + k
                label = f"shape {shape_str(shape)} seed {seed}"
                self.progress(done, total, f"correctness: {label}")
                self._one_seed(shape, si, k, seed, label, first, errs)
                done += 1
            self.result["io_bytes"].append(int(first.io_bytes or 0))
        self.progress(done, total, "correctness done")
        self.result["max_abs_err"] = errs.max_abs
        self.result["max_rel_err"] = errs.max_rel
        errs.worst.sort(key=lambda w: -(w.get("score") or 0))
        self.result["worst"] = errs.worst[:5]
        self.check("no_patching", not any(p["by"] == "candidate" for p in self.result["patched"]),
                   "the candidate replaced " + ", ".join(sorted({p["name"] for p in self.result["patched"]
                                                                if p["by"] == "candidate"}))
                   + " (put back; timing used the harness's own timers)")
        self.check("same_address_new_values", True)
        self.check("fresh_inputs_new_result", True)

    def _one_seed(self, shape: dict, si: int, k: int, seed: int, label: str, first: _FirstSeed,
                  errs: _Errors) -> None:
        """One seed of one shape: reference, baseline and candidate on the same inputs, every check."""
        rtol, atol = float(self.cfg["rtol"]), float(self.cfg["atol"])
        args, same_address = self._seed_args(shape, k, seed, label, first)
        # reference (higher precision) and the baseline's own output, from clones
        ref, base = self._reference(args, label)
        if first.io_bytes is None:
            first.io_bytes = sum(a.numel() * a.element_size() for a in tensors(args)) + \
                sum(b.numel() * b.element_size() for b in base)
        base_meta = [meta(b) for b in base]
        base_sizes = [b.numel() * b.element_size() for b in base]
        self._self_check(base, ref, rtol, atol, label)
        del base  # freed, then poisoned: a candidate reading the baseline's old output reads NaN
        self._poison(base_sizes)
        outs = self._run_candidate(args, label)
        if outs is None:
            return
        if len(outs) != len(base_meta):
            self.check("output_structure", False, f"{label}: {len(outs)} output tensor(s), the "
                                                  f"baseline returns {len(base_meta)}")
            return
        self.check("output_structure", True)
        stale = self._stale(outs, si, k, label, first, same_address)
        for oi, (o, m, r) in enumerate(zip(outs, base_meta, ref)):
            origin = {"shape": dict(shape), "seed": seed, "output": oi}
            self._check_output(o, m, r, f"{label} output {oi}", origin, same_address, stale, errs)

    def _seed_args(self, shape: dict, k: int, seed: int, label: str, first: _FirstSeed) -> tuple[tuple, bool]:
        """Fresh inputs of this seed; the second seed's copied into the first seed's tensors (same addresses)."""
        t = self.torch
        fresh = self._inputs(shape, seed)
        self._check_random(fresh, label)
        same_address = k == 1 and first.args is not None
        args: tuple = fresh
        if same_address and first.args is not None:
            if copy_into(t, first.args, fresh):
                if first.vals is not None and all(bitwise_equal(t, a, b) for a, b in
                                                  zip(tensors(first.vals), tensors(fresh))):
                    self.check("inputs_random", False, f"make_inputs gave identical values for seeds "
                                                       f"{seed - 1} and {seed} at {shape_str(shape)}: "
                                                       "seeds must change the data")
                args = first.args
            else:
                self.warn("same_address_skipped", f"{label}: inputs changed shape between seeds; "
                                                  "the same-address check was skipped")
                same_address = False
        if k == 0:
            first.args = args
            first.vals = tuple(a.clone() if isinstance(a, t.Tensor) else a for a in args)
        return args, same_address

    def _run_candidate(self, args: tuple, label: str) -> tuple | None:
        """The candidate's outputs (None when it returned no tensors), after the input and stream checks."""
        t = self.torch
        before = [a.clone() if isinstance(a, t.Tensor) else None for a in args]
        out = self.call(self.candidate, args, self.cand_who, f"candidate on {label}")
        outs = self._as_outputs(out, label)
        snap = None
        if self.is_cuda:
            if outs is not None:
                snap = tuple(o.clone() for o in outs)  # what the current stream sees now
            self._c_sync()
        # inputs unchanged
        changed = [i for i, (a, b) in enumerate(zip(args, before))
                   if b is not None and not bitwise_equal(t, a, b)]
        self.check("inputs_unchanged", not changed,
                   f"{label}: the candidate modified input(s) {changed} in place" if changed else "")
        if outs is None:
            return None
        if self.is_cuda and snap is not None:
            late = [i for i, (s, o) in enumerate(zip(snap, outs)) if not bitwise_equal(t, s, o)]
            self.check("stream_complete", not late,
                       f"{label}: output(s) {late} were still being written after the function "
                       "returned (work on another stream not joined to the current stream)"
                       if late else "")
            outs = snap
        return outs

    def _stale(self, outs: tuple, si: int, k: int, label: str, first: _FirstSeed, same_address: bool) -> bool:
        """Whether new input values gave exactly the first seed's result (a result cached by pointer or shape)."""
        t = self.torch
        if k == 0:
            first.outs = tuple(o.clone() for o in outs)
            return False
        if first.outs is None or len(first.outs) != len(outs):
            return False
        stale = all(bitwise_equal(t, o, p) for o, p in zip(outs, first.outs))
        self.check("same_address_new_values" if same_address else "fresh_inputs_new_result",
                   not stale,
                   f"{label}: new input values{' at the same addresses' if same_address else ''} "
                   f"gave exactly the result of seed {int(self.cfg['seed']) + 1000 * si} "
                   "(a result cached by pointer or shape)")
        return stale

    def _check_output(self, o: Any, m: dict, r: Any, where: str, origin: dict, same_address: bool, stale: bool,
                      errs: _Errors) -> None:
        """One output against the baseline's metadata ``m`` and the reference ``r``."""
        om = meta(o)
        self.check("shape", om["shape"] == m["shape"], f"{where}: shape {om['shape']}, baseline {m['shape']}")
        self.check("dtype", om["dtype"] == m["dtype"], f"{where}: dtype {om['dtype']}, baseline {m['dtype']}")
        self.check("device", om["device"] == m["device"], f"{where}: on {om['device']}, baseline on {m['device']}")
        lay_ok = om["type"] == m["type"] and om["layout"] == m["layout"] and om["contiguous"] == m["contiguous"]
        self.check("layout", lay_ok, f"{where}: {om['type']} {om['layout']} contiguous="
                                     f"{om['contiguous']} strides {om['strides']}, baseline "
                                     f"{m['type']} {m['layout']} contiguous={m['contiguous']} "
                                     f"strides {m['strides']}")
        if om["shape"] != m["shape"]:
            return
        cmp = compare(self.torch, o, r, float(self.cfg["rtol"]), float(self.cfg["atol"]))
        errs.max_abs = max(errs.max_abs, cmp["max_abs"])
        errs.max_rel = max(errs.max_rel, cmp["max_rel"])
        self.check("finite", cmp["nonfinite"] == 0,
                   f"{where}: {cmp['nonfinite']} NaN/Inf element(s) where the reference is finite"
                   + (f" (first at {cmp['worst'][0]['index']})" if cmp["worst"] else ""))
        if stale:
            return
        detail = ""
        if cmp["bad"]:
            w = cmp["worst"][0]
            detail = (f"{where}: {cmp['bad']} of {cmp['numel']} element(s) outside "
                      f"atol + rtol*|ref| (worst at {w['index']}: got {w['candidate']:.6g}, "
                      f"ref {w['reference']:.6g})")
            if same_address:
                detail += " (inputs at the same addresses as the previous seed)"
            for w in cmp["worst"]:
                errs.worst.append({**origin, **w})
        self.check("values", cmp["bad"] == 0, detail)

    def _check_random(self, args: tuple, label: str) -> None:
        for i, a in enumerate(tensors(args)):
            if a.is_floating_point() and a.numel() > 1:
                flat = a.reshape(-1)
                if not bool((flat != flat[0]).any()):
                    raise Fatal("make_inputs", f"make_inputs gave a constant tensor (input {i}, {label}); "
                                               "correctness on constants proves nothing: return random data")
        self.check("inputs_random", True)

    def _reference(self, args: tuple, label: str) -> tuple[tuple, tuple]:
        """(the reference, the baseline's outputs): the reference is the baseline run on higher-precision
        copies of the inputs (TF32 off), or its own output where it cannot run on them."""
        t = self.torch
        clones = tuple(a.clone() if isinstance(a, t.Tensor) else a for a in args)
        base = self._as_outputs(self.call(self.baseline, clones, "baseline", f"baseline on {label}"), label,
                                who="baseline")
        assert base is not None  # a baseline without tensor outputs is a Fatal
        if self.is_cuda:
            self._c_sync()
        hp = tuple(a.detach().to(self.ref_dtype) if isinstance(a, t.Tensor) and a.is_floating_point()
                   else (a.clone() if isinstance(a, t.Tensor) else a) for a in args)
        ref = self._high_precision(hp, base) if self.ref_dtype != self.dtype else None
        if ref is None:
            ref = tuple(b.detach().clone() for b in base)
        if self.is_cuda:
            self._c_sync()
        return ref, base

    def _high_precision(self, hp: tuple, base: tuple) -> tuple | None:
        """The baseline's outputs on the higher-precision inputs ``hp``, or None where it cannot run on them."""
        t = self.torch
        ref = None
        prev = (t.backends.cuda.matmul.allow_tf32, t.backends.cudnn.allow_tf32)
        t.backends.cuda.matmul.allow_tf32 = False
        t.backends.cudnn.allow_tf32 = False
        try:
            r = self.baseline(*hp)
            r = (r,) if isinstance(r, t.Tensor) else tuple(r)
            if len(r) == len(base) and all(isinstance(x, t.Tensor) and x.shape == b.shape
                                           for x, b in zip(r, base)):
                ref = tuple(x.detach() for x in r)
        except Exception:
            ref = None
        finally:
            t.backends.cuda.matmul.allow_tf32, t.backends.cudnn.allow_tf32 = prev
            self.check_patches("baseline", "reference")
        if ref is None and not getattr(self, "_warned_native", False):
            self._warned_native = True
            self.warn("reference_native_precision",
                      f"the baseline did not run on {str(self.ref_dtype).replace('torch.', '')} inputs; "
                      f"the reference is its {self.cfg['dtype']} output")
        return ref

    def _self_check(self, base: tuple, ref: tuple, rtol: float, atol: float, label: str) -> None:
        for b, r in zip(base, ref):
            cmp = compare(self.torch, b, r, rtol, atol)
            if cmp["bad"]:
                self.check("baseline_within_tolerance", False,
                           f"{label}: the baseline itself has {cmp['bad']} element(s) outside atol + rtol*|ref| "
                           f"(max abs err {cmp['max_abs']:.3g}); loosen rtol/atol")
                return
        self.check("baseline_within_tolerance", True)

    def _as_outputs(self, out: Any, label: str, who: str = "candidate") -> tuple | None:
        t = self.torch
        if isinstance(out, t.Tensor):
            return (out,)
        if isinstance(out, (tuple, list)) and out and all(isinstance(o, t.Tensor) for o in out):
            return tuple(out)
        msg = f"{label}: returned {type(out).__name__}, not a tensor or a tuple of tensors"
        if who == "baseline":
            raise Fatal("baseline", "baseline " + msg)
        self.check("output_structure", False, msg)
        return None

    def _poison(self, sizes: list[int]) -> None:
        """Fill freed memory with 0xFF bytes (NaN in every float format) before the candidate runs."""
        t = self.torch
        gc.collect()
        hold = []
        if self.is_cuda:
            self._c_sync()
            try:
                snap = t.cuda.memory_snapshot()
            except Exception:
                snap = []
            for seg in snap:
                if seg.get("device", 0) != t.cuda.current_device():
                    continue
                small = seg.get("segment_type") == "small"
                for blk in seg.get("blocks", []):
                    if blk.get("state") != "inactive":
                        continue
                    size = int(blk["size"])
                    step = (1 << 20) if small else size
                    for off in range(0, size, step):
                        n = min(step, size - off)
                        hold.append(t.empty(n, dtype=t.uint8, device=self.device).fill_(255))
            self._c_sync()
        else:
            for n in sizes:
                for _ in range(2):
                    hold.append(t.empty(max(n, 1), dtype=t.uint8).fill_(255))
        del hold
