"""What a student handed in, as the grader must treat it: extra files and notebook structure.

A submission is a folder ``submitted/<student>/<lesson>/`` with the lesson's notebook and maybe
more.  Two things in it can hurt grading, and both are handled here, before any code runs:

* **Extra files.**  They are copied beside the notebook and stay importable as the student's own
  helper modules (the kernel puts the folder at the END of ``sys.path``, after the hardening,
  :func:`autograder.isolation.guard.install_kernel`; the objects that use them travel to the check by
  value, :func:`autograder.isolation.run.pack_one`).  A file named like a module the grader's Python
  can import (``numpy.py``, ``autograder.py``) is therefore never imported: :func:`extra_files`
  marks it, and the instructor is told.
* **Structure.**  The graded cells are the instructor's.  :func:`repair` makes the notebook's
  nbgrader cells exactly those of the gradebook: a deleted graded or read-only cell is restored
  from the gradebook, a duplicated one keeps its last copy (nbgrader's own rule), a cell whose
  id the gradebook does not know (a new or renamed grade cell) becomes an ordinary cell, and
  the metadata of every known cell is rewritten from the gradebook.  nbgrader as it comes
  leaves such notebooks ungraded or stops the whole class run.  Every repair is reported as an
  :class:`Anomaly` with the words the instructor reads.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import stat
import sys
from pathlib import Path

from nbformat.notebooknode import NotebookNode, from_dict
from nbgrader import utils as nbgrader_utils

from .cells import grade_id as cell_grade_id

#: Restored cells start with this comment (Russian, for the student's feedback).
RESTORED_NOTE = "# Эта ячейка была удалена из сданной работы; проверка восстановила её из задания.\n"


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """Something in a submission the instructor should know of (its grade may or may not change)."""

    kind: str    # "extra_file", "shadowing_file", "restored_cell", "edited_cell", "duplicate_cell",
                 # "unknown_grade_cell", "invalid_notebook", "output_cut", "link", and what its code tried
                 # (autograder/course/status.py ATTEMPTS): "tampering", "process_ended", "hidden_memory",
                 # "notebook_time_limit"
    detail: str  # the Russian sentence the instructor reads

    def __str__(self) -> str:
        return self.detail


# --- extra files ---------------------------------------------------------------------------

def shadowed_module(path: Path) -> str | None:
    """The module name ``path`` would shadow if it were importable first, else None."""
    name = path.name
    if path.is_dir():
        if not any((path / f"__init__{suffix}").exists() for suffix in (".py", ".pyc")) and \
                not any(path.glob("*.py")):
            return None
        module = name
    else:
        module = name.split(".")[0] if name.endswith((".py", ".pyc", ".so", ".pyd", ".pth")) else None
    if not module or not module.isidentifier():
        return None
    if module in sys.stdlib_module_names or module in sys.builtin_module_names:
        return module
    try:
        return module if importlib.util.find_spec(module) is not None else None
    except (ImportError, ValueError):
        return None


#: What a submission holds beside the student's files: Jupyter's and Python's caches, and what nbgrader's exchange
#: writes into every submission (``ExchangeSubmit``: the time, and the secret its feedback is filed under).
NOT_THE_STUDENTS = frozenset({".ipynb_checkpoints", "__pycache__", "timestamp.txt", "submission_secret.txt"})


def extra_files(folder: Path, notebooks: set[str]) -> list[Anomaly]:
    """Files and folders of a submission other than the lesson's notebooks (and :data:`NOT_THE_STUDENTS`)."""
    found = []
    for path in sorted(Path(folder).iterdir()):
        if path.name in notebooks or path.name in NOT_THE_STUDENTS:
            continue
        shadows = shadowed_module(path)
        if shadows:
            found.append(Anomaly("shadowing_file",
                                 f"файл {path.name} совпадает по имени с модулем Python «{shadows}»: "
                                 "он не импортируется (используется настоящий модуль)"))
        else:
            found.append(Anomaly("extra_file", f"лишний файл {path.name} (доступен ноутбуку как модуль "
                                               "или файл рядом с ним)"))
    return found


