"""Do the job files of `course jobs` grade every GPU submission of a class exactly once, on the engines' own terms?

* Slurm: the `#SBATCH` lines (an array of M tasks numbered from 0, one GPU each), and the script itself run by
  bash as each task (SLURM_ARRAY_TASK_ID = 0..M-1) and as the submitter (no task id: sbatch twice, the merge
  after the array);
* Kubernetes: the YAML (an Indexed Job of M completions, M in parallel, one nvidia.com/gpu each, the image, the
  class folder's volume) and its container's script run by bash as each index (JOB_COMPLETION_INDEX = 0..M-1)
  with the container's own environment.

`course` in those runs is a stand-in that parses its arguments with the real command line
(`autograder.course.cli.build_parser`) and, for `autograde --shard K/M`, "grades" what the package's own split
(`autograder.course.folder.shard`) gives shard K; so the shard numbering of the files is the parser's, and the
results are held to the split: every submission of the GPU lessons once, in the folder of its own shard.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autograder.course import cli, folder, jobs
from autograder.course.paths import is_gpu_lesson
from helpers import bare_class

LESSONS = {"02_fused_rmsnorm": 12.0, "06_cuda_basics": 10.0, "07_cupy_rmsnorm": 9.0, "11_flash_decoding": 18.0}
GPU_LESSONS = [lesson for lesson in LESSONS if is_gpu_lesson(lesson)]
STUDENTS = [f"s{n:02d}" for n in range(13)]
#: Every student hands in lesson 02 (not a GPU lesson), most hand in the GPU lessons, some not all of them.
SUBMITTED = [(s, lesson) for n, s in enumerate(STUDENTS) for lesson in LESSONS
             if lesson == "02_fused_rmsnorm" or (n + len(lesson)) % 4]

STAND_IN = """#!{python}
import json, os, sys
from pathlib import Path
from autograder.course import cli, folder

args = cli.build_parser().parse_args(sys.argv[1:])
with open(os.environ["COURSE_CALLS"], "a") as log:
    log.write(json.dumps({{"cwd": os.getcwd(), "argv": sys.argv[1:], "files": sorted(os.listdir("."))}}) + "\\n")
if args.command == "autograde":
    course = folder.load(args.course)
    chosen = folder.select_lessons(course.lessons(), args.lesson, only_gpu=args.only_gpu, skip_gpu=args.skip_gpu)
    for sub in folder.shard(folder.find_submissions(course, chosen), *args.shard):
        graded = Path("autograded", sub.student, sub.lesson)
        graded.mkdir(parents=True)
        (graded / f"{{sub.lesson}}.ipynb").write_text("{{}}")
"""


@pytest.fixture
def course_class(tmp_path) -> Path:
    return bare_class(tmp_path / "class", LESSONS, {s: {} for s in STUDENTS}, SUBMITTED)


@pytest.fixture
def stand_in(tmp_path) -> dict[str, str]:
    """The environment of a run: `course` (and `sbatch`) stand-ins first on PATH; their calls logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "course").write_text(STAND_IN.format(python=sys.executable))
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "$@" >> "$SBATCH_CALLS"\necho "4242;cluster"\n')
    for name in ("course", "sbatch"):
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "COURSE_CALLS": str(tmp_path / "course_calls.jsonl"), "SBATCH_CALLS": str(tmp_path / "sbatch_calls.txt")}


