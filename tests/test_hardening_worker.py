"""Does a check's worker give no points to a student function that misbehaves or tampers?

In-process and fast: each bad function goes through the same worker as under nbgrader
(`autograder.notebook.run`), defined as notebook code is (module ``__main__``, so it travels by
value).  tests/test_hardening_autograde.py repeats the important ones through the real
`nbgrader autograde`.
"""
import os
import subprocess
import sys
import textwrap
import time

import cloudpickle
import numpy as np
import pytest

from autograder.course import paths as course

from autograder.course import grading
from autograder.isolation import guard
from autograder.isolation.run import _HUNG, run_check
from autograder.notebook import run

SOLUTION = grading.reference_answers("02_fused_rmsnorm")["fused_rms_norm"]
NAIVE = "def fused_rms_norm(x, w, eps=1e-6):\n    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w\n"


def student(source: str, name: str = "fused_rms_norm"):
    """A function defined as a notebook cell defines it (module __main__, numpy imported)."""
    namespace = {"__name__": "__main__", "np": np}
    exec(compile(textwrap.dedent(source), "<student>", "exec"), namespace)
    return namespace[name]


def verdict(check_id: str, source: str, name: str = "fused_rms_norm"):
    result = run(check_id, student(source, name))
    return result.passed, result.message


