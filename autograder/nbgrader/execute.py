"""nbgrader's Execute step, with graded test cells run by the grader instead of the kernel.

A graded test cell of this course holds only ``from autograder import grade`` and calls
``grade("lessonNN.name", obj, ..., cases=[...])`` (tests/test_notebooks.py enforces it).  For
such a cell :class:`IsolatedExecute` does not run the cell's code in the student's kernel: it
asks the kernel only to serialise the named objects, runs each check in a worker process from
the grader's own process (:mod:`autograder.isolation.run`) and writes the verdict as the cell's
outputs.  Whatever the student's cells did to the kernel — redefined ``grade``, patched numpy
or tracemalloc, silenced tracebacks — cannot reach the score.  Other cells run as usual.  With
``parallel_checks`` above 1 a test cell's checks run while the notebook goes on, and their verdicts are written in
the notebook's order at its end, as one after another would have them (:mod:`autograder.isolation.check_pool`).

The student's kernel is hardened too (:func:`autograder.isolation.guard.install_kernel` runs first in
every kernel) and, like every check, runs in the submission's OS sandbox (:mod:`autograder.isolation.sandbox`).
A cell that kills the kernel (``os._exit``, a segfault, the OOM killer) or hangs without answering the
interrupt does not cost the notebook: the kernel is restarted, the cells that had run are run again (the
culprit skipped), the cell gets an error that says what happened, and grading carries on.  nbgrader
0.9.6 as it comes scores such a notebook 0 in every cell.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import json
import os
import shutil
import tempfile
import time

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.utils import ensure_async
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Float, Integer, List, TraitError, Unicode, default, validate

from ..isolation import cgroup as cgroup_module
from ..isolation import leftovers, run as isolation
from ..isolation import sandbox as sandbox_module
from ..checks import verdicts as verdicts_module
from .cells import GradeCall, is_test_cell, parse_grade_cell
from ..checks.core import CheckResult, get_check, is_bonus, shorten, skipped_bonus, skipped_bonus_line
from ..isolation.check_pool import CheckPool
from ..isolation.run import run_check
from ..isolation.sandboxed_kernel import KERNEL_SOCKETS, SandboxedKernelManager, use_ipc_sockets
from ..gpu.runtime import EMULATOR_ENV, is_timed
from ..notebook import STRICT_ENV


EXPORT_CODE = """\
import autograder.isolation.export as _autograder_export
_autograder_export.dump({path!r}, {names!r}, globals())
del _autograder_export
"""


KERNEL_SETUP_CODE = """\
import autograder.isolation.guard as _autograder_guard
_autograder_guard.install_kernel(memory_gib={memory!r}, secret_dirs={secret!r}, write_protected={protected!r},
                                 submission_dir={submission!r}, processes={processes!r})
