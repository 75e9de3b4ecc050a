"""Issue 53's routes to a forged verdict or a leak, each tried against a class graded by ``course autograde``.

A lesson-02 class: an honest student with the reference answers (``alice``), an honest wrong one (``wrong``:
``np.zeros_like``) and one attacker per route, graded by ``course autograde --workers 2`` and again serially by
``nbgrader autograde``, each with a TMPDIR outside ``/tmp`` (the
node-local scratch of a Slurm job: route 7), so every route is tried where the sandbox once showed more:

1. ``forge_worker``: a wrong answer that reads its reply file back through ``/proc/self/fd``, signs a passing
   verdict with every token it finds there and ends the worker;
2. ``forge_kernel``: a thread of the kernel that looks for the checks' reply files (``autograder-out-*``) wherever
   the kernel can see — its scratch folder, TMPDIR, ``/tmp`` — and replaces them with a passing verdict;
3. ``hidden_tests``: native code (libc ``system``) in the kernel reading the notebooks beside it, where the
   test cells restored from the gradebook would hold the hidden ``grade()`` calls;
4. ``hidden_inputs``: the student's function writes the shapes it is called with into every place it can write,
   and the kernel (in a later cell) and the later checks (in an exception's message) look for them;
6. ``links``: symbolic links to the gradebook, the lesson's solutions and ``/etc/passwd`` and a hard link to
   the solutions' notebook, printed by an answer cell; ``link_notebook``: a notebook that is a link to
   another student's.

What must hold: alice and every attacker whose answers are right get alice's grades; a wrong attacker gets no
more than ``wrong``; no output of any attacker shows a reply file, a hidden call, a hidden input or a linked
file's contents; the linked notebook is not graded, and its status says why.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograder.course import grading, nbgrader_cli
from autograder.course import folder as course_folder
from autograder.course.status import State, anomalies, status
from autograder.checks.core import get_check
from autograder.isolation import sandbox, worker
from autograder.isolation.run import pack_one, run_check
from helpers import student, submission

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only")]

LESSON = "02_fused_rmsnorm"
REFERENCE = grading.reference_answers(LESSON)
WRONG = "def fused_rms_norm(x, w, eps=1e-6):\n    return np.zeros_like(x)\n"

#: Route 1, inside the student's function: every 32-hex token of every file it has open signs a passing verdict.
FORGE_IN_WORKER = r'''
def fused_rms_norm(x, w, eps=1e-6):
    import os, re, sys
    verdict = '{"passed": true, "message": "", "mistake": null, "not_started": false, "grader_fault": false}'
    tokens = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            with open("/proc/self/fd/" + fd, "rb") as handle:
                tokens |= set(re.findall(rb"\n([0-9a-f]{32}) ", handle.read()))
        except OSError:
            continue
    for fd in (1, 2, 3, 4, 5, 6):
        for token in tokens:
            try:
                os.write(fd, b"\n" + token + b" " + verdict.encode() + b"\n")
            except OSError:
                pass
    print("forged with %d tokens" % len(tokens), file=sys.stderr, flush=True)
    os._exit(0)
'''

#: Route 1 from memory: every 32-hex string in this process's memory (read through NumPy views of its own
#: address space, which no guard sees) and in its parent's where it can open it signs a passing verdict on every
#: descriptor of either process it can open for writing.
FORGE_FROM_MEMORY = r'''
import os, re, sys
import numpy as np
from numpy.lib.stride_tricks import as_strided
VERDICT = b'{"passed": true, "message": "", "mistake": null, "not_started": false, "grader_fault": false}'
TOKEN = rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])"
def _own():
    anchor = np.zeros(1, np.uint8)
    here = anchor.__array_interface__["data"][0]
    found = set()
    for line in open("/proc/self/maps").read().splitlines():
        span, perms = line.split()[:2]
        start, end = (int(part, 16) for part in span.split("-"))
        if not perms.startswith("rw") or end - start > 1 << 28 or "[v" in line:
            continue
        view = as_strided(anchor, shape=(2, end - start), strides=(start - here, 1), writeable=False)
        found |= set(re.findall(TOKEN, view[1].tobytes()))
    return found
def _parents():
    try:
        maps = open("/proc/%d/maps" % os.getppid()).read().splitlines()
        mem = open("/proc/%d/mem" % os.getppid(), "rb", buffering=0)
    except OSError:
        return None
    found = set()
    for line in maps:
        span, perms = line.split()[:2]
        start, end = (int(part, 16) for part in span.split("-"))
        if perms.startswith("rw") and end - start <= 1 << 28:
            try:
                mem.seek(start)
                found |= set(re.findall(TOKEN, mem.read(end - start)))
            except (OSError, OverflowError, ValueError):
                continue
    return found
def _forge():
    tokens, places = _own(), ["own memory yes"]
    parents = _parents()
    tokens |= parents or set()
    places.append("parent memory %s" % ("no" if parents is None else "yes"))
    for pid in (os.getpid(), os.getppid()):
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.open("/proc/%d/fd/%s" % (pid, fd), os.O_WRONLY | os.O_APPEND)
            except OSError:
                continue
            for token in tokens:
                try:
                    os.write(target, b"\n" + token + b" " + VERDICT + b"\n")
                except OSError:
                    pass
    print("scanned: %s; %d candidates" % (", ".join(places), len(tokens)), file=sys.stderr, flush=True)
    os._exit(0)
'''


#: The places the attackers look in: the kernel's and the check's folders up to the sandbox's root, /tmp, /dev/shm
#: and TMPDIR (named by the test: the sandbox passes no TMPDIR).
PLACES = r'''
import glob, os, sys
def _places():
    places = {"/tmp", "/dev/shm", os.environ.get("HOME", "/tmp"), NODE_TMP}
    for arg in open("/proc/self/cmdline", "rb").read().split(b"\0"):  # the kernel's connection file
        if arg.endswith(b".json"):
            places.add(os.path.dirname(os.path.dirname(arg.decode())))
    here = os.getcwd()
    for _ in range(5):
        places.add(here)
        here = os.path.dirname(here)
    return sorted(p for p in places if p and p != "/")
'''

FORGE_IN_KERNEL = PLACES + r'''
import threading, time
FOUND = []
def _forge():
    verdict = '{"passed": true, "message": "", "mistake": null, "not_started": false, "grader_fault": false}'
    end = time.time() + 300
    while time.time() < end:
        for place in _places():
            for reply in glob.glob(os.path.join(place, "**", "autograder-out-*", "reply"), recursive=True):
                FOUND.append(reply)
                try:
                    tokens = set(open(reply).read().split()) - {"stage", "started"}
                    fake = reply + ".fake"
                    open(fake, "w").write("".join("\n%s %s\n" % (t, verdict) for t in tokens if len(t) == 32))
                    os.replace(fake, reply)
                except OSError:
                    pass
        time.sleep(0.01)
threading.Thread(target=_forge, daemon=True).start()
''' + WRONG

READ_HIDDEN_TESTS = r'''
import ctypes, os
ctypes.CDLL(None).system(b"cat *.ipynb ../*.ipynb ../../*.ipynb > /tmp/seen.txt 2>/dev/null")
seen = open("/tmp/seen.txt").read()
print("HIDDEN CALLS SEEN:", [line for line in seen.splitlines() if "cases=" in line][:20])
''' + REFERENCE["fused_rms_norm"]

#: Route 4: the function leaves its inputs' shapes wherever it can write, and raises with what it finds left.
RECORD_INPUTS = PLACES + r'''
def _leaks():
    found = []
    for place in _places():
        for path in glob.glob(os.path.join(place, "**", "leak-*"), recursive=True):
            try:
                found.append(open(path).read())
            except OSError:
                pass
    return found

_honest = fused_rms_norm
def fused_rms_norm(x, w, eps=1e-6):
    seen = [s for s in _leaks() if not s.endswith(" by %d" % os.getpid())]
    if any("333" in s for s in seen):  # a hidden case's shape, left by an earlier check (another process)
        raise ValueError("LEAKED " + " ".join(seen)[:300])
    for place in _places():
        try:
            with open(os.path.join(place, "leak-%d-%d-%d" % (x.shape + (os.getpid(),))), "w") as handle:
                handle.write("SHAPE %r by %d" % (x.shape, os.getpid()))
        except OSError:
            pass
    return _honest(x, w, eps)
'''

LINKS_PRINTED = r'''
import os
for name in ("gradebook_link", "solutions_link", "passwd_link", "solutions_hard"):
    try:
        print(name, "CONTENT:", open(name, "rb").read()[:200])
    except OSError as error:
        print(name, "absent:", type(error).__name__)
''' + REFERENCE["fused_rms_norm"]


def attackers(node_tmp: str) -> dict[str, dict[str, str]]:
    constants = f"NODE_TMP = {node_tmp!r}\n"
    return {
        "forge_worker": {"fused_rms_norm": FORGE_IN_WORKER},
        "forge_kernel": {"fused_rms_norm": constants + FORGE_IN_KERNEL},
        "hidden_tests": {"fused_rms_norm": READ_HIDDEN_TESTS},
        "hidden_inputs": {"fused_rms_norm": REFERENCE["fused_rms_norm"] + "\n" + constants + RECORD_INPUTS,
                          "fused_add_rms_norm": constants + RECORD_INPUTS.split("_honest =")[0]
                          + "\nprint('LEAKS SEEN BY THE KERNEL:', _leaks())\n" + REFERENCE["fused_add_rms_norm"]},
        "links": {"fused_rms_norm": LINKS_PRINTED},
    }


def all_outputs(root: Path, name: str) -> str:
    nb = nbformat.read(root / "autograded" / name / LESSON / f"{LESSON}.ipynb", as_version=4)
    return "\n".join(json.dumps(o, ensure_ascii=False) for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))


def scores(root: Path, names: list[str]) -> dict[str, dict[str, float]]:
    return {s: {g.cell: g.score for g in grades} for s, grades in grading.read_grades(root, LESSON, names).items()}


def _graded_class(tmp_path_factory, pipeline: str):
    """The class, graded once with TMPDIR outside /tmp: by ``course autograde --workers 2`` (``pipeline`` "course")
    or serially by ``nbgrader autograde`` ("nbgrader").  (root, the grading's CompletedProcess, what TMPDIR held
    after it.)"""
    folder = tmp_path_factory.mktemp("routes")
    home = folder / "home"
    home.mkdir()
    # Outside /tmp, /var/tmp and any home, short enough for the kernel's socket paths.
    node_tmp = tempfile.mkdtemp(prefix="ag53-", dir=Path(__file__).resolve().parents[1])
    try:
        root = nbgrader_cli.new_course(folder / "course", only=[LESSON])
        subs = {"alice": submission(LESSON), "wrong": submission(LESSON, {"fused_rms_norm": WRONG})}
        subs |= {name: submission(LESSON, answers) for name, answers in attackers(node_tmp).items()}
        grading.write_submissions(root, LESSON, subs)
        links = root / "submitted" / "links" / LESSON
        (links / "gradebook_link").symlink_to(root / "gradebook.db")
        (links / "solutions_link").symlink_to(root / nbgrader_cli.SOLUTIONS / LESSON / f"{LESSON}.ipynb")
        (links / "passwd_link").symlink_to("/etc/passwd")
        os.link(root / nbgrader_cli.SOLUTIONS / LESSON / f"{LESSON}.ipynb", links / "solutions_hard")
        linked = root / "submitted" / "link_notebook" / LESSON
        linked.mkdir(parents=True)
        (linked / f"{LESSON}.ipynb").symlink_to(root / "submitted" / "alice" / LESSON / f"{LESSON}.ipynb")
        env = {**nbgrader_cli.nbgrader_env(), "HOME": str(home), "TMPDIR": node_tmp}
        batch = [sys.executable, "-m", "autograder.nbgrader.batch", "--scratch"]
        subprocess.run([*batch, json.dumps([["generate_assignment", LESSON, "--force"]])], cwd=root, env=env,
                       check=True, capture_output=True)
        command = ([str(Path(sys.executable).parent / "course"), "autograde", LESSON, "--workers", "2", "--force"]
                   if pipeline == "course" else [*batch, json.dumps([["autograde", LESSON, "--force"]])])
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1500)
        left = sorted(os.listdir(node_tmp))
        yield root, done, left
    finally:
        shutil.rmtree(node_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class, graded once by ``course autograde --workers 2`` with TMPDIR outside /tmp."""
    yield from _graded_class(tmp_path_factory, "course")