def calls(env) -> list[dict]:
    path = Path(env["COURSE_CALLS"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def everyone() -> set[tuple[str, str]]:
    return {(lesson, s) for s, lesson in SUBMITTED if lesson in GPU_LESSONS}


def results(course: Path) -> dict[int, set[tuple[str, str]]]:
    """What each shard left in RESULTS/K/: (lesson, student) pairs."""
    return {int(k.name): {(p.parent.name, p.parent.parent.name) for p in k.glob("*/*/*.ipynb")}
            for k in (course / jobs.RESULTS).iterdir()}


def assert_each_submission_once_in_its_shard(course: Path, shards: int) -> None:
    found = results(course)
    assert sorted(found) == list(range(1, shards + 1))
    split = folder.find_submissions(folder.load(course), GPU_LESSONS)
    for k, pairs in found.items():
        assert pairs == {(s.lesson, s.student) for s in folder.shard(split, k, shards)}, k
    assert sum(len(pairs) for pairs in found.values()) == len(everyone())
    assert set().union(*found.values()) == everyone() != set()


def test_the_split_of_the_sample_class_is_a_partition_for_every_count(course_class):
    """Does the package's own split, K = 1..M, give every GPU submission to exactly one shard (and refuse K = 0)?"""
    split = folder.find_submissions(folder.load(course_class), GPU_LESSONS)
    for shards in range(1, 7):
        parts = [folder.shard(split, k, shards) for k in range(1, shards + 1)]
        assert sorted(map(str, sum(parts, []))) == sorted(map(str, split))
    with pytest.raises(ValueError):
        folder.shard(split, 0, 3)


def sbatch_options(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", script, re.MULTILINE))


def test_slurm_array_tasks_grade_each_gpu_submission_once_then_the_merge_records_every_shard(course_class, stand_in,
                                                                                           tmp_path):
    shards = 4
    for name in (".venv", ".git", "node_modules", ".hub", "feedback"):  # not grading's
        (course_class / name).mkdir()
        (course_class / name / "big").write_text("x")
    script = jobs.render("slurm", course_class, shards)
    options = sbatch_options(script)
    assert options["array"] == f"0-{shards - 1}" and options["gres"] == "gpu:1" and options["cpus-per-task"] == "8"
    assert not {"partition", "time", "mem"} & set(options)  # the site's defaults
    path = tmp_path / "grade.sbatch"
    path.write_text(script)
    for task in range(shards):  # Slurm numbers an array's tasks from 0
        done = subprocess.run(["bash", str(path)], env={**stand_in, "SLURM_ARRAY_TASK_ID": str(task),
                                                         "TMPDIR": str(tmp_path)},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    graded = [c for c in calls(stand_in) if c["argv"][0] == "autograde"]
    parsed = [cli.build_parser().parse_args(c["argv"]) for c in graded]
    assert [a.shard for a in parsed] == [(k, shards) for k in range(1, shards + 1)]
    assert all(a.only_gpu and a.lesson == GPU_LESSONS and a.workers == 1 for a in parsed)
    assert all(Path(c["cwd"]) != course_class for c in graded)  # a private copy, never the class gradebook
    assert all(c["files"] == ["gradebook.db", "nbgrader_config.py", "submitted"] for c in graded), graded[0]["files"]
    assert_each_submission_once_in_its_shard(course_class, shards)
    assert not (course_class / "autograded").exists() and not list(tmp_path.glob("course-shard-*"))

    # Run as `bash grade.sbatch` outside Slurm: it submits itself, then the merge after the whole array.
    submitted = subprocess.run(["bash", str(path)], env=stand_in, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    array, merge = Path(stand_in["SBATCH_CALLS"]).read_text().splitlines()
    assert array == f"--parsable {path}"
    assert "--dependency=afterany:4242" in merge and f"--chdir={course_class}" in merge
    wrapped = merge.split("--wrap=", 1)[1]
    done = subprocess.run(["sh", "-c", wrapped], cwd=course_class, env=stand_in, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    merged = [cli.build_parser().parse_args(c["argv"]) for c in calls(stand_in) if c["argv"][0] == "merge"]
    assert [a.folder for a in merged] == [f"{jobs.RESULTS}/{k}" for k in range(1, shards + 1)]
    assert all(a.only_gpu and a.lesson == GPU_LESSONS for a in merged)


def test_slurm_takes_the_sites_partition_time_memory_and_cores(course_class, tmp_path, capsys):
    out = tmp_path / "grade.sbatch"
    assert cli.main(["jobs", "slurm", "--shards", "2", "--course", str(course_class), "--out", str(out), "--cpus", "4",
                     "--partition", "gpu-a100", "--time", "4:00:00", "--mem", "32G", "--gres", "gpu:a100:1"]) == 0
    options = sbatch_options(out.read_text())
    assert {k: options[k] for k in ("cpus-per-task", "partition", "time", "mem", "gres")} == {
        "cpus-per-task": "4", "partition": "gpu-a100", "time": "4:00:00", "mem": "32G", "gres": "gpu:a100:1"}
    assert "bubblewrap" in out.read_text()  # the nodes need it: the script says so


def test_kubernetes_indexed_job_grades_each_gpu_submission_once(course_class, stand_in, tmp_path):
    shards = 3
    job = yaml.safe_load(jobs.render("k8s", course_class, shards, image="registry.example/course:1",
                                     volume_claim="class-pvc"))
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == shards
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/course:1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert volumes["course"]["persistentVolumeClaim"]["claimName"] == "class-pvc" and "emptyDir" in volumes["scratch"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"COURSE_DIR": mounts["course"], "SCRATCH_DIR": mounts["scratch"]}
    assert container["command"][:2] == ["bash", "-c"]

    # Each pod: Kubernetes sets JOB_COMPLETION_INDEX = 0..M-1; the class folder and scratch stand where mounted.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for index in range(shards):
        done = subprocess.run(container["command"], env={**stand_in, "JOB_COMPLETION_INDEX": str(index),
                                                          "COURSE_DIR": str(course_class), "SCRATCH_DIR": str(scratch)},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    parsed = [cli.build_parser().parse_args(c["argv"]) for c in calls(stand_in)]
    assert [a.shard for a in parsed] == [(k, shards) for k in range(1, shards + 1)]
    assert_each_submission_once_in_its_shard(course_class, shards)


def test_a_failed_shard_still_returns_its_results_and_fails_its_task(course_class, stand_in, tmp_path):
    """`course autograde` exits 1 when some submission stayed ungraded: the task copies back what was graded and
    fails (Slurm/Kubernetes show it), and the merge still runs after it (afterany)."""
    script = jobs.render("slurm", course_class, 2)
    failing = Path(stand_in["PATH"].split(os.pathsep)[0]) / "course"
    failing.write_text(failing.read_text() + "sys.exit(1)\n")
    path = tmp_path / "grade.sbatch"
    path.write_text(script)
    done = subprocess.run(["bash", str(path)], env={**stand_in, "SLURM_ARRAY_TASK_ID": "1", "TMPDIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert results(course_class)[2] == {(s.lesson, s.student) for s in folder.shard(
        folder.find_submissions(folder.load(course_class), GPU_LESSONS), 2, 2)}


def test_course_jobs_says_what_is_missing(course_class, tmp_path, capsys):
    """Without an image for Kubernetes, with no GPU lesson chosen, with 0 shards: one Russian line, exit 2."""
    for argv, words in ((["jobs", "k8s", "--shards", "2"], "--image"),
                        (["jobs", "slurm", "02_fused_rmsnorm", "--shards", "2"], "нет GPU-уроков"),
                        (["jobs", "slurm", "--shards", "0"], "хотя бы 1")):
        assert cli.main([*argv, "--course", str(course_class)]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    out = tmp_path / "grade.sbatch"
    assert cli.main(["jobs", "slurm", "--shards", "2", "--course", str(course_class), "--out", str(out)]) == 0
    assert sbatch_options(out.read_text())["array"] == "0-1" and f"bash {out}" in capsys.readouterr().out


def test_lessons_may_follow_the_options_of_any_command():
    """`course jobs slurm --shards 3 08 11` and `course merge DIR --only-gpu 08`: argparse alone fills a command's
    lessons from the first run of positional words and calls the later ones unrecognised; an unknown option is
    still an error."""
    parser = cli.build_parser()
    assert cli.parse(parser, ["jobs", "slurm", "--shards", "3", "08_a", "11_b"]).lesson == ["08_a", "11_b"]
    assert cli.parse(parser, ["merge", "dir", "--only-gpu", "08_a"]).lesson == ["08_a"]
    assert cli.parse(parser, ["merge", "dir", "08_a", "--only-gpu", "11_b"]).lesson == ["08_a", "11_b"]
    with pytest.raises(SystemExit):
        cli.parse(parser, ["jobs", "slurm", "--shards", "3", "--bogus"])
    with pytest.raises(SystemExit):
        cli.parse(parser, ["grade", "a.ipynb", "b.ipynb"])  # grade takes one notebook and no lessons