import autograder.isolation.kernel_output as _autograder_output
_autograder_output.cap({output_chars!r})
del _autograder_guard, _autograder_output
"""


#: Said (and refused) when a class is to be graded without the OS sandbox (instructor-facing).
SANDBOX_MISSING = ("Проверка класса остановлена: без песочницы bubblewrap код студента (ctypes, свой модуль на C, "
                   "запуск процессов) может прочитать решения и скрытые тесты, изменить чужие оценки в gradebook "
                   "и оставить код в домашней папке проверяющего. Причина: {why}. {hint} Осознанно проверять "
                   "без песочницы (например, только свои работы): `course autograde --no-sandbox` или "
                   "`nbgrader autograde ... --IsolatedExecute.sandbox=off`.")


SANDBOX_OFF = "autograder: ВНИМАНИЕ: проверка идёт без песочницы (--no-sandbox): код студентов не изолирован от курса"


class SandboxMissing(RuntimeError):
    """The class was to be graded in the OS sandbox, and none can be made on this machine."""


def require_sandbox(mode: str) -> bool:
    """Check ``mode`` (IsolatedExecute.sandbox) against this machine: raise SandboxMissing for "required"
    without bubblewrap; True when submissions will be sandboxed."""
    ok, why = sandbox_module.status()
    if mode == "required" and not ok:
        raise SandboxMissing(SANDBOX_MISSING.format(why=why, hint=sandbox_module.INSTALL_HINT))
    return mode != "off" and ok


#: The export file is written by the student's kernel: never read more than this.
MAX_EXPORT_BYTES = 512 * 2**20


#: Outputs a cell may leave in the graded notebook (and the grader's memory), bytes of text/data.
MAX_CELL_OUTPUT_BYTES = 1024 * 1024


#: The most one ZeroMQ message from the student's kernel may hold, and how many may wait unread, on each socket the
#: grader reads it through: ZeroMQ drops a larger message (disconnecting, then reconnecting) before the grader reads
#: a byte of it, and messages past the queue, so that a kernel which prints gigabytes between two flushes of its
#: output costs the grader at most about their product (ipykernel sends all it buffered as one message; without
#: these a cell printing 1 GiB took the grader 3.1 GiB: benchmarks/grader_memory.py).  What a cell prints stays far
#: below: the kernel sends at most one character more of each stream than a cell keeps (:mod:`autograder.isolation.
#: kernel_output`), so these drop only what code that undid that sends.  A status message lost with them costs nbclient
#: its iopub_timeout (4 s).
MAX_KERNEL_MESSAGE_BYTES = 16 * 2**20
MAX_QUEUED_KERNEL_MESSAGES = 64


class BoundedKernelClient(AsyncKernelClient):
    """nbclient's kernel client, its sockets made by a ZeroMQ context that takes at most
    :data:`MAX_KERNEL_MESSAGE_BYTES` a message and queues at most :data:`MAX_QUEUED_KERNEL_MESSAGES` on each."""

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True  # closed with the client's channels, as jupyter_client's own
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_KERNEL_MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, MAX_QUEUED_KERNEL_MESSAGES)
        return context


#: MIME type of the note that replaces what was cut: data, not text, for the tools that count it.
OUTPUT_CUT_MIME = "application/vnd.course-autograder.output-cut+json"


OUTPUT_CUT = ("… вывод ячейки обрезан проверкой: больше {limit} КиБ. Большой вывод не нужен для оценки; "
              "печатайте меньше.")

#: Outputs the whole notebook may leave (the feedback HTML is made from them), bytes of text/data.
MAX_NOTEBOOK_OUTPUT_BYTES = 8 * 1024 * 1024

NOTEBOOK_OUTPUT_CUT = ("… вывод ячейки отброшен проверкой: у всего ноутбука больше {limit} КиБ вывода. Большой вывод "
                       "не нужен для оценки; печатайте меньше.")

#: The longest a notebook may be graded for, seconds: its cells and its checks together.
NOTEBOOK_TIME_LIMIT_S = 1800.0

NOTEBOOK_TIME_UP = ("Ячейка не выполнялась: время на проверку ноутбука ({limit:g} с) истекло — её ячейки и "
                    "проверки вместе шли дольше. Скорее всего, где-то бесконечный цикл или очень медленный код: "
                    "найдите его (Validate, make test) и сдайте работу заново.")

NOTEBOOK_TIME_UP_CHECK = ("Проверка не запускалась: время на проверку ноутбука ({limit:g} с) истекло — его ячейки и "
                          "проверки вместе шли дольше. Скорее всего, где-то бесконечный цикл или очень медленный "
                          "код: найдите его (Validate, make test) и сдайте работу заново.")


KERNEL_DIED = ("Ядро Python завершилось во время этой ячейки (os._exit, segfault или нехватка памяти). "
               "Проверка перезапустила ядро, заново выполнила предыдущие ячейки (без этой) "
               "и продолжила со следующей.")


KERNEL_STUCK = ("Ячейка не завершилась за {timeout} с и не ответила на прерывание. Проверка перезапустила "
                "ядро, заново выполнила предыдущие ячейки (без этой) и продолжила со следующей.")


FAILED_PREFIX = "Проверка не пройдена: "


class GraderError(RuntimeError):
    """The grader could not run a check of this submission: nbgrader records no grade for it
    (``course status`` and the report say "сдана, не проверена" with this message)."""


#: The longest path a Unix socket may have (``sun_path``: 108 bytes with the closing zero).  The kernel's ZeroMQ
#: sockets are files in the submission's scratch folder (``ipc`` transport), which is in TMPDIR.
SOCKET_PATH_MAX = 107


_SWEPT: list[bool] = []


def _remove_abandoned_once() -> None:
    """Once per grading process: the folders graders killed before left in TMPDIR (:mod:`..isolation.leftovers`)."""
    if not _SWEPT:
        _SWEPT.append(True)
        leftovers.remove_abandoned()


def require_short_socket_paths(scratch: str) -> None:
    """Raise :class:`GraderError` saying what to do when the kernel's sockets in ``scratch`` would have longer paths
    than a socket may (a deep TMPDIR): otherwise the kernel fails to start with ZeroMQ's «File name too long»."""
    longest = len(os.fsencode(os.path.join(scratch, f"{KERNEL_SOCKETS}-99999")))  # ZeroMQ adds "-<port>"
    if longest > SOCKET_PATH_MAX:
        raise GraderError(f"временная папка проверки слишком глубоко: сокеты ядра Jupyter — файлы в ней, а путь сокета "
                          f"не длиннее {SOCKET_PATH_MAX} байт (здесь {longest}: {scratch}). Задайте короткую временную "
                          f"папку, например `export TMPDIR=/tmp`, и запустите проверку снова.")


