"""The tools only a course author's install has (the dev extra): what building lessons/ into notebooks needs.

``course release``, ``check-release``, ``lesson-text`` and ``course publish`` (which checks that notebooks/ is what
lessons/ gives) need them; an instructor's or a student's base install has none.  Without them these commands say
in one line what to install, instead of a traceback.
"""
from __future__ import annotations

import importlib

#: The author's tools: module -> what it does for the course.
AUTHOR_TOOLS = {"jupytext": "lessons/NN_name.py <-> ноутбуки"}
#: How an author gets them (pyproject.toml's dev extra; the Makefile's .venv does this).
INSTALL = "pip install -e '.[dev]' в папке курса (make .venv/.installed делает это сам)"


def missing() -> list[str]:
    """The author's tools this Python cannot import."""
    absent = []
    for module in AUTHOR_TOOLS:
        try:
            importlib.import_module(module)
        except ImportError:
            absent.append(module)
    return absent


def message(command: str, absent: list[str]) -> str:
    tools = ", ".join(f"{name} ({AUTHOR_TOOLS[name]})" for name in absent)
    return f"для {command} нужны инструменты автора курса, их нет: {tools}; установите: {INSTALL}"


def require(command: str) -> None:
    """Stop with one line (RuntimeError: the `course` command prints it) when an author's tool is missing."""
    absent = missing()
    if absent:
        raise RuntimeError(message(command, absent))
