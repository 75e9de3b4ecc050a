"""The worker process: ``python -I -m autograder.worker`` runs one check and writes one reply line.

Order matters: read the request, keep the real stdout for the reply, send fd 1 and 2 to an
output file of the grader's (the student's prints and warnings must not reach the reply or
nbgrader's stderr), cap memory and file sizes, import the check (so it captures numpy, tracemalloc and
friends before any student code exists), install the guard, and only then unpickle the
student's objects.

The reply line starts with a nonce that only the grader and this module's ``main`` frame know
(student code may not reach frames or the garbage collector), and it is encoded with C
functions bound before student code ran: a student who writes a forged verdict to the output,
or patches ``json``, does not pass.
"""
from __future__ import annotations

import json.encoder
import os
import pickle
import sys
import tempfile

#: Bound at import, before any student code: C functions whose code cannot be swapped.
_write = os.write
_quote = json.encoder.encode_basestring_ascii
_exit = os._exit

#: A check's scratch and output files are capped: a student printing forever fills no disk.
FILE_LIMIT_MIB = 64


def _reply(fd: int, nonce: bytes, passed: bool, message: str, mistake) -> None:
    text = '{"passed": %s, "message": %s, "mistake": %s}' % (
        "true" if passed is True else "false",
        _quote(message if type(message) is str else "?"),
        _quote(mistake) if type(mistake) is str else "null")
    _write(fd, b"\n" + nonce + b" " + text.encode("ascii") + b"\n")


def _die_with_parent() -> None:
    """A check never outlives the grader that started it (a killed autograde leaves no check
    running): Linux delivers SIGKILL here when the parent dies."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != os.environ.get("AUTOGRADER_PARENT", str(os.getppid())):
        _exit(1)  # the parent died before the request was even read


def main() -> None:
    _die_with_parent()
    request = pickle.loads(sys.stdin.buffer.read())
    nonce = request.pop("nonce").encode("ascii")
    sys.dont_write_bytecode = True
    reply_fd = os.dup(1)
    output_path = request.pop("output_path", None)  # the grader quotes its end when no verdict comes
    output = open(output_path, "w+b") if output_path else tempfile.TemporaryFile()
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    sys.stdout = sys.stderr = open(output.fileno(), "w", closefd=False)

    from autograder import guard
    from autograder.core import CheckFailed, get_check, shorten

    check = get_check(request["check_id"])
    guard.cap_resources(request["memory_limit_gib"], FILE_LIMIT_MIB)
    guard.install(gpu=check.needs_gpu, secret_dirs=request.get("secret_dirs", ()),
                  write_protected=request.get("write_protected", ()))
    passed, message, mistake = False, "", None
    try:
        try:
            with guard.student_code():
                objects = [pickle.loads(blob) for blob in request["payloads"]]
        except guard.Tampering as error:
            raise CheckFailed(f"Нарушение правил проверки при передаче объекта: {error}.") from None
        except Exception as error:
            name, text = guard.describe(error)
            raise CheckFailed(f"Не удалось восстановить ваш объект для проверки: "
                              f"{name}: {shorten(text, 300)}") from None
        cases = request["cases"]
        detail = check.function(*objects, **({"cases": cases} if cases is not None else {}))
        passed, message = True, detail if type(detail) is str else ""
    except CheckFailed as failure:
        message, mistake = str(failure), getattr(failure, "mistake", None)
    except MemoryError:
        message = "Проверка исчерпала лимит памяти (MemoryError)."
    except guard.Tampering as error:
        message = f"Нарушение правил проверки: {error}."
    except BaseException as error:  # a bug of the check itself must still say something
        try:
            name, text = guard.describe(error)
        except guard.Tampering as tampering:
            name, text = "Tampering", str(tampering)
        message = f"Внутренняя ошибка проверки: {name}: {shorten(text, 500)}"
    tampering = guard.verify()
    if tampering:
        passed, message, mistake = False, f"Нарушение правил проверки: {tampering}.", None
    _reply(reply_fd, nonce, passed, message, mistake)
    _exit(0)  # skip interpreter teardown: student objects may have hostile finalisers


if __name__ == "__main__":
    main()