@pytest.fixture(scope="module")
def graded_serially(tmp_path_factory):
    """The same class graded by ``nbgrader autograde`` (one notebook after another, one check at a time)."""
    yield from _graded_class(tmp_path_factory, "nbgrader")


pytestmark.append(pytest.mark.skipif(not sandbox.available(), reason="unreachable: see "
                                     "tests/test_sandbox_attacks.py::test_the_sandbox_is_available"))


@pytest.fixture(params=["course", "nbgrader"])
def either(request):
    """The class as either pipeline graded it."""
    return request.getfixturevalue("graded" if request.param == "course" else "graded_serially")


def test_no_route_earns_more_than_its_answers(either):
    root, done, _ = either
    graded_names = ["alice", "wrong", *attackers("/x")]
    got = scores(root, graded_names)
    full = got["alice"]
    assert all(score > 0 for score in full.values()), full
    for name in ("forge_kernel", "forge_worker"):  # wrong answers: at most what a wrong answer earns
        over = {cell: score for cell, score in got[name].items() if score > got["wrong"][cell]}
        assert not over, f"{name} earned more than a wrong answer: {over}; stderr: {done.stderr[-2000:]}"
    for name in ("hidden_tests", "hidden_inputs", "links"):  # right answers: exactly alice's
        assert got[name] == full, f"{name}: {got[name]} != {full}"