# --- links ---------------------------------------------------------------------------------

#: What ``nbgrader collect`` and ``zip_collect`` make of a submission: folders and regular files of its own.  A
#: symbolic link, a hard link (a file with more than one name: it may be the gradebook, or another student's
#: notebook) or a device, pipe or socket can only be put there by hand or through a tampered exchange; followed,
#: it would copy whatever it points at into the submission.
LINK_KINDS = {"symlink": "символическая ссылка", "hardlink": "жёсткая ссылка (у файла несколько имён)",
              "special": "не файл и не папка (устройство, канал, сокет)"}


def links_in(folder: Path | str) -> list[tuple[str, str]]:
    """(path relative to ``folder``, kind of :data:`LINK_KINDS`) of everything in ``folder`` that is not a folder
    or a regular file with one name; read without following any link."""
    found = []
    for where, dirs, files in os.walk(folder):  # os.walk never enters a linked folder (followlinks=False)
        for name in sorted(dirs + files):
            path = os.path.join(where, name)
            info = os.lstat(path)
            kind = ("symlink" if stat.S_ISLNK(info.st_mode) else
                    "special" if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)) else
                    "hardlink" if stat.S_ISREG(info.st_mode) and info.st_nlink > 1 else None)
            if kind:
                found.append((os.path.relpath(path, folder), kind))
    return found


def link_anomalies(folder: Path | str) -> list[Anomaly]:
    """The links of a submission (:func:`links_in`) as the instructor reads them: each was left out of grading."""
    return [Anomaly("link", f"{name}: {LINK_KINDS[kind]} — не скопирована и не проверялась (ссылки не "
                            "принимаются: сдавайте сами файлы)") for name, kind in links_in(folder)]


def linked_notebook(folder: Path | str) -> str | None:
    """Why the submission in ``folder`` cannot be graded because a notebook in it is a link (None: none is)."""
    for name, kind in links_in(folder):
        if name.endswith(".ipynb"):
            return (f"ноутбук {name} — {LINK_KINDS[kind]}, а не файл работы: такую работу не проверяем (ссылка "
                    "могла бы указывать на чужую работу или на решения). Попросите студента сдать сам ноутбук "
                    "(nbgrader submit копирует файлы) и проверьте снова.")
    return None


def copy_without_links(folder: Path | str, target: Path | str) -> list[Anomaly]:
    """Copy a submission folder without following or keeping any link (:func:`links_in` are left out); what was
    left out."""
    left_out = {os.path.join(folder, name) for name, _ in links_in(folder)}
    shutil.copytree(folder, target, symlinks=True,
                    ignore=lambda where, names: {n for n in names if os.path.join(where, n) in left_out})
    return link_anomalies(folder)


# --- structure -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SourceCell:
    """A cell of the instructor's notebook as the gradebook keeps it."""

    grade_id: str
    cell_type: str
    source: str
    checksum: str | None
    locked: bool
    solution: bool
    grade: bool
    task: bool
    points: float | None


def source_cells(gradebook, notebook: str, lesson: str) -> list[SourceCell]:
    """The nbgrader cells of the lesson's notebook, in the order of the source notebook."""
    nb = gradebook.find_notebook(notebook, lesson)
    grades = {c.name: c.max_score for c in nb.grade_cells}
    solutions = {c.name for c in nb.solution_cells}
    tasks = {c.name: c.max_score for c in nb.task_cells}
    return [SourceCell(c.name, c.cell_type, c.source, c.checksum, bool(c.locked), c.name in solutions,
                       c.name in grades, c.name in tasks, grades.get(c.name, tasks.get(c.name)))
            for c in nb.source_cells]


def _metadata(cell: SourceCell) -> dict:
    meta = {"grade": cell.grade, "grade_id": cell.grade_id, "locked": cell.locked,
            "schema_version": 3, "solution": cell.solution, "task": cell.task}
    if cell.grade or cell.task:
        meta["points"] = cell.points
    if cell.checksum:
        meta["checksum"] = cell.checksum
    return meta


