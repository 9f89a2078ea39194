"""Size bounds of the request models' string and list arguments (issue 14: a 10 MB path argument took 37 s
to fail). Every face validates the request model first, so an argument over these is refused at once by
name, before any engine runs. The bounds sit far above real use:

| bound | value | for |
|---|---|---|
| ``PATH_CHARS`` | 4096 characters (Linux PATH_MAX) | file and directory paths; the 'N1,N2,...' event-names text |
| ``NAME_CHARS`` | 200 characters | keywords, labels, categories, source keys, each item of a list of names |
| ``LIST_ITEMS`` | 64 items | lists of paths and names (each path item <= ``PATH_CHARS``) |
| ``TEXT_CHARS`` | 65,536 characters | free text an agent writes into a record (a hypothesis, a note) |
| ``EVENT_NAMES`` | 4096 items | timeline event names given as a list (the probe has 1024 event ids) |

A request field takes one of the bounded types below (``trace_path: PathArg = Field(description=...)``);
tests/test_faces.py holds every string and list field of every request to a bound.
"""
from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import Field, StringConstraints

PATH_CHARS = 4096
NAME_CHARS = 200
LIST_ITEMS = 64
EVENT_NAMES = 4096
TEXT_CHARS = 65536

#: A file or directory path.
PathArg = Annotated[str, StringConstraints(max_length=PATH_CHARS)]
#: A keyword, label, category, source key, kernel regex, op name.
NameArg = Annotated[str, StringConstraints(max_length=NAME_CHARS)]
#: Free text.
TextArg = Annotated[str, StringConstraints(max_length=TEXT_CHARS)]
#: Lists of the above.
PathList = Annotated[list[PathArg], Field(max_length=LIST_ITEMS)]
NameList = Annotated[list[NameArg], Field(max_length=LIST_ITEMS)]

#: the help of every request's ``categories`` field
CATEGORIES_HELP = "Categories CSV (category,pattern); default: the shared kernel_categories.csv"


def plain_type(tp: Any) -> Any:
    """``tp`` without its bounds (``Optional[PathList]`` -> ``Optional[list[str]]``): the type the CLI options and
    docs/REFERENCE.md are made from."""
    if typing.get_origin(tp) is Annotated:
        return plain_type(typing.get_args(tp)[0])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or origin is Literal or not args:
        return tp
    plain = tuple(plain_type(a) for a in args)
    if plain == args:
        return tp
    if origin in (Union, types.UnionType):
        return Union[plain]  # noqa: UP007
    return origin[plain if len(plain) > 1 else plain[0]]

