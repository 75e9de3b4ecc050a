"""Kernel side of autograding: serialise named notebook objects for the grader.

Runs inside the student's kernel, so its output is untrusted: it is JSON (base64 blobs), read
by the grader without unpickling; only the worker process ever unpickles the blobs.
"""
from __future__ import annotations

import base64
import json

from ..checks.core import shorten
from .run import PayloadError, pack_one

#: A graded object (a function, with what it references) larger than this is not sent: a
#: closure over a huge array would otherwise cost the grader that much memory per check.
MAX_PAYLOAD_MIB = 256


def dump(path: str, names: list[str], namespace: dict) -> None:
    exported = {}
    for name in names:
        if name not in namespace:
            exported[name] = {"error": f"В ноутбуке не определено имя `{name}`: выполните ячейку с решением."}
            continue
        try:
            blob = pack_one(namespace[name])
        except PayloadError as error:
            exported[name] = {"error": shorten(str(error), 500)}
            continue
        if len(blob) > MAX_PAYLOAD_MIB * 2**20:
            exported[name] = {"error": f"`{name}` вместе со всем, на что ссылается, занимает "
                                       f"{len(blob) / 2**20:.0f} МиБ (допустимо {MAX_PAYLOAD_MIB} МиБ): "
                                       "не держите большие массивы в глобальных переменных, "
                                       "которые использует функция."}
            continue
        exported[name] = {"payload": base64.b64encode(blob).decode("ascii")}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(exported, handle)
