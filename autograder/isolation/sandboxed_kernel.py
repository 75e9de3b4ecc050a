"""The student's notebook kernel under grading, started inside the submission's sandbox.

jupyter_client's kernel manager as nbclient uses it, with three differences:

* the kernel's command line runs through bubblewrap (:func:`autograder.isolation.sandbox.command`), in the sandbox of
  the submission being graded, with an environment made here (an empty home inside the scratch folder,
  nothing of the grader's home or settings);
* the kernel talks over the ``ipc`` transport: ZeroMQ sockets that are files in the scratch folder, which the
  sandbox can reach although it has no network at all (the ``tcp`` default needs the host's loopback);
* an interrupt is jupyter's ``interrupt_request`` message on the control channel (the kernel signals
  itself): a signal from outside would reach bubblewrap, not the kernel in its own session.
"""
from __future__ import annotations

import os
import typing as t

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.utils import run_sync

from . import sandbox as sandbox_module
from .home import home_variables, private_home, worker_environment


#: The kernel's ZeroMQ sockets are files in a scratch folder (the ``ipc`` transport): ``kernel-<port>`` there.
KERNEL_SOCKETS = "kernel"


def use_ipc_sockets(manager, scratch: str) -> None:
    """Make the kernel of ``manager`` talk over socket files in ``scratch`` (and keep its connection file there)."""
    manager.transport = "ipc"
    manager.ip = os.path.join(scratch, KERNEL_SOCKETS)
    manager.connection_file = os.path.join(scratch, KERNEL_SOCKETS + ".json")


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in ``self.sandbox`` (set by :func:`configure` before start)."""

    sandbox: sandbox_module.Sandbox | None = None

    def configure(self, sandbox: sandbox_module.Sandbox) -> None:
        self.sandbox = sandbox
        use_ipc_sockets(self, sandbox.scratch)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        argv = super().format_kernel_cmd(extra_arguments)
        if self.sandbox is None:
            return argv
        home = os.path.join(self.sandbox.scratch, "kernel-home")
        if not os.path.isdir(home):
            private_home(home)
        # JPY_PARENT_PID: inside the sandbox the kernel's parent is bubblewrap's init, pid 1 (ipykernel then
        # neither polls for its parent nor prints its connection banner on the grader's terminal).
        env = {**worker_environment(), **home_variables(home), "JPY_PARENT_PID": "1"}
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "MPLBACKEND"):
            env.pop(name, None)  # the student's kernel keeps the machine's defaults; checks are one-threaded
        cwd = (self._launch_args or {}).get("cwd") or self.sandbox.scratch
        return sandbox_module.command(self.sandbox, argv, env=env, cwd=cwd)

    async def _async_interrupt_kernel(self) -> None:
        if not self.has_kernel:
            return await super()._async_interrupt_kernel()
        message = self.session.msg("interrupt_request", content={})
        self._connect_control_socket()
        self.session.send(self._control_socket, message)

    interrupt_kernel = run_sync(_async_interrupt_kernel)


__all__: t.Sequence[str] = ["SandboxedKernelManager"]
