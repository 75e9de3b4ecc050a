"""The test session's NVRTC compile cache (autograder/gpu/nvrtc.py, cached_compile): exact, keyed by the whole
input, used by the compile check, off outside the tests and in folders that others may write."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.checks.core import CheckFailed
from autograder.gpu import nvrtc
from autograder.isolation import sandbox

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC (cuda-bindings) is not installed")
ROOT = Path(__file__).resolve().parent.parent

GOOD = 'extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }'
BAD = 'extern "C" __global__ void k(float* y)\n{\n    float a = 1.0f\n    y[0] = a;\n}\n'


def timeless(result: nvrtc.CompileResult) -> nvrtc.CompileResult:
    """A result without ptxas's "Compile time = ... ms" lines: the one part of the log that differs between
    two compilations of the same source (nothing the checks show or parse comes from it)."""
    log = "\n".join(line for line in result.log.splitlines() if "Compile time" not in line)
    return dataclasses.replace(result, log=log)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "nvrtc"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(nvrtc, "_CACHE", str(folder))
    monkeypatch.setattr(nvrtc, "_IDENTITY", nvrtc._compiler_identity())
    return folder


@pytest.mark.parametrize("source", [GOOD, BAD], ids=["compiles", "fails"])
def test_a_cached_result_is_what_a_compile_gives(cache, source):
    fresh = nvrtc.compile_source(source, arch="sm_80")
    stored = nvrtc.cached_compile(source, "sm_80")  # a miss: compiled, and stored
    assert timeless(stored) == timeless(fresh)
    (entry,) = cache.glob("*.json")
    assert json.loads(entry.read_text()) == {"ok": stored.ok, "log": stored.log}
    assert nvrtc.cached_compile(source, "sm_80") == stored  # a hit: what that compile gave, to the byte
    assert not list(cache.glob(".entry-*"))


def test_the_entry_is_what_is_served_and_only_for_its_own_input(cache):
    """A hit is read from the entry (so the cache is really used), and a different source, architecture or
    compiler has another name: one submission's result is never served for another source."""
    nvrtc.cached_compile(GOOD, "sm_90")
    (entry,) = cache.glob("*.json")
    assert entry.name == nvrtc.cache_key(GOOD, "sm_90") + ".json"
    entry.write_text(json.dumps({"ok": False, "log": "kernel.cu(1): error: planted"}))
    assert nvrtc.cached_compile(GOOD, "sm_90").errors[0].message == "planted"
    names = {nvrtc.cache_key(GOOD, "sm_90"), nvrtc.cache_key(GOOD + " ", "sm_90"), nvrtc.cache_key(GOOD, "sm_75"),
             nvrtc.cache_key(GOOD, "sm_90", "other.cu")}
    assert len(names) == 4
    assert nvrtc.cached_compile(GOOD + "\n", "sm_90").ok


def test_a_damaged_entry_or_a_folder_it_cannot_write_just_compiles(cache, monkeypatch):
    nvrtc.cached_compile(GOOD, "sm_75")
    (entry,) = cache.glob("*.json")
    entry.write_text("{not json")
    assert timeless(nvrtc.cached_compile(GOOD, "sm_75")) == timeless(nvrtc.compile_source(GOOD, arch="sm_75"))
    monkeypatch.setattr(nvrtc, "_CACHE", str(cache / "gone"))  # in the OS sandbox: hidden, or read-only
    assert timeless(nvrtc.cached_compile(GOOD, "sm_75")) == timeless(nvrtc.compile_source(GOOD, arch="sm_75"))
    assert sorted(p.name for p in cache.iterdir() if p.suffix != ".lock") == [entry.name]


def test_the_compile_check_goes_through_the_cache(cache):
    nvrtc.compile_check(GOOD, ("k",), what="SRC")
    assert {p.stem for p in cache.glob("*.json")} == {nvrtc.cache_key(GOOD, arch) for arch in nvrtc.ARCHS}


SHOW_CACHE = "from autograder.gpu import nvrtc; print(nvrtc._CACHE)"


