"""Does a check worker depend on nothing the grader's (or the student's) home holds?

Seen on the H200 (issue 23): every GPU check of a machine that had graded before ended as a grader fault,
«процесс проверки завершился с кодом 0, не дойдя до вашего кода».  The cause was in the grader's own
process: NVRTC wrote the terminating zero of an empty compile log into ``b" " * 1`` — the one ``b" "``
object that CPython shares across the process — after which the reply's signature (built with ``b" "``)
never matched a line.  An empty log came from a compile served by the driver's JIT cache (``~/.nv``).
These tests hold each part of the fix without a GPU: the reply survives damaged one-byte objects,
NVRTC's log gets a buffer of its own, every cache and settings folder of a worker is its own, a home full
of caches and startup files changes no verdict, and a worker lost before the student's code says where.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle
import pytest

from autograder.isolation import run as isolation
from autograder.gpu import nvrtc
from autograder.isolation import fork_server
from autograder.isolation.home import HOME_VARIABLES, home_template, use_home_template
from autograder.isolation.run import run_check
from autograder.notebook import run
from helpers import reported_facts, student

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = """
def fused_rms_norm(x, w, eps=1e-6):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w).astype(x.dtype)
"""
#: The worker's view of its own home, reported through the check's message.
REPORT_HOME = """
def fused_rms_norm(x, w, eps=1e-6):
    import os, tempfile
    home = os.environ["HOME"]
    names = %r
    facts = {"home": home, "home holds": sorted(os.listdir(home)),
             "all under home": all(os.environ[n].startswith(home) for n in names),
             "cwd": os.getcwd(), "cwd under home": os.getcwd().startswith(home)}
    raise ValueError("FACTS" + repr(facts) + "FACTS")
