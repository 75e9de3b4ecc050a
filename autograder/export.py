"""Kernel side of autograding: serialise named notebook objects for the grader.

Runs inside the student's kernel, so its output is untrusted: it is JSON (base64 blobs), read
by the grader without unpickling; only the worker process ever unpickles the blobs.
"""
from __future__ import annotations

import base64
import json

from .core import shorten
from .isolation import PayloadError, pack_one


def dump(path: str, names: list[str], namespace: dict) -> None:
    exported = {}
    for name in names:
        if name not in namespace:
            exported[name] = {"error": f"В ноутбуке не определено имя `{name}`: выполните ячейку с решением."}
            continue
        try:
            exported[name] = {"payload": base64.b64encode(pack_one(namespace[name])).decode("ascii")}
        except PayloadError as error:
            exported[name] = {"error": shorten(str(error), 500)}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(exported, handle)
