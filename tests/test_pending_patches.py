"""benchmarks/pending/*.patch (changes waiting for a GPU run before they land, benchmarks/pending/README.md) still
apply to today's tree: a change on main that breaks one shows here, when it is cheap to refresh the patch."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCHES = sorted((ROOT / "benchmarks" / "pending").glob("*.patch"))


@pytest.mark.parametrize("patch", PATCHES, ids=[p.name for p in PATCHES])
def test_a_pending_patch_applies_to_main(patch):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("нужен git и клон репозитория: патч проверяется командой git apply --check")
    done = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, (f"{patch.name} no longer applies: refresh it "
                                  f"(benchmarks/pending/README.md)\n{done.stderr}")
