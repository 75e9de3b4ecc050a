"""Does the OS sandbox (autograder/isolation/sandbox.py) show a check only what it may see, and does grading refuse
to run without it where it must?  (The class-wide attacks: tests/test_sandbox_attacks.py.)"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

from autograder.course import paths as course

from autograder.course import grading, nbgrader_cli
from autograder.isolation import run as isolation, sandbox
from autograder.isolation.run import run_check
from helpers import submission

ROOT = Path(__file__).resolve().parent.parent
needs_bwrap = pytest.mark.skipif(not sandbox.available(), reason="see tests/test_sandbox_attacks.py::"
                                                                 "test_the_sandbox_is_available")
LESSON = "02_fused_rmsnorm"

#: A student function that reports what its process sees, through the check's message.
LOOK_AROUND = """
def fused_rms_norm(x, w, eps=1e-6):
    import os, socket
    def visible(path):
        try:
            return sorted(os.listdir(path))
        except OSError as error:
            return type(error).__name__
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=2)
        net = "connected"
    except OSError as error:
        net = type(error).__name__
    facts = {"course": visible(COURSE), "home": visible(HOME), "secret_env": os.environ.get("COURSE_SECRET_TOKEN"),
             "pids": len([p for p in os.listdir("/proc") if p.isdigit()]), "net": net,
             "package": os.path.isdir(PACKAGE), "write_course": None}
    try:
        open(os.path.join(COURSE, "x"), "w")
        facts["write_course"] = "written"
    except OSError as error:
        facts["write_course"] = type(error).__name__
    raise ValueError("FACTS" + repr(facts) + "FACTS")
