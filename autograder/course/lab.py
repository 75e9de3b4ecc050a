"""The lab's contents manager: a notebook opens as its kernel will describe it, so opening one changes nothing.

When a notebook's kernel starts, JupyterLab writes the kernel's ``language_info`` (name, exact Python version,
lexer ...) into the notebook's metadata; the released notebooks carry only ``{"name": "python"}`` (the students'
Pythons differ), so an untouched lesson showed as modified the moment it was opened.  The course's lab
(``.jupyter/jupyter_server_config.json``: ``ServerApp.contents_manager_class``) serves a Python notebook with the
``language_info`` of this server's own Python — the interpreter of the lab's ``python3`` kernel — and JupyterLab,
finding the same value, marks nothing.  Nothing is written to disk by this: a notebook saved later holds what
the kernel would have written anyway.
"""
from __future__ import annotations

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager


def kernel_language_info() -> dict:
    """What ipykernel reports for this Python (the lab's kernel runs the same interpreter as its server)."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def describe_as_kernel(notebook) -> None:
    """Give a Python notebook (kernelspec ``python3``) the ``language_info`` its kernel will report."""
    metadata = notebook.get("metadata", {})
    if metadata.get("kernelspec", {}).get("name") == "python3" and \
            metadata.get("language_info", {}).get("name", "python") == "python":
        metadata["language_info"] = kernel_language_info()


class CourseContentsManager(AsyncLargeFileManager):
    """Jupyter Server's default contents manager, with :func:`describe_as_kernel` on every notebook it serves."""

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if content and model.get("type") == "notebook" and model.get("content") is not None:
            describe_as_kernel(model["content"])
        return model
