"""Operations that misbehave on purpose, for tests/test_isolation.py (imported by the workers by name)."""
from __future__ import annotations

import os
import time

from pydantic import Field

from mcp_server.core.models import Model, Warning_
from mcp_server.core.operation import READ_ONLY, Operation, Request, engine


class MisbehaveRequest(Request):
    how: str = Field(description="abort | sleep | hog | print | ok")
    seconds: float = Field(default=30.0, description="sleep length")


class MisbehaveResult(Model):
    how: str
    pid: int
    warnings: list[Warning_] = Field(default_factory=list)


@engine(MisbehaveRequest)
def misbehave(req: MisbehaveRequest) -> MisbehaveResult:
    how = req.how
    if how == "abort":
        os.abort()
    if how == "sleep":
        time.sleep(req.seconds)
    if how == "hog":
        blocks = [bytearray(256 << 20) for _ in range(64)]  # 16 GiB, far past the limit
        del blocks
    if how == "print":
        print("this would corrupt the stdio protocol if it reached fd 1")
    return MisbehaveResult(how=how, pid=os.getpid())


MISBEHAVE = Operation(
    tool="misbehave", verb="misbehave", title="Misbehave", description="A test operation.",
    request=MisbehaveRequest, result=MisbehaveResult, engine="isolation_ops:misbehave", hints=READ_ONLY,
)
