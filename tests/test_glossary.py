"""Glossary drift (notebooks/GLOSSARY.md) in Russian text: a thread is «поток», never «нить»; a kernel is «ядро»,
never «кернел»; prefill is «префилл» (the English word only in parentheses, as a first mention).

Checked: the lesson sources (lessons/*.py: markdown and comments, strings of the code cells, CUDA sources) and the
Russian strings of the package (autograder/: what students read in check messages).  Only text with Cyrillic in it
is Russian text: English comments, docstrings and identifiers (``prefill_tokens``, ``nit``) never trip the test."""
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CYRILLIC = re.compile(r"[А-Яа-яЁё]")
NOT_LETTER_BEFORE, NOT_LETTER_AFTER = r"(?<![А-Яа-яЁёA-Za-z0-9_])", r"(?![А-Яа-яЁёA-Za-z0-9_])"
FORBIDDEN = {
    "«нить» (thread — «поток»)": re.compile(NOT_LETTER_BEFORE + r"нит(ь|и|ей|ью|ям|ями|ях)" + NOT_LETTER_AFTER,
                                            re.IGNORECASE),
    "«кернел» (kernel — «ядро»)": re.compile(NOT_LETTER_BEFORE + r"кернел", re.IGNORECASE),
}
PREFILL = re.compile(r"(?<![\w.`/-])prefill(?![\w`/-])", re.IGNORECASE)
CODE_SPAN = re.compile(r"`[^`]*`")


def drift(text: str) -> list[str]:
    """What is wrong with one line of Russian text (empty when it has no Cyrillic: not Russian text)."""
    if not CYRILLIC.search(text):
        return []
    prose = CODE_SPAN.sub("``", text)                     # inline code is code, not running text
    found = [name for name, pattern in FORBIDDEN.items() if pattern.search(prose)]
    for match in PREFILL.finditer(prose):
        before = prose[:match.start()]
        if before.count("(") <= before.count(")"):        # «префилл (prefill)» is the glossary's own form
            found.append("латинское «prefill» в русском тексте (пишем «префилл»)")
    return found


def russian_text(path: Path):
    """(line number, text) of every comment and string line of a Python file."""
    source = path.read_text(encoding="utf-8")
    kinds = {tokenize.COMMENT, tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in kinds:
            for k, line in enumerate(token.string.splitlines()):
                yield token.start[0] + k, line


def files():
    return sorted((ROOT / "lessons").glob("*.py")) + sorted((ROOT / "autograder").rglob("*.py"))


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_russian_text_follows_the_glossary(path):
    problems = [f"{path.relative_to(ROOT)}:{line}: {', '.join(found)}: {text.strip()[:120]}"
                for line, text in russian_text(path) if (found := drift(text))]
    assert not problems, "Слова не из глоссария (notebooks/GLOSSARY.md):\n" + "\n".join(problems)


@pytest.mark.parametrize("text, bad", [
    ("# Каждая нить читает свой элемент", True),
    ("# четыре нити группы", True),
    ("# Нитей в блоке 256", True),
    ("'запустите кернел ещё раз'", True),
    ("# Все уроки были про prefill: n запросов", True),
    ("# Все уроки внимания были про префилл (prefill): n запросов", False),
    ("# каждый поток должен выполнить и заменить", False),     # «-нить» inside a word
    ("# вызов `prefill_attention(q)` в префилле", False),       # code span
    ("# prefill the cache, then decode", False),               # English comment
    ("prefill_tokens = 4096  # число токенов префилла", False),  # identifier
    ("# страница кэша после префилла, nit: ничего", False),
])
def test_the_drift_check_is_precise(text, bad):
    assert bool(drift(text)) is bad, drift(text)