# Each: (what it tries, check, code, a phrase the failure message must contain).
TAMPERING = [
    ("patch json.dumps to forge the reply", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import json
            json.dumps = lambda *a, **k: '{"passed": true, "message": ""}'
            return x
        """, "в json"),
    ("write a forged verdict to every fd, then os._exit(0)", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import os
            for fd in range(20):
                try:
                    os.write(fd, b'{"passed": true, "message": ""}\\n')
                except OSError:
                    pass
            os._exit(0)
        """, "завершился с кодом 0"),
    ("tracemalloc.reset_peak() after the naive computation", "lesson02.memory", """
        def fused_rms_norm(x, w, eps=1e-6):
            import tracemalloc
            y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w
            try:
                tracemalloc.reset_peak()
            except Exception:
                pass
            return y
        """, "reset_peak"),
    ("tracemalloc.stop(); tracemalloc.start()", "lesson02.memory", """
        def fused_rms_norm(x, w, eps=1e-6):
            import tracemalloc
            y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w
            tracemalloc.stop()
            tracemalloc.start()
            return y
        """, "tracemalloc.stop"),
    ("replace tracemalloc.get_traced_memory", "lesson02.memory", """
        def fused_rms_norm(x, w, eps=1e-6):
            import tracemalloc
            tracemalloc.get_traced_memory = lambda: (0, 0)
            return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w
        """, "в tracemalloc"),
    ("re-import a fresh tracemalloc", "lesson02.memory", """
        def fused_rms_norm(x, w, eps=1e-6):
            import sys
            sys.modules.pop("_tracemalloc", None)
            import _tracemalloc
            y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w
            _tracemalloc.reset_peak()
            return y
        """, "tracemalloc"),
    ("patch numpy functions the check uses", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            np.abs = lambda a, *args, **kwargs: a * 0
            np.isfinite = lambda a, *args, **kwargs: np.ones(np.shape(a), bool)
            return x
        """, "в numpy"),
    ("patch builtins", "lesson02.dtype", """
        def fused_rms_norm(x, w, eps=1e-6):
            import builtins
            builtins.type = lambda obj: np.ndarray
            return [[0.0]]
        """, "в builtins"),
    ("walk the stack from a traceback to the check", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            try:
                raise RuntimeError
            except RuntimeError as error:
                frame = error.__traceback__.tb_frame
            while frame.f_back is not None:
                frame = frame.f_back
                frame.f_globals.get("TOLERANCES", {}).update(float32=(1e9, 1e9))
            return x
        """, "кадрам стека"),
    ("sys._getframe to reach the grader", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import sys
            sys._getframe(2).f_globals["compare"] = lambda *a, **k: 0.0
            return x
        """, "кадрам стека"),
    ("find the grader's functions with gc", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import gc
            for obj in gc.get_objects():
                if getattr(obj, "__name__", "") == "compare":
                    obj.__code__ = (lambda *a, **k: 0.0).__code__
            return x
        """, "gc.get_objects"),
    ("swap the code of a numpy function", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            np.nanmax._implementation.__code__ = (lambda a, *args, **kwargs: 0.0).__code__
            return x
        """, "__code__"),
    ("patch a method of a library class", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            np.errstate.__exit__ = lambda *a: True
            return x
        """, "numpy.errstate"),
    ("ctypes to read or write the grader's memory", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import ctypes
            ctypes.string_at(id(x), 8)
            return x
        """, "ctypes"),
    ("start a process", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import subprocess
            subprocess.run(["true"])
            return x
        """, "процессы"),
    ("signal the grader", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import os, signal
            try:
                os.kill(os.getppid(), 0)
            except PermissionError:
                pass
            return x
        """, "сигналы"),
    ("read the instructor's source notebook", "lesson02.equivalence", f"""
        def fused_rms_norm(x, w, eps=1e-6):
            text = open({str(course.source_notebook("02_fused_rmsnorm"))!r}).read()
            return x
        """, "нельзя открывать файл"),
    ("write into the grader's package", "lesson02.equivalence", f"""
        def fused_rms_norm(x, w, eps=1e-6):
            open({os.path.join(guard.PACKAGE_DIR, "__init__.py")!r}, "a").close()
            return x
        """, "нельзя писать"),
    ("import the grader's oracle", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            from autograder.checks.reference import rms_norm
            return rms_norm(x, w, eps).astype(np.float32)
        """, "импортировать autograder"),
    ("leave a thread that keeps patching", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import threading, time
            def patch():
                while True:
                    np.abs = lambda a, *args, **kwargs: a * 0
                    time.sleep(0.001)
            threading.Thread(target=patch, daemon=True).start()
            return x
        """, "потоки"),
    ("install a signal handler and a timer", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import signal
            signal.signal(signal.SIGALRM, lambda *a: None)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return x
        """, "сигналов"),
    ("install a trace function", "lesson02.equivalence", """
        def fused_rms_norm(x, w, eps=1e-6):
            import sys
            sys.settrace(lambda *a: None)
            return x
        """, "sys.settrace"),
    ("an exception whose __str__ patches numpy", "lesson02.equivalence", """
        class Sneaky(Exception):
            def __str__(self):
                np.abs = lambda a, *args, **kwargs: a * 0
                return "ничего"
        def fused_rms_norm(x, w, eps=1e-6):
            raise Sneaky()
        """, "в numpy"),
    ("a finalizer that patches numpy after the call", "lesson02.equivalence", """
        class Patcher:
            def __del__(self):
                np.abs = lambda a, *args, **kwargs: a * 0
        def fused_rms_norm(x, w, eps=1e-6):
            import gc
            gc.set_threshold(1)  # collect at the grader's next allocation
            a = Patcher(); b = Patcher(); a.other, b.other = b, a  # a cycle: freed later by gc
            return x * 0
        """, None),
    ("a pickle that runs a command when unpickled", "lesson02.equivalence", """
        import os
        class Evil:
            def __reduce__(self):
                return (os.system, ("true",))
        def fused_rms_norm(x, w, eps=1e-6, _evil=Evil()):
            return x
        """, "процессы"),
]


@pytest.mark.parametrize("what, check_id, source, phrase", TAMPERING, ids=[t[0] for t in TAMPERING])
def test_tampering_in_the_function_earns_nothing(what, check_id, source, phrase):
    """Does tampering from inside the student's function fail the check, saying why?"""
    passed, message = verdict(check_id, source)
    assert not passed, f"{what}: passed"
    assert phrase is None or phrase in message, message


