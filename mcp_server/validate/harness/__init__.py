"""What runs inside the harness child (``python -m mcp_server.validate.child``), cut by concern.

``clock`` (the timers, captured first), ``base`` (the protocol, user calls, shared state), ``tamper``
(detecting and undoing replaced functions), ``device`` (torch and device set-up, CPU probing),
``tensors`` (comparisons), ``correctness`` and ``timing``. ``child.Harness`` puts them together.
Nothing here imports torch at module level: torch is imported by ``device`` when the run starts.
"""
