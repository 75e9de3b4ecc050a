"""course — команды курса (модуль 07 «Слитые операторы и FlashAttention»).

    course release [УРОК ...]      собрать solutions/ из lessons/*.py, затем notebooks/ (nbgrader)
    course check-release           ошибка, если solutions/ или notebooks/ устарели или ноутбук хранит выводы
    course lesson-text УРОК ...    записать lessons/УРОК.py из solutions/ (ноутбук правили в JupyterLab)
    course grade НОУТБУК           самостоятельно: проверить один ноутбук со всеми скрытыми тестами
    course autograde [УРОК ...]    преподавателю: проверить submitted/ в N процессах, один писатель gradebook
    course merge ПАПКА [УРОК ...]  записать в gradebook папку autograded/, проверенную на другой машине
    course report [УРОК ...]       преподавателю: отчёт по классу (одна HTML-страница)
    course export [УРОК ...]       преподавателю: оценки в grades.csv, canvas.csv (Canvas) и moodle.csv (Moodle)
    course jobs slurm|k8s --shards M [УРОК ...]   задания Slurm / Kubernetes: GPU-уроки на M машинах
    course publish ПАПКА [--repository URL]   репозиторий студентов: без решений и скрытых тестов
    course check [УРОК ...]        студенту: окружение и видимые проверки каждого ноутбука
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat  # quick: without rfc3987_syntax (autograder/__init__.py)

from . import paths as course
from .jobs import SlurmOptions

# Each command imports what it runs (release and grading bring nbgrader: 1.5 s), so `course X --help` is quick.


def cmd_release(args) -> int:
    from . import release

    for path in release.release(only=args.lesson or None):
        print(f"записан {path.relative_to(course.ROOT)}")
    return 0


def cmd_lesson_text(args) -> int:
    from .authoring import text_from_notebook

    for lesson in args.lesson:
        if lesson not in course.lessons():
            raise ValueError(f"урока {lesson!r} нет в solutions/; есть: {', '.join(course.lessons())}")
        target = course.text_source(lesson)
        if target.exists() and not args.force:
            print(f"{target.relative_to(course.ROOT)} уже есть: --force перезапишет его", file=sys.stderr)
            return 1
        nb = nbformat.read(course.source_notebook(lesson), as_version=4)
        target.parent.mkdir(exist_ok=True)
        target.write_text(text_from_notebook(nb), encoding="utf-8")
        print(f"записан {target.relative_to(course.ROOT)}")
    return 0


def notebooks_with_outputs(root: Path = course.ROOT) -> list[str]:
    """Notebooks tracked by git whose code cells carry outputs or execution counts."""
    listed = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=root, capture_output=True, text=True)
    bad = []
    for name in listed.stdout.split():
        nb = nbformat.read(root / name, as_version=4)
        if any(c.cell_type == "code" and (c.outputs or c.execution_count) for c in nb.cells):
            bad.append(name)
    return bad


def cmd_check_release(args) -> int:
    from . import release

    problems = release.stale_release() + [f"{n}: в ноутбуке сохранены выводы" for n in notebooks_with_outputs()]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("уроки правят в lessons/NN_имя.py: выполните `make release` (или `course release УРОК`) и "
              "закоммитьте lessons/, solutions/ и notebooks/ (ноутбуки без выводов)", file=sys.stderr)
        return 1
    print("solutions/ и notebooks/ собраны из lessons/, ни один ноутбук не хранит выводов")
    return 0


def cmd_grade(args) -> int:
    from . import grading

    path = Path(args.notebook).resolve()
    if not (course.ROOT / course.SOLUTIONS).is_dir():
        print("Скрытых тестов здесь нет: они есть только у преподавателя. Видимые проверки всех уроков "
              "запускает make test (course check).", file=sys.stderr)
        return 2
    lesson = args.lesson or path.stem
    if lesson not in course.lessons():
        close = [known for known in course.lessons() if path.stem.startswith(known)]
        hint = (f" Похоже на урок {close[0]}: course grade {args.notebook} --lesson {close[0]}" if close else
                " Если файл переименован, укажите урок: --lesson УРОК.")
        print(f"Неизвестный урок {lesson!r}.{hint}\nУроки: {', '.join(course.lessons())}", file=sys.stderr)
        return 2
    submission = nbformat.read(path, as_version=4)
    from ..isolation import sandbox

    ok, why = sandbox.status()
    if not ok:  # self-study: your own notebook, so grading goes on, and says so once
        print(f"Без песочницы bubblewrap ({why}): ваш ноутбук выполняется с вашими правами, как в JupyterLab.")
    with tempfile.TemporaryDirectory(prefix="course-grade-") as scratch:
        print(f"Проверяю {path.name} всеми тестами урока {lesson} (с дополнительными скрытыми)…")
        grades = grading.grade_notebooks(lesson, {"me": submission}, Path(scratch),
                                        extra_args=grading.SELF_STUDY_ARGS)["me"]
        graded = nbformat.read(Path(scratch) / "autograded" / "me" / lesson / f"{lesson}.ipynb", as_version=4)
    print(grading.verdict_table(graded, grades))
    return 0


def _selection(parser) -> None:
    parser.add_argument("lesson", nargs="*", help="уроки (по умолчанию все из gradebook)")
    gpu = parser.add_mutually_exclusive_group()
    gpu.add_argument("--only-gpu", action="store_true", help="только GPU-уроки: те, чьи проверки требуют GPU (06–09 и 11 — у него и NumPy-часть)")
    gpu.add_argument("--skip-gpu", action="store_true", help="все уроки, кроме GPU-уроков")
    parser.add_argument("--course", default=".", help="папка курса nbgrader (по умолчанию текущая)")


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        return int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError("шард пишется как K/M, например 2/3") from None


def _summary_exit(summary) -> int:
    print(summary.text())
    if summary.stopped:
        return 128 + int(getattr(signal.Signals, summary.stopped, signal.SIGINT))
    return 1 if summary.failed else 0


def cmd_autograde(args) -> int:
    from . import autograde as parallel

    gpus = args.gpus.split(",") if args.gpus else None
    return _summary_exit(parallel.autograde(
        args.course, args.lesson, workers=args.workers, force=args.force, students=args.student,
        only_gpu=args.only_gpu, skip_gpu=args.skip_gpu, shard_of=args.shard, gpus=gpus,
        sandbox="off" if args.no_sandbox else "required"))


def cmd_merge(args) -> int:
    from . import autograde as parallel

    return _summary_exit(parallel.merge(args.course, args.folder, args.lesson,
                                        only_gpu=args.only_gpu, skip_gpu=args.skip_gpu))


def cmd_report(args) -> int:
    from . import report

    out = report.write_report(args.course, args.out, args.lesson, only_gpu=args.only_gpu,
                              skip_gpu=args.skip_gpu)
    print(f"Отчёт: {out}")
    return 0


def cmd_export(args) -> int:
    from . import export_csv, folder

    course_folder = folder.load(args.course)
    folder.require_gradebook(course_folder)
    lessons = folder.select_lessons(course_folder.lessons(), args.lesson) if args.lesson else ()
    written, warnings = export_csv.export_files(course_folder, Path(args.out), lessons)
    for path in written:
        print(f"записан {path}")
    for warning in warnings:
        print(warning, file=sys.stderr)
    return 0


def cmd_jobs(args) -> int:
    from . import jobs

    slurm = jobs.SlurmOptions(cpus=args.cpus, gres=args.gres, partition=args.partition, time=args.time, mem=args.mem)
    text = jobs.render(args.engine, args.course, args.shards, args.lesson, image=args.image,
                       volume_claim=args.volume_claim, out_name=Path(args.out).name if args.out else "FILE",
                       slurm=slurm)
    if not args.out:
        sys.stdout.write(text)
        return 0
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"записан {args.out}\n{jobs.NEXT_STEPS[args.engine].format(out=args.out)}")
    return 0


def cmd_publish(args) -> int:
    from . import author_tools, publish, release, settings

    # What is refused in one line comes first: the placeholder address, no course checkout, no author's tools;
    # then students get notebooks/ as built from lessons/, never an old build (about a minute).
    repository = publish.repository_address(args.repository or settings.COURSE_REPOSITORY)
    root = Path(args.course).resolve() if args.course else course.checkout()
    publish.require_course_checkout(root)
    author_tools.require("course publish (сверка notebooks/ с lessons/)")
    stale = release.stale_release(root)
    if stale:
        print("Публикация отменена: собранные ноутбуки устарели.\n" + "\n".join(stale), file=sys.stderr)
        return 1
    written = publish.publish(Path(args.out), repository, root=root)
    print(f"Репозиторий студентов записан в {Path(args.out).resolve()}: {', '.join(p.name for p in written)}")
    return 0


def cmd_check(args) -> int:
    from . import selfcheck

    return selfcheck.main(args.lesson or None, Path(args.notebooks))


#: ``course --help`` in the students' repository (``course publish``): the one command that works there.
STUDENT_DESCRIPTION = """course — команда курса в репозитории студентов (модуль 07 «Слитые операторы и FlashAttention»).

    course check [УРОК ...]        окружение и видимые проверки каждого ноутбука (это и делает make test)