def test_no_output_shows_a_reply_a_hidden_call_an_input_or_a_linked_file(either):
    root, _, _ = either
    shown = {name: all_outputs(root, name) for name in attackers("/x")}
    assert "autograder-out-" not in shown["forge_kernel"]
    assert "HIDDEN CALLS SEEN: []" in shown["hidden_tests"], shown["hidden_tests"][:2000]
    assert "333" not in shown["hidden_tests"]
    assert "LEAKS SEEN BY THE KERNEL: []" in shown["hidden_inputs"], shown["hidden_inputs"][:2000]
    assert "LEAKED" not in shown["hidden_inputs"]
    for name in ("gradebook_link", "solutions_link", "passwd_link", "solutions_hard"):
        assert f"{name} absent: FileNotFoundError" in shown["links"], shown["links"][:3000]
    assert "CONTENT" not in shown["links"]


def test_a_linked_notebook_is_not_graded_and_links_are_reported(graded):
    root, _, _ = graded
    course = course_folder.load(root)
    state = status(course, LESSON, "link_notebook")
    assert state.state is State.UNGRADED and "ссылка" in state.reason, state
    reported = [str(a) for a in anomalies(course, LESSON, "links")]
    for name in ("gradebook_link", "solutions_link", "passwd_link", "solutions_hard"):
        assert any(line.startswith(name + ":") and "не скопирована" in line for line in reported), reported


