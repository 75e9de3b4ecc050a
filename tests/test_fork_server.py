"""Is a check forked by the fork server the same process as a freshly started worker?

`autograder.isolation.run` starts CPU checks from a fork server (`autograder.isolation.worker.serve`) instead of
a new `python -I -m autograder.isolation.worker`.  A student function that reports what it sees of its
process (session, process group, open descriptors, folder, environment, limits, modules, argv,
path) must see the same in both, verdicts must be the same, and a server that dies costs a rerun,
not a grade.
"""
import os
import signal
import time

import cloudpickle
import pytest

from autograder.isolation import fork_server, sandbox
from autograder.isolation import run as isolation
from autograder.isolation.run import run_check
from helpers import reported_facts, student

#: Reports the worker process as the student's code sees it, through the check's own message: the student process
#: (autograder/checks/student_process.py) its worker forked, whose parent ("parent") is the grader or the server.
REPORT = """
def fused_rms_norm(x, w, eps=1e-6):
    import os, sys, resource, zlib
    digest = lambda items: (len(items), zlib.crc32(repr(items).encode()))
    facts = {
        "in its worker's session": os.getsid(0) == os.getppid(),
        "in its worker's group": os.getpgid(0) == os.getppid(),
        "parent": int(open("/proc/%d/stat" % os.getppid()).read().rsplit(")", 1)[1].split()[1]),
        "descriptors": len(os.listdir("/proc/self/fd")),
        "folder is a fresh scratch": os.path.basename(os.getcwd()).startswith("autograder-") and os.listdir(".") == [],
        "address space": resource.getrlimit(resource.RLIMIT_AS),
        "file size": resource.getrlimit(resource.RLIMIT_FSIZE),
        "environment": digest(sorted((k, v.replace(os.environ["HOME"], "~")) for k, v in os.environ.items()
                                     if k != "AUTOGRADER_PARENT")),  # each check has a home of its own
        "argv": [os.path.basename(a) for a in sys.argv],
        "path": digest(sys.path),
        "modules": digest(sorted(m for m in sys.modules if not m.startswith("autograder.lesson"))),
        "stdin": sys.stdin.read(),
        "threads": len(os.listdir("/proc/self/task")),
        "pid differs from parent": os.getpid() != int(os.environ["AUTOGRADER_PARENT"]),
        "signals": zlib.crc32(repr([__import__("signal").getsignal(n) for n in (2, 13, 15, 25)]).encode()),
    }
    raise ValueError("FACTS" + repr(facts) + "FACTS")
"""


def facts(fork: bool | None) -> dict:
    result = run_check("lesson02.equivalence", [cloudpickle.dumps(student(REPORT))], fork=fork)
    assert not result.passed
    return reported_facts(result.message)


def test_a_forked_check_sees_the_process_a_new_worker_sees():
    spawned, forked = facts(False), facts(None)
    assert spawned.pop("parent") == os.getpid()
    assert forked.pop("parent") == fork_server.SERVER["server"].process.pid, "the fork server was not used"
    assert forked == spawned
    assert spawned["in its worker's session"] and spawned["in its worker's group"] and spawned["stdin"] == ""
    assert spawned["threads"] == 1 and spawned["address space"][0] == 4 * 2**30


@pytest.mark.parametrize("source, says", [
    ("def fused_rms_norm(x, w, eps=1e-6):\n    import os\n    os._exit(3)", "кодом 3"),
    ("def fused_rms_norm(x, w, eps=1e-6):\n    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
    ("def fused_rms_norm(x, w, eps=1e-6):\n    return np.zeros(1 << 34, np.uint8)", "MemoryError"),
    ("def fused_rms_norm(x, w, eps=1e-6):\n    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w", ""),
])
def test_forked_and_spawned_checks_give_the_same_verdict(source, says):
    spawned = run_check("lesson02.equivalence", [cloudpickle.dumps(student(source))], fork=False)
    forked = run_check("lesson02.equivalence", [cloudpickle.dumps(student(source))])
    assert (forked.passed, forked.message) == (spawned.passed, spawned.message)
    assert says in forked.message


def test_a_hang_is_killed_with_its_process_group_and_the_server_serves_on():
    hang = student("def fused_rms_norm(x, w, eps=1e-6):\n    while True:\n        pass\n")
    start = time.monotonic()
    result = run_check("lesson02.equivalence", [cloudpickle.dumps(hang)], timeout_s=1.5)
    isolation._HUNG.clear()
    assert not result.passed and "не завершилась за 1.5 с" in result.message
    assert time.monotonic() - start < 10
    good = student("def fused_rms_norm(x, w, eps=1e-6):\n"
                   "    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w\n")
    assert run_check("lesson02.equivalence", [cloudpickle.dumps(good)]).passed


def test_a_server_killed_during_a_check_costs_a_rerun_not_the_grade():
    good = student("def fused_rms_norm(x, w, eps=1e-6):\n    import time\n    time.sleep(1.5)\n"
                   "    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w\n")
    run_check("lesson02.zeros", [cloudpickle.dumps(good)])  # the server is up
    server = fork_server.SERVER["server"]

    def kill_server_soon():
        time.sleep(0.7)
        os.kill(server.process.pid, signal.SIGKILL)

    import threading
    threading.Thread(target=kill_server_soon, daemon=True).start()
    result = run_check("lesson02.equivalence", [cloudpickle.dumps(good)])
    assert result.passed, result.message
    assert server.dead() and fork_server.SERVER.get("server") is not server
    assert run_check("lesson02.equivalence", [cloudpickle.dumps(good)]).passed  # a new server


def test_the_fork_server_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_FORK_SERVER", "0")
    before = fork_server.SERVER.get("server")
    good = student("def fused_rms_norm(x, w, eps=1e-6):\n"
                   "    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w\n")
    assert run_check("lesson02.zeros", [cloudpickle.dumps(good)]).passed
    assert fork_server.SERVER.get("server") is before


@pytest.mark.skipif(bool(sandbox.gpu_devices()), reason="this machine has a GPU: its GPU checks start new workers")
def test_a_gpu_check_on_the_emulator_is_forked_like_a_cpu_check():
    """Without an NVIDIA device a GPU check runs on the PTX emulator, a CPU program: it is forked by the same server
    as the CPU checks (no interpreter start for each; the server never touches a GPU), and says where it ran."""
    def wrapper(*args, **kwargs):  # runs in the student process: its parent is the worker (the judge)
        import os
        worker_parent = int(open("/proc/%d/stat" % os.getppid()).read().rsplit(")", 1)[1].split()[1])
        raise ValueError(f"PARENT{worker_parent}PARENT")

    assert run_check("lesson02.equivalence", [cloudpickle.dumps(student(REPORT))]).passed is False
    server = fork_server.SERVER["server"]
    result = run_check("lesson07.equivalence", [cloudpickle.dumps(wrapper)])
    assert not result.passed and "проверено на эмуляторе GPU" in result.message, result.message
    assert f"PARENT{server.process.pid}PARENT" in result.message, "not forked by the CPU checks' server"
    assert fork_server.SERVER["server"] is server