"""

#: What the students' repository says to an instructor's command: one line, what to do instead.
INSTRUCTORS_ONLY = ("course {command}: эта команда есть только в репозитории курса у преподавателя. Здесь: "
                    "make test (или course check [УРОК]) — видимые проверки, make lab — JupyterLab.")

STUDENT_REFUSALS = {"grade": "course grade: скрытых тестов здесь нет, они есть только у преподавателя. Видимые проверки: "
                             "make test (или course check УРОК)."}
UNKNOWN_COMMAND = "course {command}: такой команды нет. Есть одна: course check [УРОК] (её запускает make test)."


def students_repository() -> bool:
    """This package is the copy in the students' repository (``course publish`` marks it: settings.STUDENTS_EDITION);
    not "no solutions/ beside it", which is also an instructor's plain ``pip install`` grading a class folder."""
    from . import settings

    return settings.STUDENTS_EDITION


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="студенту: окружение и видимые проверки каждого ноутбука")
    p.add_argument("lesson", nargs="*", help="уроки (по умолчанию все)")
    p.add_argument("--notebooks", default="notebooks", help="папка с уроками (по умолчанию notebooks)")
    p.set_defaults(run=cmd_check)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if students_repository():
        return _students_main(argv)
    return _run(parse(build_parser(), argv))


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, where lessons may also follow the options (``course jobs slurm --shards 3 08 11``,
    ``course merge FOLDER --only-gpu 08``): argparse fills a command's list of lessons from the first run of
    positional words only, and would call the later ones unrecognised."""
    args, rest = parser.parse_known_args(argv)
    if rest and isinstance(getattr(args, "lesson", None), list) and not any(w.startswith("-") for w in rest):
        args.lesson.extend(rest)
    elif rest:
        parser.error("unrecognized arguments: " + " ".join(rest))
    return args


def build_parser() -> argparse.ArgumentParser:
    """The course's own `course` command line (the job templates of `course jobs` are checked against it)."""
    parser = argparse.ArgumentParser(prog="course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    jobs_defaults = SlurmOptions()
    p = sub.add_parser("release", help="собрать solutions/ из lessons/*.py, затем notebooks/ из solutions/")
    p.add_argument("lesson", nargs="*")
    p.set_defaults(run=cmd_release)
    p = sub.add_parser("check-release", help="ошибка, если solutions/ или notebooks/ устарели или хранят выводы")
    p.set_defaults(run=cmd_check_release)
    p = sub.add_parser("lesson-text", help="записать lessons/УРОК.py из solutions/УРОК/УРОК.ipynb")
    p.add_argument("lesson", nargs="+")
    p.add_argument("--force", action="store_true", help="перезаписать существующий lessons/УРОК.py")
    p.set_defaults(run=cmd_lesson_text)
    p = sub.add_parser("grade", help="проверить один ноутбук со всеми скрытыми тестами")
    p.add_argument("notebook")
    p.add_argument("--lesson", help="урок, если имя файла другое")
    p.set_defaults(run=cmd_grade)
    p = sub.add_parser("autograde", help="проверить все сданные работы в N процессах")
    _selection(p)
    p.add_argument("--workers", type=int, help="процессов (по умолчанию — число ядер)")
    p.add_argument("--force", action="store_true", help="перепроверить и уже проверенные работы")
    p.add_argument("--student", action="append", default=[], help="только этот студент (можно повторять)")
    p.add_argument("--shard", type=_shard, help="K/M: только K-я из M частей работ (для нескольких машин)")
    p.add_argument("--gpus", help="номера GPU через запятую: каждому процессу свой GPU")
    p.add_argument("--no-sandbox", action="store_true",
                   help="проверять без песочницы bubblewrap (код студентов не изолирован: только для своих работ)")
    p.set_defaults(run=cmd_autograde)
    p = sub.add_parser("merge", help="записать работы, проверенные на другой машине")
    p.add_argument("folder", help="папка autograded/ с другой машины")
    _selection(p)
    p.set_defaults(run=cmd_merge)
    p = sub.add_parser("report", help="отчёт по классу: одна HTML-страница")
    _selection(p)
    p.add_argument("--out", default="class_report.html", help="куда записать HTML")
    p.set_defaults(run=cmd_report)
    p = sub.add_parser("export", help="оценки класса: grades.csv, canvas.csv и moodle.csv для импорта в LMS")
    p.add_argument("lesson", nargs="*", help="уроки (по умолчанию выданные: со сданными работами или сроком сдачи)")
    p.add_argument("--course", default=".", help="папка курса nbgrader (по умолчанию текущая)")
    p.add_argument("--out", default=".", help="папка, куда записать три файла (по умолчанию текущая)")
    p.set_defaults(run=cmd_export)
    p = sub.add_parser("jobs", help="задания Slurm или Kubernetes: GPU-уроки класса на M машинах, затем merge")
    p.add_argument("engine", choices=("slurm", "k8s"), help="slurm: скрипт sbatch с массивом задач; "
                                                            "k8s: Indexed Job Kubernetes (YAML)")
    p.add_argument("lesson", nargs="*", help="GPU-уроки (по умолчанию все GPU-уроки из gradebook)")
    p.add_argument("--shards", type=int, required=True, help="M: на сколько машин (задач) разделить работы")
    p.add_argument("--course", default=".", help="папка курса nbgrader (по умолчанию текущая); для Slurm — "
                                                 "на общей файловой системе узлов")
    p.add_argument("--image", help="k8s: образ контейнера с пакетом курса, CUDA и bubblewrap")
    p.add_argument("--volume-claim", default="course-folder",
                   help="k8s: PersistentVolumeClaim с папкой курса (по умолчанию course-folder)")
    p.add_argument("--out", help="куда записать (по умолчанию — в stdout)")
    p.add_argument("--cpus", type=int, default=jobs_defaults.cpus, help="Slurm: ядер CPU на задачу (по умолчанию "
                   f"{jobs_defaults.cpus}: компиляция и проверки рядом с GPU)")
    p.add_argument("--gres", default=jobs_defaults.gres, help=f"Slurm: ресурсы задачи (по умолчанию {jobs_defaults.gres})")
    p.add_argument("--partition", help="Slurm: раздел (partition) с GPU-узлами; по умолчанию — раздел кластера")
    p.add_argument("--time", help="Slurm: предел времени задачи, например 4:00:00; по умолчанию — раздела")
    p.add_argument("--mem", help="Slurm: память на задачу, например 32G; по умолчанию — кластера")
    p.set_defaults(run=cmd_jobs)
    p = sub.add_parser("publish", help="записать репозиторий студентов (без решений и скрытых тестов)")
    p.add_argument("out", help="папка репозитория студентов (например, его клон)")
    p.add_argument("--repository", help="адрес репозитория студентов на GitHub, https://github.com/ORG/REPO (по "
                                        "умолчанию autograder/course/settings.py: COURSE_REPOSITORY, если там не заглушка)")
    p.add_argument("--course", help="папка курса (клон его репозитория), из которой публиковать (по умолчанию "
                                    "репозиторий, где лежит пакет, или текущая папка)")
    p.set_defaults(run=cmd_publish)
    _add_check(sub)
    return parser


#: Every subcommand of the course's own `course` (the students' repository refuses all but check).
COMMANDS = ("release", "check-release", "lesson-text", "grade", "autograde", "merge", "report", "export", "jobs",
            "publish", "check")


def _students_main(argv: list[str]) -> int:
    """`course` in the students' repository: only `check`; an instructor's command is one Russian line."""
    command = argv[0] if argv else ""
    if command and not command.startswith("-") and command != "check":
        print(STUDENT_REFUSALS.get(command, INSTRUCTORS_ONLY if command in COMMANDS else UNKNOWN_COMMAND)
              .format(command=command), file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="course", description=STUDENT_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_check(sub)
    return _run(parse(parser, argv))


def _run(args) -> int:
    try:
        return args.run(args)
    except (ValueError, RuntimeError) as error:
        print(f"Ошибка: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
