"""Does the student's workflow work in a real browser: open the notebook, run it, press Validate?

JupyterLab from this environment serves a copy of the lesson-02 student notebook (the main
answer filled in, the bonus left as the stub) in a temp folder; Debian's headless Chromium,
driven by Playwright, runs all cells, presses nbgrader's *Validate* and reads the "Validation
Results" dialog: the bonus cells fail with the grader's Russian message.  Screenshots go to
artifacts/ (git-ignored) for CI to keep.  Skipped only where /usr/bin/chromium is missing
(`.ci/run` installs it).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from autograder import course

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = course.ROOT / "artifacts"
LESSON = "02_fused_rmsnorm"
TOKEN = "browser-test"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} not found: install Debian's chromium (`apt-get install -y chromium`; "
                              ".ci/run does it) to run the browser test"),
    pytest.mark.xdist_group("browser"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on a temp folder holding the student notebook; yields (url, path of its log)."""
    folder = tmp_path / "course"
    folder.mkdir()
    nb = course.fill_answers(LESSON, {"fused_rms_norm": course.reference_answers(LESSON)["fused_rms_norm"]})
    nbformat.write(nb, folder / f"{LESSON}.ipynb")
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no "Jupyter news" toast over the toolbar
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    notebook_settings = tmp_path / "lab-settings" / "@jupyterlab" / "notebook-extension"
    notebook_settings.mkdir(parents=True)  # every cell in the DOM, not only those in the viewport
    (notebook_settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port = free_port()
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "MPLBACKEND": "Agg",
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    log = open(tmp_path / "lab.log", "wb")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--allow-root",
         f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={folder}",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.port_retries=0"],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n"
                                       + (tmp_path / "lab.log").read_text(errors="replace")[-3000:])
                time.sleep(0.5)
        yield url, tmp_path / "lab.log"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


# A prompt shows "[*]" while its cell is queued or running, "[n]" once it ran, "[ ]" when never run.
STARTED = """() => [...document.querySelectorAll('.jp-InputArea-prompt')]
                   .some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"""
FINISHED = """() => {
    const busy = document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='busy']");
    const prompts = [...document.querySelectorAll('.jp-InputArea-prompt')].map(p => p.textContent);
    return !busy && prompts.some(p => /\\[\\d+\\]/.test(p)) && !prompts.some(p => p.includes('[*]'));
}"""


def wait_for_idle_kernel(url: str, timeout_s: float = 120) -> None:
    """The server's own word that the notebook's kernel started and is idle (the page's indicator may say so early)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/kernels?token={TOKEN}", timeout=10) as reply:
            if any(kernel.get("execution_state") == "idle" for kernel in json.load(reply)):
                return
        time.sleep(0.5)
    raise AssertionError(f"no idle kernel after {timeout_s:.0f} s")


def run_all_cells(page) -> None:
    """Run > Run All Cells, retried while the click did not start anything (notebook not yet current)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(3):
        # the cell's top-left corner (its prompt area, never a link): makes the notebook the current widget
        page.locator(".jp-Notebook .jp-Cell").first.click(position={"x": 10, "y": 10})
        page.get_by_text("Run", exact=True).first.click()
        page.get_by_text("Run All Cells", exact=True).click()
        try:
            page.wait_for_function(STARTED, timeout=30_000, polling=500)
            return
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    raise AssertionError("Run > Run All Cells did not start any cell (three attempts)")


def failure_report(page, lab_log: Path) -> str:
    """Screenshot and page text into artifacts/, and what CI's log should show of them."""
    try:
        page.screenshot(path=str(ARTIFACTS / "browser-failure.png"), full_page=False)
        text = page.locator("body").inner_text(timeout=10_000)
    except Exception as error:  # the page itself may be what broke
        text = f"(page not readable: {error})"
    (ARTIFACTS / "browser-failure.txt").write_text(text, encoding="utf-8")
    log = lab_log.read_text(errors="replace") if lab_log.exists() else ""
    return f"--- page text (end) ---\n{text[-4000:]}\n--- JupyterLab log (end) ---\n{log[-3000:]}"


def test_validate_in_jupyterlab_shows_the_graders_verdict(lab):
    """Does pressing Validate in JupyterLab show the grader's verdict for the student's notebook?"""
    from playwright.sync_api import sync_playwright

    url, lab_log = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/lab/tree/{LESSON}.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            wait_for_idle_kernel(url)

            run_all_cells(page)
            # Run All stops at the first failing cell: the bonus check of the unanswered stub.
            page.wait_for_function(FINISHED, timeout=300_000, polling=1000)
            page.screenshot(path=str(ARTIFACTS / "browser-run-all.png"), full_page=False)
            outputs = page.locator(".jp-OutputArea-output").all_text_contents()
            shown = "\n---\n".join(text[-600:] for text in outputs)
            assert any("ещё не реализована" in text for text in outputs), shown[-6000:]
            passed = [text for text in outputs if "✓" in text]
            assert any("Эквивалентность с эталоном float64: 3 из 3" in text for text in passed), shown[-6000:]

            page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click(force=True)
            dialog = page.locator(".jp-Dialog")
            dialog.wait_for(timeout=300_000)
            page.wait_for_function(
                "() => document.querySelector('.jp-Dialog') && "
                "document.querySelector('.jp-Dialog').textContent.includes('Validation Results')",
                timeout=300_000, polling=1000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(ARTIFACTS / "browser-validate.png"), full_page=False)
            text = dialog.text_content()
        except Exception as error:
            raise AssertionError(f"{error}\n{failure_report(page, lab_log)}") from error
        finally:
            browser.close()
    (ARTIFACTS / "browser-validate.txt").write_text(text, encoding="utf-8")
    assert "Validation Results" in text
    assert "ещё не реализована" in text, text[:3000]  # the bonus stub, in the grader's words
    assert "Эквивалентность с эталоном" not in text  # the answered part passes: not listed
