"""kernelscope: GPU kernel performance tooling for LLM inference.

``core`` is what every engine may use; the engine packages (traces, tracesets, compare, repro, refs,
timeline, ncu, validate, kernels, ledger, loop, reports) do the work; ``faces`` turns the operations
they declare into the MCP server and the ``kernelscope`` command (docs/ARCHITECTURE.md, "Layers").
"""
__version__ = "0.1.0"