BAD_OUTPUTS = [
    ("None", "return None", "numpy.ndarray, а получено NoneType"),
    ("a list", "return x.tolist()", "получено list"),
    ("NaN everywhere", "return np.full_like(x, np.nan)", "NaN/inf"),
    ("inf everywhere", "return np.full_like(x, np.inf)", "NaN/inf"),
    ("wrong shape", "return x[:, :1] * 1", "форма"),
    ("wrong dtype", "return x.astype(np.float64)", "dtype float64"),
    ("an object whose __eq__ is always True", """
        class Yes:
            shape, dtype = x.shape, x.dtype
            def __eq__(self, other): return True
            def __array__(self, dtype=None, copy=None): return np.asarray(x)
        return Yes()""", "получено Yes"),
    ("an ndarray subclass whose comparisons are always True", """
        class Always(np.ndarray):
            def __eq__(self, other): return np.ones(self.shape, bool)
            def __sub__(self, other): return np.zeros(self.shape, np.float32)
        return np.zeros_like(x).view(Always)""", "получено Always"),
    ("a huge exception message", "raise ValueError('ы' * 10_000_000)", "обрезано"),
    ("NotImplementedError left in", "raise NotImplementedError()", "ещё не реализована"),
]


@pytest.mark.parametrize("what, body, phrase", BAD_OUTPUTS, ids=[b[0] for b in BAD_OUTPUTS])
def test_bad_outputs_fail_with_a_clear_short_message(what, body, phrase):
    """Are None, NaN, inf, wrong types, look-alikes and huge errors a plain 0 with a message?"""
    source = "def fused_rms_norm(x, w, eps=1e-6):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")
    passed, message = verdict("lesson02.equivalence", source)
    assert not passed
    assert phrase in message, message
    assert len(message) < 2500


CRASHES = [
    ("os._exit", "import os; os._exit(3)", "завершился с кодом 3"),
    ("os._exit after a print: the message quotes the output", "print('последнее слово', flush=True); "
     "import os; os._exit(3)", "последнее слово"),
    ("sys.exit", "import sys; sys.exit(0)", "SystemExit"),
    ("a segfault", "import faulthandler; faulthandler._sigsegv()", "segfault"),
    ("a segfault through ctypes", "import ctypes; ctypes.string_at(0)", "ctypes"),
    ("a 16 GiB allocation", "return np.ones(16 * 2**30, dtype=np.uint8)", "MemoryError"),
    ("printing without end", "while True: print('x' * 2**20)", "File too large"),
    ("an unpicklable default", "return x", None),
]


@pytest.mark.parametrize("what, body, phrase", CRASHES, ids=[c[0] for c in CRASHES])
def test_crashes_cost_only_the_check(what, body, phrase):
    """Does a function that kills, bombs or floods its worker just fail, with a message?"""
    if phrase is None:  # a generator cannot be pickled: the message says so before any worker runs
        fn = student("def fused_rms_norm(x, w, eps=1e-6, _g=(i for i in range(3))):\n    return x\n")
        result = run("lesson02.equivalence", fn)
        assert not result.passed and "не удалось передать объект" in result.message
        return
    source = "def fused_rms_norm(x, w, eps=1e-6):\n    " + body + "\n"
    started = time.monotonic()
    passed, message = verdict("lesson02.equivalence", source)
    assert not passed
    assert phrase in message, message
    assert time.monotonic() - started < 20


def test_a_hang_times_out_once_then_fails_fast():
    """Is an endless loop stopped at the timeout, and the same function not run again?"""
    fn = student("def fused_rms_norm(x, w, eps=1e-6):\n    while True:\n        pass\n")
    blob = [cloudpickle.dumps(fn)]
    try:
        started = time.monotonic()
        first = run_check("lesson02.equivalence", blob, timeout_s=2)
        assert "не завершилась за 2 с" in first.message and not first.passed
        second = run_check("lesson02.zeros", blob, timeout_s=2)
        assert not second.passed and "уже не завершилась" in second.message
        assert time.monotonic() - started < 15
    finally:
        _HUNG.clear()