def _restored(cell: SourceCell) -> NotebookNode:
    metadata = {"nbgrader": _metadata(cell), "deletable": False}
    if cell.locked:
        metadata["editable"] = False
    if cell.cell_type == "code":
        # A read-only cell gets the instructor's source exactly (OverwriteCells checks its checksum).
        note = "" if cell.locked else RESTORED_NOTE
        return from_dict(dict(cell_type="code", metadata=metadata, source=note + cell.source,
                              outputs=[], execution_count=None))
    return from_dict(dict(cell_type="markdown", metadata=metadata, source=cell.source))


def repair(nb: NotebookNode, cells: list[SourceCell]) -> list[Anomaly]:
    """Make the nbgrader cells of ``nb`` those of ``cells`` (in place); what was repaired."""
    known = {c.grade_id: c for c in cells}
    anomalies: list[Anomaly] = []
    # The last copy of a duplicated id is the one kept (nbgrader's DeduplicateIds does the same).
    last = {}
    for index, cell in enumerate(nb.cells):
        if "nbgrader" in cell.get("metadata", {}):
            last[cell_grade_id(cell)] = index
    for index, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        grade_id = cell_grade_id(cell)
        if grade_id not in known:
            del cell.metadata["nbgrader"]
            anomalies.append(Anomaly("unknown_grade_cell",
                                     f"ячейка с неизвестным id {grade_id!r} (добавлена или переименована "
                                     "студентом) не оценивается" if grade_id else
                                     "ячейка с испорченной разметкой nbgrader не оценивается"))
        elif last[grade_id] != index:
            del cell.metadata["nbgrader"]
            anomalies.append(Anomaly("duplicate_cell", f"копия ячейки {grade_id} не оценивается "
                                                       "(оценивается последняя)"))
        else:
            source = known[grade_id]
            if source.locked and cell.get("cell_type") == source.cell_type and \
                    nbgrader_utils.compute_checksum(cell) != cell.metadata["nbgrader"].get("checksum"):
                anomalies.append(Anomaly("edited_cell", f"изменена ячейка только для чтения {grade_id} "
                                                        "(восстановлена из задания)"))
            cell.metadata["nbgrader"] = from_dict(_metadata(source))
            if source.locked:
                # The instructor's version, hidden tests included (what nbgrader's OverwriteCells
                # would put back, with a warning on every honest submission).
                cell.source = source.source
            if cell.get("cell_type") != source.cell_type:
                anomalies.append(Anomaly("edited_cell", f"у ячейки {grade_id} изменён тип "
                                                        "(восстановлен из задания)"))
                nb.cells[index] = _restored(source)
    present = {cell_grade_id(c) for c in nb.cells if "nbgrader" in c.get("metadata", {})}
    position = 0  # restored cells go after the last cell of the source order found before them
    for source in cells:
        where = [i for i, c in enumerate(nb.cells) if cell_grade_id(c) == source.grade_id
                 and "nbgrader" in c.metadata]
        if where:
            position = where[0] + 1
            continue
        if source.grade_id in present:
            continue
        nb.cells.insert(position, _restored(source))
        position += 1
        if source.locked or source.grade:
            anomalies.append(Anomaly("restored_cell", f"удалена ячейка {source.grade_id} "
                                                      "(восстановлена из задания)"))
        else:
            anomalies.append(Anomaly("restored_cell", f"удалена ячейка ответа {source.grade_id} "
                                                      "(восстановлена пустой)"))
    return anomalies


def is_valid_notebook(path: Path) -> str | None:
    """None when ``path`` reads as a notebook, else why not (Russian)."""
    import nbformat

    try:
        nbformat.read(path, as_version=4)
    except Exception as error:  # json, schema, encoding...
        return f"ноутбук не читается: {type(error).__name__}: {str(error)[:200]}"
    return None


def notebooks_in(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("*.ipynb") if p.is_file())


def size_of(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
