"""Is the CuPy stand-in CuPy (issue 59)?  Every snippet of ``tests/golden/cupy/manifest.json`` — argument
marshalling, pointers, launch configurations, views and copies, creation, dtypes, reductions, constants — was
observed with real CuPy on a GPU (``benchmarks/cupy_golden.py --record``: the device, date, CuPy version and
command are in the manifest); here each is observed with the stand-in (posing as the H200: the same launch limits
as the H100 and H200) and must come out the same: the exception's type, or the result's kind, dtype, shape,
values, identity and memory shared with the inputs, and the device allocations as the memory checks count them.

:data:`KNOWN_DIFFERENCES` lists what the stand-in cannot do as CuPy does, each with why; it must keep differing
(a fixed one leaves the list)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.gpu import differential, emulated_cupy, nvrtc
from autograder.gpu.runtime import stand_in

MANIFEST = Path(__file__).resolve().parent / "golden" / "cupy" / "manifest.json"

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC is not installed")

#: Snippet name -> why the stand-in cannot behave as CuPy there.
KNOWN_DIFFERENCES = {
    "api: np.asarray(x)": "the stand-in's device arrays are NumPy memory (an ndarray subclass): NumPy converts "
                          "them without asking, where CuPy refuses (TypeError: implicit conversion)",
    "api: cp.einsum('ij,kj->ik', x, x)": "CuPy's einsum returns a transposed view of its product (not "
                                         "C-contiguous); the stand-in's is NumPy's, C-contiguous: same values",
}


def _manifest() -> dict:
    return json.loads(MANIFEST.read_text())


ROWS = _manifest()["snippets"] if MANIFEST.exists() else []


@pytest.fixture(scope="module")
def stand_in_observed() -> dict:
    with stand_in("H200"):
        return {row["name"]: differential.observe(emulated_cupy, row, emulated_cupy.DeviceAllocations)
                for row in ROWS}


def test_the_golden_data_say_where_they_come_from():
    manifest = _manifest()
    assert manifest["device"] and manifest["date"] and manifest["cupy"].split(".")[0] == "14"
    assert manifest["command"].startswith("python3 benchmarks/cupy_golden.py --record")
    names = [row["name"] for row in ROWS]
    assert len(names) == len(set(names)) and len(names) >= 300
    assert set(KNOWN_DIFFERENCES) <= set(names)


@pytest.mark.parametrize("row", [r for r in ROWS if r["name"] not in KNOWN_DIFFERENCES], ids=lambda r: r["name"])
def test_the_stand_in_does_what_cupy_did(row, stand_in_observed):
    assert differential.differences(row["observed"], stand_in_observed[row["name"]]) == []


@pytest.mark.parametrize("name", sorted(KNOWN_DIFFERENCES))
def test_a_known_difference_still_differs(name, stand_in_observed):
    row = next(r for r in ROWS if r["name"] == name)
    assert differential.differences(row["observed"], stand_in_observed[name]), f"fixed: remove {name!r}"


def test_a_difference_is_found_where_there_is_one():
    """The comparison itself can fail: a value, a dtype, an allocation, an exception type."""
    seen = {"result": {"kind": "device", "dtype": "float32", "shape": [2], "values": [1.0, 2.0], "is": []},
            "allocations": [8]}
    assert differential.differences(seen, seen) == []
    assert differential.differences(seen, {**seen, "allocations": [8, 8]})
    assert differential.differences(seen, {**seen, "result": {**seen["result"], "values": [1.0, 2.001]}})
    assert differential.differences(seen, {**seen, "result": {**seen["result"], "dtype": "float64"}})
    assert differential.differences({"raises": "TypeError", "allocations": []},
                                    {"raises": "CUDADriverError", "allocations": []})
    close = {**seen, "result": {**seen["result"], "values": [1.0, 2.0 * (1 + 2**-22)]}}
    assert differential.differences(seen, close) == []  # within a few units of float32's last place
