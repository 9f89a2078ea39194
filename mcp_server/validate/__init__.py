"""validate: accept a candidate kernel only when it is correct and faster, with confidence.

``engine.validate_candidate`` loads the spec (``spec.py``), runs the harness child
(``child.py``; its parts in ``harness/``: clock, tamper, device, correctness, timing) in a
fresh subprocess with a time limit, and decides from the raw samples (``stats.py``).
Kept import-light: the child imports this package before any user code.
"""
