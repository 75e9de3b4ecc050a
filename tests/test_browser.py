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
    """JupyterLab on a temp folder holding the student notebook; yields (url, folder)."""
    folder = tmp_path / "course"
    folder.mkdir()
    nb = course.fill_answers(LESSON, {"fused_rms_norm": course.reference_answers(LESSON)["fused_rms_norm"]})
    nbformat.write(nb, folder / f"{LESSON}.ipynb")
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no "Jupyter news" toast over the toolbar
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
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
        yield url, folder
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def test_validate_in_jupyterlab_shows_the_graders_verdict(lab):
    """Does pressing Validate in JupyterLab show the grader's verdict for the student's notebook?"""
    from playwright.sync_api import sync_playwright

    url, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/{LESSON}.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)

            page.get_by_text("Run", exact=True).first.click()
            page.get_by_text("Run All Cells", exact=True).click()
            # Run All stops at the first failing cell: the bonus check of the unanswered stub.
            page.wait_for_function(
                """() => {
                    const busy = document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='busy']");
                    const notebook = document.querySelector('.jp-Notebook');
                    return !busy && notebook && notebook.textContent.includes('ещё не реализована');
                }""", timeout=300_000, polling=1000)
            page.screenshot(path=str(ARTIFACTS / "browser-run-all.png"), full_page=False)
            outputs = page.locator(".jp-OutputArea-output").all_text_contents()
            passed = [text for text in outputs if "✅" in text]
            assert any("Эквивалентность с эталоном float64: 3 из 3" in text for text in passed), outputs[:20]

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
        finally:
            browser.close()
    (ARTIFACTS / "browser-validate.txt").write_text(text, encoding="utf-8")
    assert "Validation Results" in text
    assert "ещё не реализована" in text, text[:3000]  # the bonus stub, in the grader's words
    assert "Эквивалентность с эталоном" not in text  # the answered part passes: not listed
