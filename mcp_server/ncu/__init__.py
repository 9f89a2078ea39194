"""Nsight Compute: run ncu, parse its reports, classify bottlenecks, select the candidate.

Modules: catalogue (the one metric catalogue), runner, parse, classify, select,
specs (the GPU spec table loader), models, requests, ops, render.
"""