"""


def student(source: str, name: str = "fused_rms_norm", **constants):
    namespace = {"__name__": "__main__", "np": np, **constants}
    exec(compile(textwrap.dedent(source), "<student>", "exec"), namespace)
    return namespace[name]


@needs_bwrap
@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new process"])
def test_a_sandboxed_check_sees_neither_the_course_nor_the_home_nor_the_network(tmp_path, monkeypatch, fork):
    course_dir, home = tmp_path / "course", Path(os.path.expanduser("~"))
    (course_dir / "solutions").mkdir(parents=True)
    monkeypatch.setenv("COURSE_SECRET_TOKEN", "do-not-leak")
    listener = __import__("socket").create_server(("127.0.0.1", 0))
    function = student(LOOK_AROUND, COURSE=str(course_dir), HOME=str(home), PORT=listener.getsockname()[1],
                       PACKAGE=os.path.dirname(isolation.__file__))
    scratch = tempfile.mkdtemp(prefix="autograder-sandbox-", dir=tmp_path)
    with isolation.sandboxed(sandbox.Sandbox(scratch=scratch, hidden=(str(course_dir),))):
        result = run_check("lesson02.equivalence", [cloudpickle.dumps(function)], fork=fork)
    facts = ast.literal_eval(result.message.split("FACTS")[1])
    assert facts["course"] == [], facts
    needed = sandbox.needed_paths()  # the home shows only the way to what the grader's programs need (a pyenv)
    assert all(any(p.startswith(os.path.join(str(home), entry)) for p in needed) for entry in facts["home"]), facts
    assert facts["secret_env"] is None and facts["net"] == "ConnectionRefusedError", facts
    assert facts["write_course"] in ("OSError", "PermissionError"), facts  # read-only, empty
    assert facts["package"] and facts["pids"] <= 4, facts  # bubblewrap's init, (the server,) the worker, its student process


@needs_bwrap
def test_a_gpu_check_in_the_sandbox_without_a_gpu_runs_on_the_emulator_or_says_it_needs_one(tmp_path, monkeypatch):
    """Without a GPU a student's kernel (NVRTC, then the PTX emulator) runs inside the sandbox and passes; with the
    emulator turned off the check says «нужен GPU».  Never a grader fault."""
    from autograder.gpu import runtime
    from autograder.lessons.lesson06 import checks as lesson06_cuda_basics  # noqa: F401 - registers lesson06.*

    if runtime.gpu_status()[0]:
        pytest.skip("this machine has a GPU: the check runs there")
    kernel = ('K = cp.RawKernel(r\'\'\'extern "C" __global__ void sa(float a, const float* x, const float* y, '
              'float* out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i] + '
              'y[i]; }\'\'\', "sa")\n'
              "def scale_add_gpu(a, x, y):\n    out = cp.empty_like(x)\n"
              "    K(((x.size + 255) // 256,), (256,), (cp.float32(a), x, y, out, cp.int32(x.size)))\n    return out\n")
    from autograder.gpu import emulated_cupy

    with runtime.stand_in():  # `cp` in a notebook without a GPU (runtime.choose_cupy)
        on_emulator = cloudpickle.dumps(student(kernel, "scale_add_gpu", cp=emulated_cupy))
    emulator_off = cloudpickle.dumps(student("def scale_add_gpu(a, x, y):\n    return a * x + y\n", "scale_add_gpu"))
    for emulator, payload, expected in (("1", on_emulator, "проверено на эмуляторе GPU"),
                                        ("0", emulator_off, "нужен GPU")):
        monkeypatch.setenv(runtime.EMULATOR_ENV, emulator)
        with isolation.sandboxed(sandbox.Sandbox(scratch=tempfile.mkdtemp(prefix="autograder-sandbox-", dir=tmp_path))):
            result = isolation.run_check("lesson06.scale_add", [payload])
        assert result.passed == (emulator == "1") and not result.grader_fault, result.message
        assert expected in result.message, result.message


@needs_bwrap
def test_gpu_checks_in_a_sandbox_with_the_gpu_have_a_fork_server_of_their_own(tmp_path, monkeypatch):
    """Where the machine has GPU device nodes, a GPU check's sandbox shows them and its worker is forked by a second
    server living there; CPU checks keep theirs (a lesson that mixes them restarts neither), and the end of the
    submission's sandbox stops both.  Here /dev/null stands in for the GPU's device node (the check itself then
    runs on the emulator, as without a GPU)."""
    from autograder.gpu import runtime
    from autograder.isolation import fork_server

    if runtime.gpu_status()[0]:
        pytest.skip("this machine has a GPU: tests/test_gpu_lessons.py forks its checks")
    monkeypatch.setattr(sandbox, "gpu_devices", lambda: ["/dev/null"])

    cpu_payload = cloudpickle.dumps(student(REPORT_PARENT))
    gpu_payload = cloudpickle.dumps(student(REPORT_PARENT.replace("fused_rms_norm(", "fused_rms_norm_gpu("),
                                            "fused_rms_norm_gpu"))
    box = sandbox.Sandbox(scratch=tempfile.mkdtemp(prefix="autograder-sandbox-", dir=tmp_path))
    with isolation.sandboxed(box):
        seen = []
        for check_id, payload in (("lesson02.equivalence", cpu_payload), ("lesson07.equivalence", gpu_payload),
                                  ("lesson02.zeros", cpu_payload), ("lesson07.tails", gpu_payload)):
            result = run_check(check_id, [payload])
            assert not result.grader_fault and "PARENT2PARENT" in result.message, result.message  # forked: the
            seen.append(dict(fork_server.SERVER))  # server is the second process of its sandbox (init is the first)
        servers = seen[-1]
        assert sorted(servers) == ["gpu", "server"] and servers["gpu"].sandbox.gpu and not servers["server"].sandbox.gpu
        assert seen[0]["server"] is servers["server"] and seen[1]["gpu"] is servers["gpu"], "a server was restarted"
        assert b"/dev/null" in Path(f"/proc/{servers['gpu'].process.pid}/cmdline").read_bytes()  # bubblewrap's
    assert all(server.dead() for server in servers.values()) and not fork_server.SERVER


#: A check's student code runs in a process its worker forked (autograder/checks/student_process.py): the
#: worker's parent is what the check was started from.
REPORT_PARENT = """
def fused_rms_norm(x, w, eps=1e-6):
    import os
    worker_parent = int(open("/proc/%d/stat" % os.getppid()).read().rsplit(")", 1)[1].split()[1])
    raise ValueError(f"PARENT{worker_parent}PARENT")