def verdict_outputs(results: list[CheckResult], hidden: list[bool] | None = None) -> list[NotebookNode]:
    """The cell outputs nbgrader scores: the report (text, with the verdicts as data in its
    metadata) and, when a check failed, an error (nbgrader scores the cell 0; otherwise full)."""
    hidden = hidden or [False] * len(results)
    lines = []
    for result, secret in zip(results, hidden):
        line = skipped_bonus_line(result) if skipped_bonus(result) else result.summary()
        lines.append(("[скрытая] " if secret else "") + line
                     + (f"\n{result.message}" if result.passed and result.message else ""))
    verdicts = [{"check_id": r.check_id, "title": r.title, "points": r.points, "passed": r.passed,
                 "hidden": bool(secret), "mistake": r.mistake, "message": r.message,
                 "bonus": is_bonus(r.check_id), "skipped": skipped_bonus(r)}
                for r, secret in zip(results, hidden)]
    outputs = [NotebookNode(output_type="display_data", data={"text/plain": "\n".join(lines)},
                            metadata=verdicts_module.metadata(verdicts))]
    failed = [r for r in results if not r.passed and not skipped_bonus(r)]
    if failed:
        outputs.append(failure_output(shorten(f"{failed[0].title}\n{failed[0].message}", 4000)))
    return outputs


def failure_output(message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename="CheckFailed", evalue=message,
                        traceback=[FAILED_PREFIX + message])


