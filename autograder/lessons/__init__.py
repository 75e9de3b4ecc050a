"""The lessons: one package per lesson, ``lessonNN``, holding its checks and its lesson-only helpers.

A check id is ``lessonNN.name``: :func:`autograder.checks.core.get_check` imports the package
``autograder.lessons.lessonNN`` on first use (found by name: :func:`autograder.checks.core.lesson_packages`),
and the ``@check`` decorators of its modules register the lesson's checks.  Nothing lists the lessons by
hand: adding a lesson is adding its package.  Helpers that several lessons share live in the rooms below
(``autograder.checks``, ``autograder.gpu``) or, for the lessons' own demonstrations, in
:mod:`autograder.lessons.plots`.
"""
