"""Are the lessons' text sources (lessons/NN_name.py) what the built notebooks come from?

- text -> notebook -> text is stable, and each text source builds its committed solutions
  notebook exactly (cell by cell: ids, sources, metadata);
- `course check-release` (release.stale_release) fails, naming the lesson and `make release`, on a
  solutions notebook edited by hand and on a text source edited but not released;
- no text source reaches the student release notebooks/.
"""
import shutil
import subprocess

import nbformat
import pytest

from autograder.course import authoring, paths as course

from autograder.course import release

LESSONS = course.text_lessons()
SMALL = "03_swiglu"  # the smallest lesson: one nbgrader generate_assignment is quick


def built(lesson, root=course.ROOT):
    text = course.text_source(lesson, root).read_text(encoding="utf-8")
    return authoring.notebook_from_text(text, name=lesson)


def test_every_lesson_has_a_text_source_and_nothing_else_is_in_lessons():
    assert LESSONS == course.lessons()
    names = sorted(p.name for p in (course.ROOT / course.TEXT_SOURCES).iterdir() if not p.name.startswith("."))
    assert names == [f"{n}.py" for n in LESSONS]


@pytest.mark.parametrize("lesson", LESSONS)
def test_text_source_round_trips_and_builds_the_committed_solutions_notebook(lesson):
    text = course.text_source(lesson).read_text(encoding="utf-8")
    nb = authoring.notebook_from_text(text, name=lesson)
    assert authoring.text_from_notebook(nb) == text, \
        f"lessons/{lesson}.py is not in the form the build writes back: `make release`, then " \
        f"`course lesson-text {lesson} --force` rewrites it"
    committed = nbformat.read(course.source_notebook(lesson), as_version=4)
    assert nb.metadata == committed.metadata
    assert len(nb.cells) == len(committed.cells)
    for index, (fresh, old) in enumerate(zip(nb.cells, committed.cells)):
        assert fresh == old, f"{lesson}: cell {index} ({old.id}) differs"
    assert authoring.notebook_json(nb) == course.source_notebook(lesson).read_text(encoding="utf-8")


