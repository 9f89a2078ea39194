"""Replays of a trace's ops: extract the aten ops that launched a trace's slowest kernels, rebuild their
arguments from the recorded shapes, strides, dtypes and values, and write a standalone torch script plus a
validate_candidate spec for them (docs/ARCHITECTURE.md, "Replays")."""
