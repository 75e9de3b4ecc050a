"""``nbgrader collect`` without following links: the exchange's inbound folder is writable by every student.

nbgrader's collect copies each submission from the exchange with ``shutil.copytree``, which follows symbolic
links: a student who puts a link to the gradebook, the lesson's solutions or ``/etc/shadow`` into their inbound
submission gets that file copied, as the instructor, into ``submitted/``, and graded beside their notebook.  This
plugin (``c.ExchangeFactory.collect`` in nbgrader_config.py) copies submissions with
:func:`autograder.nbgrader.submission.copy_without_links`: links, hard links and special files are left out, and the
instructor is told which.
"""
from __future__ import annotations

from nbgrader.exchange.default.collect import ExchangeCollect

from .submission import copy_without_links


class CollectWithoutLinks(ExchangeCollect):
    """nbgrader's collect, each submission copied without following or keeping a link."""

    def do_copy(self, src: str, dest: str) -> None:
        for anomaly in copy_without_links(src, dest):
            self.log.warning("autograder: %s: %s", src, anomaly)
