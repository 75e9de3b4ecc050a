"""``course jobs slurm|k8s --shards M``: the class's GPU lessons graded on M GPU machines by the engine the
instructor runs: a Slurm array job or a Kubernetes Indexed Job, rendered from templates/ (Jinja2).

Task i of M (Slurm's SLURM_ARRAY_TASK_ID, Kubernetes's JOB_COMPLETION_INDEX: both from 0) grades shard i+1 of M
(``course autograde --shard K/M``, K from 1: :func:`autograder.course.folder.shard`) in a private copy of the
class folder, and copies its ``autograded/`` to ``RESULTS/K/`` in the class folder; ``course merge RESULTS/K``
for every K records them in the class gradebook (Slurm: a job that depends on the array; Kubernetes: the
command the file names, after ``kubectl wait``).
"""
from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

#: The class folder's subfolder where each task leaves its shard's graded notebooks: RESULTS/K/.
RESULTS = "gpu_shards"
ENGINES = {"slurm": ("slurm.sbatch.j2", "SLURM_ARRAY_TASK_ID"), "k8s": ("k8s.yaml.j2", "JOB_COMPLETION_INDEX")}
#: Kubernetes: where the pods mount the class folder and their scratch folder.
K8S_MOUNT, K8S_SCRATCH = "/course", "/scratch"
#: What `course jobs --out FILE` prints after writing it.
NEXT_STEPS = {"slurm": "дальше: bash {out} (отправит задачи и после них course merge; course должен быть в PATH)",
              "k8s": "дальше: kubectl apply -f {out}, затем kubectl wait и course merge, как написано в начале файла"}


def autograde_command(lessons: list[str]) -> str:
    """A task's grading: its shard ($SHARD, set by the task), the GPU lessons, one process for its one GPU."""
    return 'course autograde --shard "$SHARD" ' + shlex.join(["--only-gpu", "--workers", "1", *lessons])


def merge_command(shards: int, lessons: list[str]) -> str:
    """Every shard's results recorded in the class gradebook (run in the class folder); fails if one failed, and
    exits no shell (it is also what an instructor types)."""
    return (f'failed=; for k in $(seq 1 {shards}); do course merge "{RESULTS}/$k" '
            + shlex.join([*lessons, "--only-gpu"]) + ' || failed=1; done; test -z "$failed"')


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """What a cluster sets per task: Slurm's ``#SBATCH`` lines (None: the site's default); Kubernetes takes
    ``cpus`` and ``mem`` as the pod's requests (and the memory as its limit)."""

    cpus: int = 8  # a task's CPU cores: the grader's processes beside the GPU (compilation, the checks)
    gres: str = "gpu:1"
    partition: str | None = None
    time: str | None = None  # Slurm's format: minutes, or D-HH:MM:SS
    mem: str | None = None  # e.g. 32G (Kubernetes: 32Gi); None: Slurm's default, K8S_MEMORY on Kubernetes


#: A Kubernetes pod's memory when --mem does not say: the checks' 4 GiB caps, the kernel's 8 GiB and CuPy beside.
K8S_MEMORY = "16Gi"


def copied(folder) -> list[str]:
    """What a task copies of the class folder: only what grading reads (nbgrader's config, the gradebook, the
    source, release and submitted folders), relative to it — never the environment, .git, node_modules or the hub's
    state (root's, unreadable to the task: `tar` stopped there)."""
    coursedir = folder.coursedir()
    root = Path(folder.root).resolve()
    candidates = ["nbgrader_config.py", folder.db_path, coursedir.source_directory, coursedir.release_directory,
                  coursedir.submitted_directory]
    found = []
    for candidate in candidates:
        path = Path(candidate) if Path(candidate).is_absolute() else root / candidate
        if path.exists() and root in path.resolve().parents:
            found.append(str(path.resolve().relative_to(root)))
    return list(dict.fromkeys(found))


def render(engine: str, course: Path | str, shards: int, lessons: list[str] = (), *, image: str | None = None,
           volume_claim: str = "course-folder", out_name: str = "FILE",
           slurm: SlurmOptions = SlurmOptions()) -> str:
    """The job file for ``engine`` ("slurm" or "k8s"): ``shards`` tasks grading the GPU lessons of the class in
    ``course`` (``lessons``, or all GPU lessons of its gradebook)."""
    import jinja2

    from .folder import load, require_gradebook, select_lessons

    if engine not in ENGINES:
        raise ValueError(f"движок {engine!r} неизвестен: есть {', '.join(ENGINES)}")
    if shards < 1:
        raise ValueError(f"--shards {shards}: нужно хотя бы 1 (сколько машин с GPU получат части класса)")
    if engine == "k8s" and not image:
        raise ValueError("для Kubernetes укажите образ: --image РЕЕСТР/ОБРАЗ:ТЕГ (пакет курса с extra gpu, CUDA, "
                         "bubblewrap)")
    folder = load(course)
    require_gradebook(folder)
    chosen = select_lessons(folder.lessons(), lessons, only_gpu=True)
    if not chosen:
        raise ValueError("среди выбранных уроков нет GPU-уроков: для CPU-уроков хватит course autograde на одной "
                         "машине (или --shard K/M на нескольких)")
    template, index_var = ENGINES[engine]
    environment = jinja2.Environment(loader=jinja2.PackageLoader("autograder.course", "templates"),
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters["shquote"] = shlex.quote
    context = dict(shards=shards, lessons=chosen, results=RESULTS, course=str(folder.root), image=image,
                   volume_claim=volume_claim, mount=K8S_MOUNT, scratch_mount=K8S_SCRATCH, out_name=out_name,
                   merge=merge_command(shards, chosen), index_var=index_var, copied=copied(folder), slurm=slurm,
                   memory=slurm.mem or K8S_MEMORY)
    task = environment.get_template("_shard_task.sh.j2").render(context, autograde=autograde_command(chosen))
    return environment.get_template(template).render(context, task=task.rstrip("\n"))