@pytest.mark.parametrize("mode", [0o700, 0o770, 0o707])
def test_the_cache_is_off_without_the_variable_and_in_a_folder_others_may_write(tmp_path, mode):
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    env = {k: v for k, v in os.environ.items() if k != nvrtc.CACHE_ENV}
    without = subprocess.run([sys.executable, "-c", SHOW_CACHE], env=env, cwd=ROOT, capture_output=True, text=True)
    assert without.stdout.split() == ["None"], without.stderr[-2000:]
    given = subprocess.run([sys.executable, "-c", SHOW_CACHE], env={**env, nvrtc.CACHE_ENV: str(folder)}, cwd=ROOT,
                           capture_output=True, text=True)
    assert given.stdout.split() == [str(folder) if mode == 0o700 else "None"], given.stderr[-2000:]


@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new process"])
def test_a_compile_check_in_a_worker_process_uses_the_cache(tmp_path, monkeypatch, fork):
    """The compile checks run in worker processes (autograder.notebook.run, `nbgrader autograde`): the
    variable of the test session reaches them, and their compilations land in its folder."""
    from autograder.isolation.run import run_check
    from autograder.notebook import pack

    assert nvrtc._CACHE and Path(nvrtc._CACHE).is_dir()  # tests/conftest.py turned it on for this session
    folder = tmp_path / "nvrtc"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(folder))
    source = GOOD.replace("void k(", "void scale_add(")
    result = run_check("lesson06.scale_add_compiles", pack([source]), fork=fork)
    assert result.passed, result.message
    assert {p.stem for p in folder.glob("*.json")} == {nvrtc.cache_key(source, arch) for arch in nvrtc.ARCHS}


@pytest.mark.parametrize("source", [GOOD, BAD], ids=["compiles", "fails"])
def test_a_cached_ptx_is_what_nvrtc_gives_and_a_failure_says_the_same(cache, source):
    """The emulator's PTX (nvrtc.ptx, -lineinfo) through the cache: the same text, or the same errors."""
    def made(options=()):
        try:
            return nvrtc.ptx(source, options=options)
        except CheckFailed as failure:
            return f"CheckFailed: {failure}"

    ok, text = nvrtc._ptx(source, "compute_75", "kernel.cu", ())
    first = made()  # a miss: made and stored
    assert first == (text if ok else f"CheckFailed: {nvrtc.format_errors(nvrtc._result(False, text, 'kernel.cu'), source)}")
    assert made() == first  # a hit
    assert (cache / (nvrtc.ptx_cache_key(source, "compute_75") + ".json")).exists()
    assert nvrtc.ptx_cache_key(source, "compute_75", options=("-DBC=64",)) != nvrtc.ptx_cache_key(source, "compute_75")


WAITS = """
import sys
from autograder.gpu import nvrtc
nvrtc._CACHE, nvrtc._IDENTITY = sys.argv[1], nvrtc._compiler_identity()
result = nvrtc.cached_compile(sys.argv[2], "sm_75")
print(result.errors[0].message if result.errors else "compiled")
"""


def test_a_miss_waits_for_the_same_compilation_in_progress_and_reads_its_entry(cache):
    """Two test workers needing the same kernel at once: the second waits on the first's lock, then reads."""
    import fcntl
    import time

    key = nvrtc.cache_key(GOOD, "sm_75")
    with open(cache / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "compiling"
        waiting = subprocess.Popen([sys.executable, "-c", WAITS, str(cache), GOOD], cwd=ROOT, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(3)
        assert waiting.poll() is None, waiting.communicate()
        (cache / f"{key}.json").write_text(json.dumps({"ok": False, "log": "kernel.cu(1): error: from the first"}))
    out, err = waiting.communicate(timeout=120)
    assert out.strip() == "from the first", out + err  # had it not waited, it would have compiled GOOD itself


@pytest.mark.skipif(not sandbox.available(), reason="no bubblewrap here (tests/test_sandbox.py says why)")
def test_a_sandbox_given_the_cache_reads_it_and_cannot_write_it(cache, tmp_path):
    """The test session's nbgrader runs: the cache folder comes back read-only inside the sandbox, wherever it is
    (here under the hidden /tmp); the grader's environment outside the test session names no cache at all."""
    (cache / "entry.json").write_text("{}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    probe = (f"import os; print(sorted(os.listdir({str(cache)!r}))); "
             f"open({str(cache / 'forged.json')!r}, 'w')")
    argv = sandbox.command(sandbox.Sandbox(scratch=str(scratch)), [sys.executable, "-c", probe],
                           env={"PATH": os.environ["PATH"], nvrtc.CACHE_ENV: str(cache)}, cwd=str(scratch))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "['entry.json']" in done.stdout and "Read-only file system" in done.stderr, done.stdout + done.stderr
    assert not (cache / "forged.json").exists()
