"""The worker process: ``python -I -m autograder.worker`` runs one check and prints one JSON line.

Order matters: read the request, keep the real stdout for the reply, send fd 1 and 2 to a
scratch file (the student's prints and warnings must not reach the reply or nbgrader's
stderr), cap the address space, import the check (so it captures numpy, tracemalloc and
friends before any student code exists), and only then unpickle the student's objects.
"""
from __future__ import annotations

import json
import os
import pickle
import resource
import sys
import tempfile


def _cap_memory(gib: float | None) -> None:
    if not gib:  # GPU checks: a CUDA context reserves far more address space than it uses
        return
    limit = int(gib * 2**30)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main() -> None:
    request = pickle.loads(sys.stdin.buffer.read())
    reply_fd = os.dup(1)
    scratch = tempfile.TemporaryFile()
    os.dup2(scratch.fileno(), 1)
    os.dup2(scratch.fileno(), 2)
    sys.stdout = sys.stderr = open(scratch.fileno(), "w", closefd=False)

    from autograder import guard
    from autograder.core import CheckFailed, get_check, shorten

    check = get_check(request["check_id"])
    _cap_memory(request["memory_limit_gib"])
    guard.install()
    try:
        try:
            with guard.student_code():
                objects = [pickle.loads(blob) for blob in request["payloads"]]
        except Exception as error:
            raise CheckFailed(f"Не удалось восстановить ваш объект для проверки: "
                              f"{type(error).__name__}: {shorten(str(error), 300)}") from None
        cases = request["cases"]
        detail = check.function(*objects, **({"cases": cases} if cases is not None else {}))
        reply = {"passed": True, "message": detail or ""}
    except CheckFailed as failure:
        reply = {"passed": False, "message": str(failure),
                 "mistake": getattr(failure, "mistake", None)}
    except MemoryError:
        reply = {"passed": False, "message": "Проверка исчерпала лимит памяти (MemoryError)."}
    except BaseException as error:  # a bug of the check itself must still say something
        reply = {"passed": False,
                 "message": f"Внутренняя ошибка проверки: {type(error).__name__}: {shorten(str(error), 500)}"}
    os.write(reply_fd, (json.dumps(reply, ensure_ascii=False) + "\n").encode("utf-8"))
    os._exit(0)  # skip interpreter teardown: student objects may have hostile finalisers


if __name__ == "__main__":
    main()