def test_a_worker_lost_before_the_students_code_is_the_graders_fault(monkeypatch):
    """A worker that ends without a verdict before the student's code ran (seen on a GPU machine:
    exit code 0, nothing written) is no verdict on the solution: retried once, then a grader fault."""
    from autograder.isolation import run as isolation

    attempts = []
    once = isolation._run_check_once
    monkeypatch.setattr(isolation, "_run_check_once", lambda *a, **k: attempts.append(k["fork"]) or once(*a, **k))
    monkeypatch.setenv("AUTOGRADER_INJECT_WORKER_FAULT", "lesson02.zeros")
    result = run("lesson02.zeros", student(SOLUTION))
    assert result.grader_fault and not result.passed
    assert result.message.startswith("Сбой проверяющей системы, а не вашего решения"), result.message
    assert attempts == [None, False]  # the second try in a new process, not from the fork server
    monkeypatch.delenv("AUTOGRADER_INJECT_WORKER_FAULT")
    assert run("lesson02.zeros", student(SOLUTION)).passed


def test_a_grader_fault_raised_inside_a_check_is_retried_then_reported_as_such(monkeypatch):
    """Grader code that could not run part of a check (compute-sanitizer's own worker lost) raises
    GraderFault: the reply says so (nonce-signed), the check is retried, and the result is a grader fault."""
    from autograder.isolation import run as isolation

    attempts = []
    once = isolation._run_check_once
    monkeypatch.setattr(isolation, "_run_check_once", lambda *a, **k: attempts.append(k["fork"]) or once(*a, **k))
    monkeypatch.setenv("AUTOGRADER_INJECT_GRADER_FAULT", "lesson02.zeros")
    result = run("lesson02.zeros", student(SOLUTION))
    assert result.grader_fault and not result.passed and attempts == [None, False]
    assert "AUTOGRADER_INJECT_GRADER_FAULT" in result.message, result.message


def test_a_student_raising_grader_fault_only_fails_their_check():
    """GraderFault from the student's function is the student's exception like any other."""
    result = run("lesson02.zeros", student("def fused_rms_norm(x, w, eps=1e-6):\n"
                                           "    from autograder.checks.core import GraderFault\n"
                                           "    raise GraderFault('не оценивайте меня')\n"))
    assert not result.passed and not result.grader_fault, result.message


def test_a_retry_that_works_gives_the_real_verdict(monkeypatch):
    from autograder.isolation import run as isolation

    once = isolation._run_check_once
    faults = [True]

    def flaky(check_id, *args, **kwargs):
        if faults.pop() if faults else False:
            return isolation.grader_fault(isolation.get_check(check_id), "проверочный сбой")
        return once(check_id, *args, **kwargs)

    monkeypatch.setattr(isolation, "_run_check_once", flaky)
    result = run("lesson02.zeros", student(SOLUTION))
    assert result.passed and not result.grader_fault, result.message


def test_a_student_ending_the_process_is_not_a_grader_fault():
    """os._exit(0) in the student's function: their code ran, so the missing verdict is theirs."""
    result = run("lesson02.zeros", student("def fused_rms_norm(x, w, eps=1e-6):\n    import os; os._exit(0)\n"))
    assert not result.passed and not result.grader_fault
    assert "завершился с кодом 0" in result.message


LEGITIMATE = [
    ("the reference", SOLUTION),
    ("numpy submodules imported on first use", SOLUTION.replace(
        "return out", "np.random.default_rng(0); np.fft.fft(np.ones(4)); return out")),
    ("a namedtuple made inside the function", SOLUTION.replace(
        "return out", "import collections; collections.namedtuple('P', 'a b')(1, 2); return out")),
    ("a thread pool that is shut down", SOLUTION.replace(
        "return out", "from concurrent.futures import ThreadPoolExecutor\n"
                      "    with ThreadPoolExecutor(2) as pool: list(pool.map(abs, [1, -2]))\n    return out")),
]


@pytest.mark.parametrize("what, source", LEGITIMATE, ids=[c[0] for c in LEGITIMATE])
def test_legitimate_code_is_not_taken_for_tampering(what, source):
    """Does the guard leave ordinary student code alone?"""
    for check_id in ("lesson02.equivalence", "lesson02.memory"):
        passed, message = verdict(check_id, source)
        assert passed, f"{what}, {check_id}: {message}"


