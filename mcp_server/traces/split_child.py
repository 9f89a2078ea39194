"""The helper process of a split decode (``split``): ``python -S -m mcp_server.traces.split_child PATH AT BARE PPID``.

Decodes the trace's text from the first event boundary at or after text offset ``AT`` to the end
(``stream.decode_rest``; ``BARE`` 1: the text is a bare event array) and writes one pickled answer on
stdout: ``("ok", boundary, tail metadata, collector state)`` or ``("no",)``, then exits without tearing
down its objects. It dies with the process ``PPID`` that started it.
"""
from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    from mcp_server.core.limits import die_with_parent

    die_with_parent(int(argv[3]))  # a killed analyzer leaves no helper behind (armed before the imports)
    from mcp_server.traces.collector import gc_paused
    from mcp_server.traces.stream import decode_rest

    try:
        with gc_paused():
            res: tuple = decode_rest(Path(argv[0]), int(argv[1]), argv[2] == "1")
    except BaseException:  # damaged data, limits, a layout it cannot stream: the parent decodes it itself
        res = ("no",)
    out = sys.stdout.buffer
    out.write(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
    out.flush()
    os._exit(0)  # no teardown of millions of objects


if __name__ == "__main__":
    main(sys.argv[1:])