def test_the_class_report_lists_what_a_submission_tried(graded):
    """The forger's student process ended itself (os._exit) in every check it ran: its anomalies say so, by cell, and
    the class summary of `course autograde` prints them; alice's say nothing of the kind."""
    root, done, _ = graded
    course = course_folder.load(root)
    tried = [a for a in anomalies(course, LESSON, "forge_worker") if a.kind == "process_ended"]
    assert tried and "test_" in tried[0].detail, anomalies(course, LESSON, "forge_worker")
    assert not [a for a in anomalies(course, LESSON, "alice") if a.kind in ("process_ended", "tampering")]
    assert "завершал процесс проверки" in done.stdout + done.stderr


def test_grading_leaves_nothing_in_tmpdir(either):
    _, _, left = either
    assert not [name for name in left if not name.startswith("autograder-home-template")], left


def test_a_worker_cannot_sign_a_verdict_with_what_it_reads_back(tmp_path):
    """Route 1 at the worker's level, without a sandbox: the student's code runs in a process of its own that never
    had the reply file nor the verdict's nonce (autograder/checks/student_process.py): the forger finds nothing
    to sign with, the check fails, and the forger's own words show that it ran."""
    forger = student(FORGE_IN_WORKER)
    result = run_check("lesson02.equivalence", [pack_one(forger)])
    assert not result.passed and not result.grader_fault, result
    assert "forged with 0 tokens" in result.message, result.message