"""


def home_facts(fork: bool | None) -> dict:
    result = run_check("lesson02.equivalence", [cloudpickle.dumps(student(REPORT_HOME % (list(HOME_VARIABLES),)))],
                       fork=fork)
    assert not result.passed and "FACTS" in result.message, result.message
    return reported_facts(result.message)


@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new process"])
def test_every_cache_and_settings_folder_of_a_worker_is_its_own(fork):
    """Does each check see a fresh home of its own (the template's copy), with every cache variable inside it,
    gone afterwards?"""
    first, second = home_facts(fork), home_facts(fork)
    template = sorted(os.listdir(home_template()))  # matplotlib's font list, made once per grader
    for facts in (first, second):
        assert facts["home holds"] == template and facts["all under home"], facts
        assert not facts["cwd under home"], "the student's scratch folder is not the home"
        assert not facts["home"].startswith(os.path.expanduser("~") + os.sep)
    assert first["home"] != second["home"], "two checks shared a home"
    assert not os.path.exists(first["home"]), "a check's home outlived the check"


def populate(home: Path) -> dict[str, str]:
    """A home as a machine that graded before leaves it, plus what a hostile one could hold."""
    files = {
        ".nv/ComputeCache/index": b"\x00garbage index\xff" * 64,
        ".nv/ComputeCache/3/a/3a5f": os.urandom(4096),
        ".cupy/kernel_cache/0123456789abcdef.cubin": b"not a cubin",
        ".cache/matplotlib/fontlist-v390.json": b"{ not json",
        ".config/matplotlib/matplotlibrc": b"backend: no_such_backend\nfont.size: not-a-number\n",
        ".ipython/profile_default/startup/00-planted.py": b"open(__file__ + '.ran', 'w').write('ran')\n",
        ".local/lib/python3.11/site-packages/numpy.py": b"raise SystemExit('planted numpy')\n",
    }
    for name, data in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_bytes(data)
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
            "CUDA_CACHE_PATH": str(home / ".nv/ComputeCache"), "CUPY_CACHE_DIR": str(home / ".cupy/kernel_cache"),
            "MPLCONFIGDIR": str(home / ".config/matplotlib"), "IPYTHONDIR": str(home / ".ipython")}


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new process"])
def test_a_home_full_of_caches_and_startup_files_changes_no_verdict(tmp_path, monkeypatch, fork):
    """A CPU check passes, a GPU check passes (on the PTX emulator without a GPU), never a grader fault, and the
    home the grader runs with is left exactly as it was."""
    from autograder.lessons.lesson06 import checks as lesson06_cuda_basics  # noqa: F401 - registers lesson06.*

    for name, value in populate(tmp_path).items():
        monkeypatch.setenv(name, value)
    fork_server.stop()  # the server is started again with this environment
    before = tree_digest(tmp_path)
    cpu = run_check("lesson02.equivalence", [cloudpickle.dumps(student(SOLUTION))], fork=fork)
    assert cpu.passed and not cpu.grader_fault, cpu.message
    gpu_check = run("lesson06.scale_add", student("def scale_add_gpu(a, x, y):\n    return a * x + y\n",
                                                    "scale_add_gpu"))
    assert gpu_check.passed and not gpu_check.grader_fault, gpu_check.message
    assert tree_digest(tmp_path) == before
    assert not list(tmp_path.rglob("*.ran")), "a startup file of the grader's home ran in a worker"


# --- one-byte objects: the mechanism of issue 23, in a process of its own ----------------------

DAMAGE_THEN_GRADE = r"""
import json, sys
import numpy as np
from cuda.bindings import nvrtc as raw

# What the old autograder.gpu.nvrtc._program_log did: an empty log (size 1) into b" " * 1, the shared b" ".
err, program = raw.nvrtcCreateProgram(b'extern "C" __global__ void k() {}', b"k.cu", 0, [], [])
raw.nvrtcCompileProgram(program, 1, [b"-arch=compute_75"])
_, size = raw.nvrtcGetProgramLogSize(program)
assert size == 1, size
raw.nvrtcGetProgramLog(program, b" " * size)
damaged = bytes([32])[0] != 32

import cloudpickle
from autograder.isolation import run as isolation
ns = {"np": np}
exec(sys.argv[1], ns)
result = isolation.run_check("lesson02.equivalence", [cloudpickle.dumps(ns["fused_rms_norm"])])
print(json.dumps({"damaged": damaged, "reported": isolation.damaged_byte_objects(), "passed": result.passed,
                  "fault": result.grader_fault, "message": result.message}))
"""


def test_a_check_passes_in_a_process_whose_one_byte_objects_were_overwritten():
    """The grader's process after NVRTC overwrote ``b" "``: is the reply still read (a pass, not a fault)?"""
    done = subprocess.run([sys.executable, "-c", DAMAGE_THEN_GRADE, textwrap.dedent(SOLUTION)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["damaged"] and report["reported"] == [32], report
    assert report["passed"] and not report["fault"], report["message"]


COMPILE_WITH_AN_EMPTY_LOG = r"""
from autograder.gpu import nvrtc
raw = nvrtc._NVRTC
err, program = raw.nvrtcCreateProgram(b'extern "C" __global__ void k() {}', b"k.cu", 0, [], [])
raw.nvrtcCompileProgram(program, 1, [b"-arch=compute_75"])
log = nvrtc._program_log(raw, program)
print(repr(log), bytes([32])[0])
"""


@pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC (cuda-bindings) is not installed")
def test_reading_an_empty_compile_log_leaves_the_shared_bytes_alone():
    """Does the course's NVRTC wrapper read an empty log into a buffer of its own?"""
    done = subprocess.run([sys.executable, "-c", COMPILE_WITH_AN_EMPTY_LOG], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["''", "32"], done.stdout


# --- a worker lost before the student's code says where, and why ------------------------------

def test_a_worker_whose_setup_fails_sends_the_cause_as_a_grader_fault():
    """The grader's own error before the student's code (here: a bad guard setting) is a signed grader
    fault that names it, not a silent exit."""
    result = run_check("lesson02.zeros", [cloudpickle.dumps(student(SOLUTION))], secret_dirs=(12345,))
    assert result.grader_fault and not result.passed
    assert "исполнитель проверки не запустился: TypeError" in result.message, result.message


def test_a_worker_lost_before_the_students_code_says_at_which_stage(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_INJECT_WORKER_FAULT", "lesson02.zeros")
    result = run("lesson02.zeros", student(SOLUTION))
    assert result.grader_fault
    assert "с кодом 0 перед запуском вашего кода" in result.message, result.message
    assert "перезапустите ядро" in result.message and "запустите её ещё раз" not in result.message


GUARD_STOPS_THE_GRADER = r"""
import json
from autograder.isolation import guard
guard.install()
guard._state["tainted"] = True  # student code has run: the guard stays on for the grader's code too
try:
    open(guard.REPOSITORY + "/solutions/x.ipynb")
except PermissionError as error:
    grader = guard.refused_to_grader(error)
try:
    with guard.student_code():
        open(guard.REPOSITORY + "/solutions/x.ipynb")
except guard.Tampering as error:
    student = guard.refused_to_grader(error)
except PermissionError as error:
    student = guard.refused_to_grader(error)
print(json.dumps({"grader": grader, "student": student}))
"""


def test_a_guard_refusal_of_the_graders_own_code_is_told_apart_from_the_students():
    done = subprocess.run([sys.executable, "-c", GUARD_STOPS_THE_GRADER], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["grader"] and "solutions" in report["grader"], report
    assert report["student"] is None, report


def test_a_template_given_by_another_process_is_used_as_it_is(tmp_path, monkeypatch):
    """`course autograde` builds one home template for all its workers: a worker told to use it builds none."""
    from autograder.isolation import home

    monkeypatch.setattr(home, "_TEMPLATE", {})
    given = tmp_path / "template"
    (given / ".run").mkdir(parents=True)
    use_home_template(str(given))
    assert home_template() == str(given)
    assert sorted(os.listdir(given)) == [".run"]  # nothing built into it
    workers_home = tmp_path / "home"
    assert home.private_home(str(workers_home))["HOME"] == str(workers_home)
    assert sorted(os.listdir(workers_home)) == [".run"]