def test_cell_ids_and_metadata_survive_the_text_form():
    """A cell whose id is not the default keeps it (id="..." in its # %% line), the others get
    grade_id / cell-<index>; nbgrader metadata and the kernelspec come back unchanged."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"display_name": "Python 3 (ipykernel)",
                                                           "language": "python", "name": "python3"},
                                            "language_info": {"name": "python"}})
    answer = {"grade": False, "grade_id": "answer", "locked": False, "schema_version": 3,
              "solution": True, "task": False}
    nb.cells = [nbformat.v4.new_markdown_cell("# Урок\n\nТекст.", id="cell-0"),
                nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION",
                                          id="answer", metadata={"nbgrader": answer}),
                nbformat.v4.new_code_cell("%time f()\nprint(f())", id="a9509762")]
    text = authoring.text_from_notebook(nb)
    assert '# %% id="a9509762"' in text and 'id="cell-0"' not in text and 'id="answer"' not in text
    back = authoring.notebook_from_text(text)
    assert [c.id for c in back.cells] == ["cell-0", "answer", "a9509762"]
    assert back.cells == nb.cells and back.metadata == nb.metadata


def test_two_cells_with_one_id_are_an_error_naming_the_file():
    text = '# %% [markdown] id="cell-1"\n# Текст\n\n# %%\nx = 1\n'
    with pytest.raises(ValueError, match=r"lessons/99_x\.py: у ячеек 0 и 1 один и тот же id 'cell-1'"):
        authoring.notebook_from_text(text, name="lessons/99_x.py")


@pytest.fixture
def small_course(tmp_path):
    """A copy of the course with one lesson: config, text source, both built notebooks."""
    shutil.copy(course.ROOT / "nbgrader_config.py", tmp_path)
    (tmp_path / course.TEXT_SOURCES).mkdir()
    shutil.copy(course.text_source(SMALL), course.text_source(SMALL, tmp_path))
    for folder in (course.SOLUTIONS, course.RELEASE):
        shutil.copytree(course.ROOT / folder / SMALL, tmp_path / folder / SMALL)
    return tmp_path


def test_check_release_fails_on_a_hand_edited_solutions_notebook(small_course):
    assert release.stale_release(small_course) == []
    path = course.source_notebook(SMALL, small_course)
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += "\nПравка прямо в ноутбуке."
    nbformat.write(nb, path)
    assert release.stale_release(small_course) == [
        f"{SMALL}: solutions/{SMALL}/{SMALL}.ipynb не совпадает с тем, что собирается из lessons/{SMALL}.py: "
        f"выполните `make release` (урок правят в lessons/{SMALL}.py, а не в ноутбуках)"]


def test_check_release_fails_on_an_edited_text_source_until_it_is_released(small_course):
    source = course.text_source(SMALL, small_course)
    source.write_text(source.read_text(encoding="utf-8").replace("# В этом уроке вы:", "# В этом уроке мы:", 1),
                      encoding="utf-8")
    problems = release.stale_release(small_course)
    assert [p.split(":")[:2] for p in problems] == [
        [SMALL, f" solutions/{SMALL}/{SMALL}.ipynb не совпадает с тем, что собирается из lessons/{SMALL}.py"],
        [SMALL, f" notebooks/{SMALL}/{SMALL}.ipynb не совпадает с тем, что собирается из lessons/{SMALL}.py"]]
    assert all("выполните `make release`" in p for p in problems)
    release.release(small_course)
    assert release.stale_release(small_course) == []
    for built_notebook in (course.source_notebook(SMALL, small_course), course.student_notebook(SMALL, small_course)):
        assert "В этом уроке мы:" in built_notebook.read_text(encoding="utf-8")


def test_no_text_source_reaches_the_student_release(small_course):
    """notebooks/ holds the student notebooks (and the glossary) only, fresh or committed; a stray file there fails the check."""
    release.release(small_course)
    assert sorted(p.relative_to(small_course).as_posix() for p in (small_course / course.RELEASE).rglob("*")
                  if p.is_file()) == [f"notebooks/{SMALL}/{SMALL}.ipynb"]
    committed = subprocess.run(["git", "ls-files", course.RELEASE], cwd=course.ROOT, capture_output=True,
                               text=True, check=True).stdout.split()
    assert committed == sorted([f"notebooks/{n}/{n}.ipynb" for n in LESSONS]
                               + [f"notebooks/{name}" for name in course.RELEASE_FILES])
    shutil.copy(course.text_source(SMALL), small_course / course.RELEASE / SMALL / f"{SMALL}.py")
    assert release.stale_release(small_course) == [
        f"{SMALL}: notebooks/{SMALL}/{SMALL}.py не собирается `make release` (лишний файл)"]


# --- facts written once: points and titles from the registry, Colab badge and install cell from settings.py ---

def test_no_text_source_repeats_a_fact_the_build_writes():
    """lessons/*.py hold no test cell's points or «# Проверка: ...» line (the check registry's) and no course
    address (settings.py's); exactly the GPU lessons hold the badge and install placeholders."""
    from autograder.course import settings

    marked = []
    for lesson in LESSONS:
        text = course.text_source(lesson).read_text(encoding="utf-8")
        assert settings.COURSE_REPOSITORY not in text and "colab.research.google.com" not in text, lesson
        assert settings.COURSE_REPOSITORY.removeprefix("https://github.com/") not in text, lesson
        if settings.COLAB_BADGE_MARK in text:
            assert f"\n{settings.INSTALL_CELL_MARK}\n" in text, lesson
            marked.append(lesson)
        for cell in jupytext_cells(text):
            if authoring.is_test_cell(cell):
                assert "points" not in cell.metadata["nbgrader"], (lesson, cell.metadata["nbgrader"]["grade_id"])
                assert not cell.source.startswith(authoring.HEADING), (lesson, cell.metadata["nbgrader"]["grade_id"])
    assert marked == [lesson for lesson in LESSONS if course.is_gpu_lesson(lesson)]


def jupytext_cells(text):
    import jupytext

    return jupytext.reads(text, fmt=authoring.TEXT_FORMAT).cells


TEST_CELL = '# %% nbgrader={{"grade": true, "grade_id": "{id}", "locked": true, "schema_version": 3, ' \
            '"solution": false, "task": false}}\nfrom autograder import grade\n{calls}\n'


def test_a_test_cells_points_and_first_line_come_from_the_registry():
    """Points and title of the check (a bonus: 0 in nbgrader, «+N б. сверх максимума»); the visible and the hidden
    call of one check count once; the text form drops both again."""
    from autograder.checks.core import get_check

    regular, bonus = get_check("lesson02.memory"), get_check("lesson02.add_memory")
    assert not regular.bonus and bonus.bonus
    text = (TEST_CELL.format(id="test_memory", calls="grade('lesson02.memory', f)\n### BEGIN HIDDEN TESTS\n"
                             "grade('lesson02.memory', f, cases=[{'T': 3}])\n### END HIDDEN TESTS")
            + "\n" + TEST_CELL.format(id="test_bonus", calls="grade('lesson02.add_memory', f)"))
    nb = authoring.notebook_from_text(text)
    first, second = nb.cells
    assert first.metadata.nbgrader.points == regular.points
    assert first.source.split("\n")[0] == f"# Проверка: {regular.title} ({int(regular.points)} б.)"
    assert second.metadata.nbgrader.points == 0
    assert second.source.split("\n")[0] == f"# Проверка: {bonus.title} (+{int(bonus.points)} б. сверх максимума)"
    assert authoring.text_from_notebook(nb) == text


def test_a_text_source_that_still_carries_points_or_two_checks_in_a_cell_is_an_error():
    old = TEST_CELL.format(id="t", calls="grade('lesson02.memory', f)").replace('"locked": true,',
                                                                              '"locked": true, "points": 2,')
    with pytest.raises(ValueError, match=r"lessons/99_x\.py: ячейка 0: .*пишет сборка"):
        authoring.notebook_from_text(old, name="lessons/99_x.py")
    two = TEST_CELL.format(id="t", calls="grade('lesson02.memory', f)\ngrade('lesson02.equivalence', f)")
    with pytest.raises(ValueError, match="несколько проверок"):
        authoring.notebook_from_text(two, name="lessons/99_x.py")


def test_the_colab_badge_and_install_cell_come_from_settings():
    from autograder.course import settings

    text = "# %% [markdown]\n# # Урок\n#\n# {{COLAB_BADGE}}\n\n# %%\n# {{COURSE_INSTALL}}\n"
    nb = authoring.notebook_from_text(text, name="lessons/06_cuda_basics.py")
    assert nb.cells[0].source == f"# Урок\n\n{settings.colab_badge('06_cuda_basics')}"
    assert settings.colab_url("06_cuda_basics") in nb.cells[0].source
    assert nb.cells[1].source == settings.install_cell()
    assert f'COURSE_REPOSITORY = "{settings.COURSE_REPOSITORY}"' in nb.cells[1].source
    assert authoring.text_from_notebook(nb) == text