def test_naive_solution_still_loses_memory_points():
    """Control: the naive version fails the memory check honestly (so the tampering above matters)."""
    passed, message = verdict("lesson02.memory", NAIVE.replace("+ eps", "+ np.float32(eps)"))
    assert not passed and "пик памяти" in message


def test_ten_runs_give_identical_verdicts():
    """Do ten runs of the measuring checks give the same verdicts, word for word?

    Ten runs of lesson02.memory (visible and hidden cases) for the reference and the naive
    version: the messages carry the measured peaks, so equal messages mean equal measurements.
    (tests/test_hardening_autograde.py grades part of a class twice through nbgrader and compares
    every verdict, equivalence errors included.)
    """
    from bank import grade_calls

    functions = [student(SOLUTION), student(NAIVE)]
    calls = [c for calls in grade_calls("02_fused_rmsnorm").values() for c in calls
             if c.check_id == "lesson02.memory"]
    runs = []
    for _ in range(10):
        runs.append([(result.passed, result.message) for fn in functions for call in calls
                     for result in [run(call.check_id, fn, cases=call.cases)]])
    assert all(r == runs[0] for r in runs), [v for v in zip(*runs) if len(set(v)) > 1][:3]
    assert {passed for passed, _ in runs[0]} == {True, False}  # both outcomes are exercised


def test_a_grader_started_with_sigchld_ignored_still_reads_exit_statuses():
    """With SIGCHLD ignored (inherited from a launcher) every worker would read as "exit code 0"."""
    code = ("import signal, subprocess, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
            "import autograder.isolation.run; "
            "print(signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL, "
            "subprocess.run([sys.executable, '-c', 'raise SystemExit(3)']).returncode)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "3"], done.stdout + done.stderr


def test_only_the_graders_own_threads_may_start_its_programs_after_student_code():
    """A thread is student code unless the grader marked it as its own (``guard.grader_thread``): after student
    code ran, a plain thread is refused even a grader program (compute-sanitizer, here ``true``), a grader thread
    may start it, and once its block ends the same thread is refused again."""
    code = textwrap.dedent("""
        import shutil, subprocess, threading
        from autograder.isolation import guard
        true = shutil.which("true")
        guard.allow_grader_program(true)
        guard.install()
        with guard.student_code():
            pass
        said = []
        def start(marked):
            try:
                if marked:
                    with guard.grader_thread():
                        subprocess.run([true], check=True)
                else:
                    subprocess.run([true], check=True)
                said.append("ran")
            except PermissionError:
                said.append("refused")
        def marked_then_plain():
            start(True)
            start(False)
        for target in (lambda: start(False), marked_then_plain):
            thread = threading.Thread(target=target)
            thread.start()
            thread.join()
        print(" ".join(said))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["refused", "ran", "refused"], done.stdout + done.stderr


def test_the_guard_never_loads_a_lazily_imported_module():
    """CuPy 14 puts ``cupyx`` in ``sys.modules`` as a LazyLoader placeholder (loaded on first attribute access).
    The guard and the payload's module scan used to touch it: with the GPU stand-in as ``cupy`` (no GPU, or the
    emulator's bounds checks) that import failed and every GPU check was a grader fault.  Neither may load it."""
    probe = textwrap.dedent("""
        import importlib.abc, importlib.util, sys, types

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                raise SystemExit("the lazy module was loaded")

        spec = importlib.util.spec_from_loader("lazy_probe", importlib.util.LazyLoader(Loader()))
        lazy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lazy)  # lazy: nothing runs until an attribute is read
        sys.modules["lazy_probe"] = lazy
        holder = types.ModuleType("holder_probe")
        holder.lazy = lazy  # as cupy.__dict__ holds cupyx
        sys.modules["holder_probe"] = holder

        from autograder.isolation import guard
        from autograder.isolation.run import student_modules
        student_modules()
        guard.install()
        print("not loaded", type(lazy).__name__)
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0 and "not loaded _LazyModule" in done.stdout, done.stdout + done.stderr
