"""MLA reconstruction BMMs: shapes, quantized Triton kernels (W4A16, W8A16), cuBLAS baselines, L2 sweep.

Every module here imports torch and triton lazily (inside functions), so the package imports on
a CPU-only machine; only the engine calls need a CUDA GPU. ``configs`` and ``tuning`` are plain
data; ``quant`` holds the packing helpers; ``w4a16`` / ``w8a16`` the kernels; ``bench`` and
``l2sweep`` the timed experiments (pydantic-free, so they also run where only torch is installed);
``models`` / ``requests`` / ``ops`` / ``render`` the faces.
"""