"""


LEAVES_A_DAEMON = """
def fused_rms_norm(x, w, eps=1e-6):
    import _posixsubprocess, os, sys
    rd, wr = os.pipe()
    argv = [sys.executable.encode(), b"-c", b"import time; time.sleep(600)  # MARKER"]
    common = (argv, [argv[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, rd, wr, True, True)
    try:
        _posixsubprocess.fork_exec(*common, -1, None, None, None, -1, None, False)
    except TypeError:
        _posixsubprocess.fork_exec(*common, -1, None, None, None, -1, None)
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w).astype(x.dtype)
"""


def marked_processes(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            pass
    return found


@needs_bwrap
def test_what_a_forked_check_leaves_running_in_the_sandbox_dies_with_the_check(tmp_path):
    """A daemon in its own session (out of reach of the check's process group) is killed once the check ends,
    and a check that times out takes the whole sandbox with it; the next check runs."""
    marker = f"MARKER{os.getpid()}"
    function = student(LEAVES_A_DAEMON.replace("MARKER", marker))
    scratch = tempfile.mkdtemp(prefix="autograder-sandbox-", dir=tmp_path)
    with isolation.sandboxed(sandbox.Sandbox(scratch=scratch)):
        result = run_check("lesson02.zeros", [cloudpickle.dumps(function)])
        assert result.passed, result.message
        time.sleep(0.5)
        assert marked_processes(marker) == []
        hang = student("def fused_rms_norm(x, w, eps=1e-6):\n    while True:\n        pass\n")
        try:
            assert "не завершилась за 2 с" in run_check("lesson02.equivalence", [cloudpickle.dumps(hang)],
                                                        timeout_s=2).message
        finally:
            isolation._HUNG.clear()
        assert run_check("lesson02.zeros", [cloudpickle.dumps(student(LEAVES_A_DAEMON.replace("MARKER", marker)))]).passed


def test_the_sandbox_command_hides_the_course_and_home_and_passes_no_stray_environment(tmp_path):
    box = sandbox.Sandbox(scratch=str(tmp_path / "scratch"), hidden=(str(tmp_path / "course"),),
                          submission=str(tmp_path / "course" / "autograded" / "s" / "l"),
                          submission_copy=str(tmp_path / "copy"))
    for folder in ("scratch", "course", "copy"):
        (tmp_path / folder).mkdir()
    if sandbox.bwrap_path() is None:
        pytest.skip("no bwrap to build a command for")
    argv = sandbox.command(box, ["python3"], env={"PATH": "/usr/bin", "HOME": "/h", "AWS_SECRET_ACCESS_KEY": "x",
                                                  "CUDA_VISIBLE_DEVICES": "0"}, cwd=str(tmp_path / "scratch"))
    pairs = list(zip(argv, argv[1:], argv[2:]))
    assert ("--tmpfs", str(tmp_path / "course"), "--ro-bind") in pairs or ["--tmpfs", str(tmp_path / "course")] \
        == argv[argv.index(str(tmp_path / "course")) - 1:argv.index(str(tmp_path / "course")) + 1]
    assert "--remount-ro" in argv and str(tmp_path / "course") in argv[argv.index("--remount-ro") + 1:]
    assert ("--bind", str(tmp_path / "copy"), box.submission) in pairs
    assert "AWS_SECRET_ACCESS_KEY" not in argv and "CUDA_VISIBLE_DEVICES" in argv
    assert os.path.realpath(os.path.expanduser("~")) in argv  # the grader's home: hidden
    assert not any(a.startswith("/dev/nvidia") for a in argv)  # no GPU asked: no device nodes
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv


# --- refusing to grade a class without it -------------------------------------------------------

@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def class_course(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refuse")
    root = nbgrader_cli.new_course(folder / "course", only=[LESSON])
    grading.write_submissions(root, LESSON, {"s1": submission(LESSON)})  # without the demonstrations: quicker
    nbgrader_cli.nbgrader_batch([("generate_assignment", LESSON, "--force")], cwd=root, scratch=True)
    return root


def without_bwrap() -> dict:
    return {**nbgrader_cli.nbgrader_env(), sandbox.BWRAP_ENV: "/nonexistent/bwrap"}


def test_nbgrader_autograde_refuses_a_class_without_the_sandbox_and_says_how_to_install_it(class_course):
    done = subprocess.run([sys.executable, "-m", "autograder.nbgrader.batch",
                           '[["autograde", "%s", "--force"]]' % LESSON], cwd=class_course, env=without_bwrap(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "Проверка класса остановлена" in done.stderr and "apt-get install bubblewrap" in done.stderr, done.stderr
    assert not (class_course / "autograded" / "s1").exists()


def test_course_autograde_refuses_without_the_sandbox_and_grades_with_one_warning_when_told(class_course):
    command = [str(Path(sys.executable).parent / "course"), "autograde", LESSON, "--workers", "1", "--force"]
    refused = subprocess.run(command, cwd=class_course, env=without_bwrap(), capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "Проверка класса остановлена" in refused.stderr, refused.stderr
    done = subprocess.run([*command, "--no-sandbox"], cwd=class_course, env=without_bwrap(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("без песочницы") == 1, done.stderr
    assert "Без песочницы (--no-sandbox)" in done.stdout, done.stdout
    from autograder.course import report

    page = report.render(report.class_stats(class_course))
    assert "Проверены без песочницы (1)" in page


def test_course_grade_of_ones_own_notebook_goes_on_without_the_sandbox_with_one_line(tmp_path):
    import nbformat

    notebook = tmp_path / f"{LESSON}.ipynb"
    nbformat.write(submission(LESSON), notebook)  # the reference without its demonstrations: quicker
    done = subprocess.run([str(Path(sys.executable).parent / "course"), "grade", str(notebook)], cwd=tmp_path,
                          env=without_bwrap(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("Без песочницы bubblewrap") == 1 and "12 из 12" in done.stdout, done.stdout


@needs_bwrap
def test_a_grader_run_from_a_linked_venv_inside_a_hidden_folder_still_starts_its_python(tmp_path):
    """An author's course folder whose .venv is a link to an environment elsewhere (the author trial: the
    kernel died before replying): the grader runs Python by the link's path, which lies in the hidden course
    folder, and the environment itself may lie in another hidden folder.  Both stay reachable, read-only."""
    elsewhere, course_dir, scratch = tmp_path / "elsewhere", tmp_path / "course", tmp_path / "scratch"
    for folder in (elsewhere, course_dir, scratch):
        folder.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(elsewhere / "env")], check=True)
    (course_dir / ".venv").symlink_to(elsewhere / "env")
    linked_python = course_dir / ".venv" / "bin" / "python"
    package_parent = str(Path(sandbox.__file__).resolve().parents[2])
    probe = (
        "import subprocess, sys\n"
        "from autograder.isolation import sandbox\n"
        f"box = sandbox.Sandbox(scratch={str(scratch)!r}, hidden=({str(course_dir)!r}, {str(elsewhere)!r}))\n"
        "argv = sandbox.command(box, [sys.executable, '-c', 'import sys; print(\"inside\", sys.prefix)'], "
        f"env={{}}, cwd={str(scratch)!r})\n"
        "done = subprocess.run(argv, capture_output=True, text=True)\n"
        "print(done.stdout, done.stderr)\n")
    site_packages = [p for p in sys.path if p.endswith("site-packages")]
    done = subprocess.run([str(linked_python), "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([package_parent, *site_packages])})
    assert f"inside {course_dir / '.venv'}" in done.stdout, done.stdout + done.stderr