def error_output(ename: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


class IsolatedExecute(Execute):
    """Execute that grades this course's test cells from the grader's process and survives a
    student's cell killing or wedging the kernel."""

    kernel_memory_limit_gib = Float(
        8.0, allow_none=True,
        help="Address-space cap of the student's kernel, GiB: a larger allocation raises "
             "MemoryError. None: no cap. Lessons whose checks declare no cap (GPU) get none."
    ).tag(config=True)

    check_timeout = Float(
        None, allow_none=True,
        help="Upper bound on every check's own timeout, seconds (None: each check's timeout)."
    ).tag(config=True)

    protected_dirs = List(
        Unicode(), help="More folders that student code (kernel and checks) may not write into, "
                        "besides the course root, the grader's package and the Python environment "
                        "(e.g. the class course when grading in a scratch copy)."
    ).tag(config=True)

    max_output_bytes = Integer(
        MAX_CELL_OUTPUT_BYTES, help="Bytes of output one cell may keep; the rest is dropped as it "
                                    "arrives, with one note saying so."
    ).tag(config=True)

    max_notebook_output_bytes = Integer(
        MAX_NOTEBOOK_OUTPUT_BYTES, help="Bytes of output the whole notebook may keep (its feedback is made from "
                                        "them); the rest is dropped as it arrives, with one note saying so."
    ).tag(config=True)

    notebook_time_limit = Float(
        NOTEBOOK_TIME_LIMIT_S, allow_none=True,
        help="Seconds one notebook may be graded for, its cells and its checks together: past it no cell runs and "
             "no check starts (each says so and scores 0), and a check started before it gets only what is left. "
             "None: no limit."
    ).tag(config=True)

    sandbox_memory_gib = Float(
        cgroup_module.MEMORY_GIB,
        help="Memory of one submission's sandboxes together (its kernel, its checks, their private /tmp), GiB: where "
             "a cgroup can be made (autograder/isolation/cgroup.py), a process over it is killed."
    ).tag(config=True)

    sandbox_processes = Integer(
        cgroup_module.PROCESSES,
        help="Processes and threads of one submission's sandboxes together, root's too (where a cgroup can be made)."
    ).tag(config=True)

    max_kernel_restarts = Integer(
        10, help="Restarts of a dead or stuck kernel per notebook; after that the cells that "
                 "had run are no longer replayed into the new kernel."
    ).tag(config=True)

    sandbox = Enum(
        ["required", "if-available", "off"], "required",
        help="The OS sandbox (bubblewrap) around the student's kernel and every check: 'required' refuses to "
             "grade where it cannot be made, 'if-available' (self-study) grades without it there, 'off' never "
             "uses it (one warning line per run)."
    ).tag(config=True)

    parallel_checks = Integer(
        1, help="Checks of one notebook run side by side, at most this many at once, while the notebook goes on "
                "(each in its own worker, as always); a check graded by its kernel's time runs alone. 1: one after "
                "another (autograder/isolation/check_pool.py)."
    ).tag(config=True)

    @validate("parallel_checks")
    def _at_least_one_check(self, proposal):
        if proposal["value"] < 1:  # said as the preprocessor is made from the config, before the notebook runs
            raise TraitError(f"IsolatedExecute.parallel_checks = {proposal['value']}: нужно целое число от 1 "
                             "(1 — проверки ноутбука по одной, 4 — до четырёх одновременно)")
        return proposal["value"]

    gpu_emulator = Bool(
        True, help="On a grading machine without a GPU, the GPU lessons' kernels run on the PTX emulator and its "
                   "verdicts count (True), or every check that runs a kernel fails with «нужен GPU», 0 points "
                   "(False). A GPU, where there is one, is always used; timed checks always need it."
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        # the student's kernel and every check's worker inherit this (autograder.gpu.runtime.emulator_allowed)
        os.environ[EMULATOR_ENV] = "1" if self.gpu_emulator else "0"
        # A grade(...) that the student's kernel runs here (a test cell that is not only grade calls) raises on
        # failure, as nbgrader expects; only a person's own kernel prints instead (autograder/notebook.py).
        with _environment(STRICT_ENV, "1"):
            return self._preprocess_strict(nb, resources, km)

    def _preprocess_strict(self, nb, resources, km):
        # The kernel starts in an empty folder and moves into the submission only once hardened:
        # a file beside the notebook (numpy.py, autograder.py, ipython_config.py) runs before
        # nothing and shadows nothing (guard.install_kernel).
        self._submission_dir = os.path.abspath((resources or {}).get("metadata", {}).get("path") or os.getcwd())
        use_sandbox = require_sandbox(self.sandbox)
        _remove_abandoned_once()
        owned = leftovers.OwnedFolder(leftovers.SANDBOX_SCRATCH)
        # Three folders of this submission's, none the others' (the kernel's sandbox binds only the first two, a
        # check's only a folder of its own inside the third): nothing the kernel writes reaches a check, nothing a
        # check writes (the hidden checks' inputs) reaches the kernel, and no reply of a check is in either.
        scratch, checks = os.path.join(owned.name, "kernel"), os.path.join(owned.name, "checks")
        group = None
        try:
            os.mkdir(scratch, 0o700)
            os.mkdir(checks, 0o700)
            if os.name == "posix":
                require_short_socket_paths(scratch)
            self._scratch = scratch
            self._kernel_start_dir = os.path.join(scratch, "start")
            os.mkdir(self._kernel_start_dir)
            if use_sandbox:
                group = cgroup_module.create(int(self.sandbox_memory_gib * 2**30), self.sandbox_processes)
                self._box = dataclasses.replace(self._make_sandbox(nb, scratch, os.path.join(owned.name, "submission")),
                                                cgroup=group)
            else:
                self._box = None
            nb.metadata.setdefault("autograder", {})["sandbox"] = (sandbox_module.status()[1] if self._box
                                                                    else "off")
            if self._box is not None:
                nb.metadata["autograder"]["limits"] = (
                    f"cgroup v{group.version}: {self.sandbox_memory_gib:g} ГиБ, {self.sandbox_processes} процессов"
                    if group is not None else "без cgroup: " + cgroup_module.status()[1])
            checks_box = None if self._box is None else dataclasses.replace(
                self._box, scratch=checks, submission=None, submission_copy=None)
            with isolation.sandboxed(checks_box):
                return self._preprocess(nb, resources, km)
        finally:
            cgroup_module.remove(group)  # what still runs in it is killed
            owned.cleanup()

    def _make_sandbox(self, nb, scratch: str, copy: str) -> "sandbox_module.Sandbox":
        """This submission's sandbox: the course (nbgrader runs from its root) and the folders the config
        protects hidden; the kernel works in ``copy``, a private copy of the submission folder without its
        notebooks (the graded one holds the test cells restored from the gradebook, hidden ones included)."""
        copy_submission(self._submission_dir, copy)
        calls = [c for cell in nb.cells if is_test_cell(cell) for c in parse_grade_cell(cell.source) or []]
        return sandbox_module.Sandbox(
            scratch=scratch, hidden=(os.path.abspath(os.getcwd()), *(os.path.abspath(d) for d in self.protected_dirs)),
            submission=self._submission_dir, submission_copy=copy,
            gpu=any(get_check(c.check_id).needs_gpu for c in calls))

    def create_kernel_manager(self):
        if self._box is not None:
            self.kernel_manager_class = SandboxedKernelManager
        km = super().create_kernel_manager()
        km.client_class = f"{__name__}.BoundedKernelClient"  # the grader's memory is bounded whatever the kernel sends
        if self._box is not None:
            km.configure(self._box)
        elif os.name == "posix":
            # Without the sandbox (`course check`, `course grade` without bubblewrap) too: ZeroMQ sockets as files
            # in the scratch folder, not TCP on the loopback, which ipykernel (7+) warns about in English on the
            # terminal at every kernel start («Kernel is running over TCP without encryption»).
            use_ipc_sockets(km, self._scratch)
        return km

    def _preprocess(self, nb, resources, km):
        self._output_bytes = {}  # cell index -> bytes of output received while it ran
        self._notebook_output_bytes = 0
        self._deadline = None if self.notebook_time_limit is None else time.monotonic() + self.notebook_time_limit
        self._completed = []  # indices of cells that ran to the end: replayed after a restart
        self._restarts = 0
        self._timed_out = False
        root = os.path.abspath(os.getcwd())  # nbgrader runs from the course root
        source = self.config.CourseDirectory.get("source_directory", "source")
        self._secret_dirs = (os.path.join(root, source),)
        self._write_protected = (root, *(os.path.abspath(d) for d in self.protected_dirs))
        calls = [c for cell in nb.cells if is_test_cell(cell) for c in parse_grade_cell(cell.source) or []]
        uncapped = any(get_check(c.check_id).memory_limit_gib is None for c in calls)
        self._kernel_memory = None if uncapped else self.kernel_memory_limit_gib
        self._checks = CheckPool(self.parallel_checks)
        self._graded = []  # side by side: (cell, [(call, digest, time limit, future)]), in the notebook's order
        try:
            result = super().preprocess(nb, resources, km)
            self._checks.wait()
            ran = [(call.check_id, digest, limit, future.result())
                   for _, entries in self._graded for call, digest, limit, future in entries]
            verdicts = iter(isolation.hang_rule(ran))  # as one after another would have them
            for cell, entries in self._graded:
                self._write_verdicts(cell, [entry[0] for entry in entries], [next(verdicts) for _ in entries])
            return result
        finally:
            self._checks.close()

    async def async_start_new_kernel(self, **kwargs):
        kwargs["cwd"] = self._kernel_start_dir
        return await super().async_start_new_kernel(**kwargs)

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        code = KERNEL_SETUP_CODE.format(memory=self._kernel_memory, secret=self._secret_dirs,
                                        protected=self._write_protected, submission=self._submission_dir,
                                        processes=sandbox_module.process_limit() if self._box else None,
                                        output_chars=self.max_output_bytes + 1)  # more than kept: the grader notes the cut
        reply = await self.async_wait_for_reply(kc.execute(code, silent=True, store_history=False))
        if not reply or reply["content"]["status"] != "ok":
            # Never grade with an unguarded kernel: the submission fails as a whole, and says why.
            detail = reply and {k: reply["content"].get(k) for k in ("ename", "evalue")}
            raise RuntimeError(f"autograder: could not harden the student's kernel: {detail}")
        return kc

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True
        return await super()._async_handle_timeout(timeout, cell)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        calls = parse_grade_cell(cell.source) if is_test_cell(cell) else None
        if calls is None:
            return await self._execute_or_recover(cell, cell_index, execution_count, store_history)

        if self._time_left() <= 0:
            self._write_verdicts(cell, calls, [self._not_run_in_time(call) for call in calls])
            return cell
        names = sorted({n for call in calls for n in call.names})
        with tempfile.TemporaryDirectory(prefix="autograder-export-", dir=self._scratch,
                                         ignore_cleanup_errors=True) as folder:
            path = os.path.join(folder, "objects.json")
            source = cell.source
            cell.source = EXPORT_CODE.format(path=path, names=names)
            try:
                await self._execute_or_recover(cell, cell_index, execution_count, store_history=False,
                                               remember=False)
            finally:
                cell.source = source
            exported = _read_export(path)
        entries = []
        for call in calls:
            payloads = self._payloads(call, exported)
            if self._time_left() <= 0 and not isinstance(payloads, CheckResult):
                payloads = self._not_run_in_time(call)
            limit = max(1.0, min(self._time_limit(call), self._time_left()))
            run = (lambda payloads=payloads: payloads) if isinstance(payloads, CheckResult) else \
                (lambda call=call, payloads=payloads, limit=limit: self._run(call, payloads, limit))
            digest = None if isinstance(payloads, CheckResult) else isolation.payload_digest(payloads)
            entries.append((call, digest, limit, self._checks.submit(run, timed=is_timed(call.check_id))))
        if self._checks.places == 1:
            self._write_verdicts(cell, calls, [entry[3].result() for entry in entries])
        else:  # written once every check has finished, in the notebook's order (_preprocess)
            self._graded.append((cell, entries))
        return cell

    @staticmethod
    def _write_verdicts(cell, calls: list[GradeCall], results: list[CheckResult]) -> None:
        faults = [r for r in results if r.grader_fault]
        if faults:  # never a grade from a check that did not run: the submission stays ungraded
            raise GraderError(f"проверка {faults[0].check_id} не выполнена — "
                              + faults[0].message.splitlines()[0])
        cell.outputs = verdict_outputs(results, [call.hidden for call in calls])

    def _time_left(self) -> float:
        return float("inf") if self._deadline is None else self._deadline - time.monotonic()

    def _not_run_in_time(self, call: GradeCall) -> CheckResult:
        check = get_check(call.check_id)
        return CheckResult(call.check_id, check.title, check.points, False,
                           NOTEBOOK_TIME_UP_CHECK.format(limit=self.notebook_time_limit))

    def output(self, outs, msg, display_id, cell_index):
        """Keep a cell's outputs below ``max_output_bytes`` and the notebook's below ``max_notebook_output_bytes``:
        a cell printing gigabytes, or a hundred cells printing a megabyte each, cost the grader neither memory nor a
        huge graded notebook and feedback."""
        size = _message_size(msg)
        used = self._output_bytes.get(cell_index, 0)
        self._output_bytes[cell_index] = used + size
        total = self._notebook_output_bytes
        self._notebook_output_bytes = total + size
        over = used + size > self.max_output_bytes or total + size > self.max_notebook_output_bytes
        if over and msg.get("msg_type") == "error":  # an error is never dropped (nbgrader grades by it): shortened
            content = msg.get("content", {})
            outs.append(error_output(shorten(str(content.get("ename", "")), 200),
                                     shorten(str(content.get("evalue", "")), 2000)))
            return None
        if total + size > self.max_notebook_output_bytes:
            if total <= self.max_notebook_output_bytes:
                limit = self.max_notebook_output_bytes // 1024
                outs.append(NotebookNode(output_type="display_data", metadata={}, data={
                    "text/plain": NOTEBOOK_OUTPUT_CUT.format(limit=limit),
                    OUTPUT_CUT_MIME: {"limit_bytes": self.max_notebook_output_bytes, "notebook": True}}))
            return None
        if used + size <= self.max_output_bytes:
            return super().output(outs, msg, display_id, cell_index)
        if used <= self.max_output_bytes:
            limit = self.max_output_bytes // 1024
            outs.append(NotebookNode(output_type="display_data", metadata={}, data={
                "text/plain": OUTPUT_CUT.format(limit=limit), OUTPUT_CUT_MIME: {"limit_bytes": self.max_output_bytes}}))
        return None

    # nbclient binds its sync wrappers to the base class's coroutines: rebind them to ours.
    execute_cell = run_sync(async_execute_cell)
    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def _execute_or_recover(self, cell, cell_index, execution_count=None, store_history=True,
                                  remember=True):
        """Run a cell; if the kernel dies or wedges, restart it and replay what had run.  Past the notebook's time
        limit a cell does not run."""
        self._timed_out = False
        self._output_bytes[cell_index] = 0
        if cell.cell_type == "code" and self._time_left() <= 0:
            cell.outputs = [error_output("NotebookTimeLimit", NOTEBOOK_TIME_UP.format(limit=self.notebook_time_limit))]
            return cell
        try:
            await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except (DeadKernelError, CellTimeoutError) as error:
            died = isinstance(error, DeadKernelError)
            message = KERNEL_DIED if died else KERNEL_STUCK.format(timeout=self.timeout)
            self.log.warning("autograder: cell %d %s; restarting the kernel", cell_index,
                             "killed the kernel" if died else "did not answer the interrupt")
            cell.outputs.append(error_output("DeadKernelError" if died else "CellTimeoutError", message))
            await self._restart_and_replay()
            return cell
        if remember and not self._timed_out and cell.cell_type == "code" and cell.source.strip():
            self._completed.append(cell_index)
        return cell

    async def _restart_and_replay(self) -> None:
        """A fresh kernel with the state the completed cells built (a cell that fails on replay
        is left out and the replay starts over)."""
        while True:
            self._restarts += 1
            await self._restart_kernel()
            if self._restarts > self.max_kernel_restarts:
                self.log.warning("autograder: %d kernel restarts, no more replays", self._restarts)
                return
            failed = await self._replay()
            if failed is None:
                return
            self.log.warning("autograder: replaying cell %d failed; it is left out", failed)
            self._completed.remove(failed)

    async def _replay(self) -> int | None:
        """Run the completed cells again, outputs discarded; the index of one that fails."""
        for index in list(self._completed):
            self._timed_out = False
            try:
                await super().async_execute_cell(copy.deepcopy(self.nb.cells[index]), index,
                                                  store_history=False)
            except (DeadKernelError, CellTimeoutError):
                return index
            if self._timed_out:
                return index
        return None

    async def _restart_kernel(self) -> None:
        """Kill the kernel (dead or wedged) and start a fresh, hardened one."""
        km, kc = self.km, self.kc
        with contextlib.suppress(Exception):
            await ensure_async(km.shutdown_kernel(now=True))
        with contextlib.suppress(Exception):
            await ensure_async(km.cleanup_resources())
        with contextlib.suppress(Exception):
            await ensure_async(kc.stop_channels())
        self.kc = None
        self.km = self.create_kernel_manager()
        await self.async_start_new_kernel()
        await self.async_start_new_kernel_client()

    def _payloads(self, call: GradeCall, exported: dict) -> list[bytes] | CheckResult:
        """The check's objects as the kernel exported them, or the failed verdict that says why they are missing."""
        check = get_check(call.check_id)
        payloads = []
        for name in call.names:
            entry = exported.get(name)
            if not isinstance(entry, dict):
                return CheckResult(check.id, check.title, check.points, False,
                                   f"Не удалось получить `{name}` из ноутбука (ядро не ответило).")
            if "error" in entry:
                return CheckResult(check.id, check.title, check.points, False, str(entry["error"]))
            try:
                payloads.append(base64.b64decode(entry["payload"]))
            except (KeyError, TypeError, ValueError):
                return CheckResult(check.id, check.title, check.points, False,
                                   f"Не удалось получить `{name}` из ноутбука.")
        return payloads

    def _time_limit(self, call: GradeCall) -> float:
        check = get_check(call.check_id)
        return check.timeout_s if self.check_timeout is None else min(check.timeout_s, self.check_timeout)

    def _run(self, call: GradeCall, payloads: list[bytes], limit: float) -> CheckResult:
        return run_check(call.check_id, payloads, call.cases, timeout_s=limit,
                         secret_dirs=self._secret_dirs, write_protected=self._write_protected)


@contextlib.contextmanager
def _environment(name: str, value: str):
    """``os.environ[name] = value`` while the block runs (the kernels started in it inherit it)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _message_size(msg) -> int:
    content = msg.get("content", {})
    size = len(content.get("text", "") or "")
    for value in (content.get("data") or {}).values():
        size += len(value) if isinstance(value, str) else len(json.dumps(value))
    size += sum(len(line) for line in content.get("traceback", []) or [])
    return size


def copy_submission(folder: str, copy: str) -> None:
    """The kernel's private copy of a submission folder: its files without the notebooks (what the kernel needs
    of them it is sent cell by cell), links and other non-regular files left out (the submission was checked for
    them before: :func:`autograder.nbgrader.submission.links_in`)."""
    def ignore(where: str, names: list[str]) -> set[str]:
        return {name for name in names
                if name.endswith(".ipynb") or name == ".ipynb_checkpoints"
                or not (os.path.isdir(os.path.join(where, name)) or os.path.isfile(os.path.join(where, name)))
                or os.path.islink(os.path.join(where, name))}

    shutil.copytree(folder, copy, symlinks=True, ignore=ignore)


def _read_export(path: str) -> dict:
    """JSON only: the file was written by the student's kernel and is not trusted."""
    try:
        if os.path.getsize(path) > MAX_EXPORT_BYTES:
            return {}
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
