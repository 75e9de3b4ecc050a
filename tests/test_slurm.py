"""`course jobs slurm` on a real Slurm: Debian's slurmctld, slurmd and munged started by the test on this machine (a
node with one CPU per task and two GPUs that are /dev/null and /dev/zero: Slurm hands them out, the grader finds no
NVIDIA device and grades on the PTX emulator).  The script is submitted as an instructor does (`bash grade.sbatch`):
an array of two tasks, each grading its shard of lesson 06 in a private copy of the class, then the merge job.  Every
submission is graded exactly once, and the class gradebook holds what one `course autograde` of the same class gives.

Needs root (the daemons and the sandbox) and `apt-get install slurm-wlm munge` (without them `make test-full` fails
and says so); the run costs about 90 s, so `make test` runs the job file's own test (tests/test_jobs.py) with
stand-ins for `sbatch` and `course` instead.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.course import autograde as parallel, jobs, nbgrader_cli
from class_faults import grades
from helpers import free_port, full_only, submission, untouched_submission

LESSON = "06_cuda_basics"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


SLURM_CONF = """\
ClusterName=coursetest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs={cpus} RealMemory=2000 Gres=gpu:2 State=UNKNOWN
PartitionName=course Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture
def slurm(tmp_path):
    """munged, slurmctld and slurmd of this test alone (own key, socket, ports and state); SLURM_CONF for the
    commands."""
    if os.geteuid() != 0:
        pytest.skip("Slurm этого теста запускается от root (демоны и песочница)")
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:  # only `make test-full` gets here, and asked for this test: not a silent skip
        pytest.fail(f"нет {', '.join(missing)}: sudo apt-get install slurm-wlm munge (или make test без этого теста)")
    root = tmp_path / "slurm"
    for name in ("munge", "state", "spool"):
        (root / name).mkdir(parents=True, mode=0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = root / "slurm.conf"
    conf.write_text(SLURM_CONF.format(root=root, ctld_port=free_port(), slurmd_port=free_port(),
                                      cpus=max(2, os.cpu_count() or 2)))
    (root / "gres.conf").write_text("AutoDetect=off\nName=gpu File=/dev/null\nName=gpu File=/dev/zero\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munge = root / "munge"
    started = []
    try:
        subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={munge / 'munge.socket'}",
                        f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                        f"--seed-file={munge / 'munged.seed'}"], check=True, capture_output=True)
        started.append(munge / "munged.pid")
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-c"], env=env, check=True, capture_output=True)
            started.append(root / f"{daemon}.pid")
            time.sleep(1)
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, (root / "slurmctld.log").read_text()[-3000:]
            time.sleep(0.5)
        yield env
    finally:
        for pid_file in reversed(started):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def wait_for_no_jobs(env: dict, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, subprocess.run(["squeue"], env=env, capture_output=True, text=True).stdout
        time.sleep(2)


def make_class(folder: Path) -> Path:
    nbgrader_cli.new_course(folder, only=[LESSON])
    nbgrader_cli.nbgrader("generate_assignment", LESSON, "--force", cwd=folder)
    for student, nb in (("ann", submission(LESSON)), ("ben", untouched_submission(LESSON)),
                        ("eve", submission(LESSON))):
        target = folder / "submitted" / student / LESSON
        target.mkdir(parents=True)
        nbformat.write(nb, target / f"{LESSON}.ipynb")
    return folder


@full_only("`course jobs slurm` on a real slurmctld/slurmd (two tasks of lesson 06 on the emulator, then the merge; "
           "about two minutes)", "tests/test_jobs.py (the same job file with stand-ins for sbatch and course)")
def test_a_slurm_array_grades_every_submission_once_and_the_merge_records_what_one_run_gives(slurm, tmp_path):
    course = make_class(tmp_path / "class")
    alone = tmp_path / "alone"
    shutil.copytree(course, alone)
    for name in (".venv", "node_modules", ".hub"):  # what a checkout holds: never copied into a task
        (course / name).mkdir(mode=0o700)
    script = course / "grade.sbatch"
    script.write_text(jobs.render("slurm", course, 2, [LESSON], slurm=jobs.SlurmOptions(cpus=1)))
    env = {**slurm, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # `course` on PATH
    sent = subprocess.run(["bash", str(script)], cwd=course, env=env, capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0 and "отправлено" in sent.stdout, sent.stdout + sent.stderr
    wait_for_no_jobs(env, 900)
    logs = {p.name: p.read_text(errors="replace") for p in course.glob("course-*.log")}
    assert len(logs) == 3, logs  # two tasks and the merge
    shards = {k.name: sorted(p.parent.parent.name for p in k.glob(f"*/{LESSON}/*.ipynb"))
              for k in (course / jobs.RESULTS).iterdir()}
    assert sorted(shards) == ["1", "2"] and sorted(sum(shards.values(), [])) == ["ann", "ben", "eve"], (shards, logs)

    summary = parallel.autograde(alone, [LESSON], workers=2, progress=False)
    assert all(o.ok for o in summary.outcomes), summary.outcomes
    merged, expected = grades(course, LESSON), grades(alone, LESSON)
    assert merged == expected and set(merged) == {"ann", "ben", "eve"}, (merged, logs)
    assert sum(merged["ann"].values()) > sum(merged["ben"].values())