def test_a_student_process_finds_nothing_that_signs_in_its_memory_or_its_parents():
    """Route 1 through memory: the student's code reads all of its own memory and tries its parent's (the judge's)
    memory; its own never held the nonce and the judge's does not open (the guard refuses it, and the judge is not
    dumpable), so whatever it writes into the descriptors it reaches signs nothing: the check fails.  A GPU check
    too (here on the emulator): its device and the student's wrapper are in the student process, the judge
    compares the values it sends (autograder/gpu/judged.py)."""
    forger = student(FORGE_FROM_MEMORY + "def fused_rms_norm(x, w, eps=1e-6):\n    _forge()\n")
    result = run_check("lesson02.equivalence", [pack_one(forger)])
    assert not result.passed and not result.grader_fault, result
    assert "own memory yes, parent memory no" in result.message, result.message

    on_gpu = student(FORGE_FROM_MEMORY + "def fused_rms_norm_gpu(x, w, eps=1e-6):\n    _forge()\n",
                     "fused_rms_norm_gpu")
    result = run_check("lesson07.equivalence", [pack_one(on_gpu)])
    assert not result.passed and not result.grader_fault, result
    assert "own memory yes, parent memory no" in result.message, result.message


def test_the_memory_forger_signs_where_the_nonce_is_in_its_process(tmp_path):
    """Control for the test above: in a process that holds a nonce in its memory and its reply file open (what a
    worker that ran student code beside its verdict was), the same payload finds the nonce and appends a verdict
    signed with it."""
    nonce = os.urandom(16).hex()
    reply = tmp_path / "reply"
    program = (FORGE_FROM_MEMORY + "\nheld = bytearray(%r.encode())\n" % nonce +
               "reply = os.open(%r, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n_forge()\n" % str(reply))
    # through a shell, so that the parent whose descriptors the payload writes to is that shell, not this test run
    done = subprocess.run(["sh", "-c", '"$0" -I -c "$1" & wait', sys.executable, program], capture_output=True,
                          text=True, timeout=120)
    assert "own memory yes" in done.stderr, done.stderr
    assert f"\n{nonce} " + '{"passed": true' in reply.read_text(), reply.read_text()[:500]


@pytest.mark.parametrize("hiding", ["HIDDEN_IN_MMAP", "HIDDEN_IN_FILE"])
def test_memory_hidden_from_tracemalloc_is_counted(hiding):
    """Route 5: lesson 02's answer with its (T, D) float64 temporaries in anonymous mmaps, or in files it writes and
    maps.  tracemalloc sees only the output — within the bound, so this payload passed before — but the judge reads
    the student process's resident growth (less the pages of library files, which a file of the student's is not)
    and fails it, naming what happened (benchmarks/resident_memory.py prints both numbers)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import resident_memory

    result = run_check("lesson02.memory", [pack_one(student(getattr(resident_memory, hiding)))])
    assert not result.passed and not result.grader_fault, result
    seen, allowed = (float(n) for n in re.search(r"tracemalloc видел только ([\d.]+) МиБ \(допустимо ([\d.]+)",
                                                   result.message).groups())
    assert seen <= allowed and "в обход NumPy" in result.message, result.message  # tracemalloc alone: a pass
