"""Is benchmarks/emulator_golden.py's catalogue well formed, without a GPU (the full ``--dry-run`` compiles all of it)?

Every form's argument layout must match its inputs and outputs, inputs must be reproducible from the seed, and one
form of each family must compile (NVRTC PTX for its virtual architecture, ptxas for the matching sm and sm_90).
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from autograder.gpu import nvrtc

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("emulator_golden", ROOT / "benchmarks" / "emulator_golden.py")
golden = importlib.util.module_from_spec(spec)
sys.modules.setdefault("emulator_golden", golden)  # dataclasses look their module up there
spec.loader.exec_module(golden)

FORMS = golden.build_forms(None)


def test_every_form_has_a_consistent_layout():
    """Do the arguments name exactly the inputs and outputs, with their dtypes and lengths?"""
    assert len(FORMS) >= 150
    for form in FORMS:
        buffers = {arg["name"]: arg for arg in form.args if arg["role"] != "scalar"}
        for name, array in form.inputs.items():
            assert buffers[name]["role"] in ("in", "inout"), form.name
            assert (buffers[name]["dtype"], buffers[name]["count"]) == (str(array.dtype), array.size), form.name
        for name, kind in form.outputs.items():
            assert buffers[name]["role"] in ("out", "inout") and kind in golden.VALUE_KINDS, form.name
        assert set(buffers) == set(form.inputs) | set(form.outputs), form.name
        assert form.kernel in form.source and form.arch in ("compute_75", "compute_80", "compute_90a"), form.name
        assert form.compare == "exact" or form.tolerance, form.name


def test_inputs_do_not_depend_on_the_selection():
    """Does --only give a form the same inputs as the full catalogue (the golden data is keyed by name)?"""
    for name in ("fma.rn.f32", "shfl.sync.idx.b32 c=0x1f", "atom.global.cas.b32"):
        (alone,) = golden.build_forms(name)
        full = next(form for form in FORMS if form.name == name)
        for arg, array in full.inputs.items():
            assert np.array_equal(alone.inputs[arg], array), (name, arg)


@pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC (cuda-bindings) is not installed")
@pytest.mark.parametrize("family", sorted({form.family for form in FORMS}))
def test_one_form_of_each_family_compiles(family):
    """Does the family's first form pass NVRTC and ptxas (what --dry-run checks for every form)?"""
    form = next(form for form in FORMS if form.family == family)
    assert golden.dry_compile(form) is None
    assert f".entry {form.kernel}(" in form.ptx


@pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC (cuda-bindings) is not installed")
def test_wgmma_forms_run_clean_on_the_emulator():
    """Before a GPU run spends time on them: every wgmma form compiles for sm_90a and runs on the emulator without a
    finding (its image is all written, its descriptors stay inside it), with many different results."""
    from autograder.gpu.emulator import launch

    forms = [form for form in FORMS if form.family == "wgmma"]
    assert len(forms) >= 10
    for form in forms:
        assert golden.dry_compile(form) is None, form.name
        buffers = {arg["name"]: (form.inputs[arg["name"]].copy() if arg["name"] in form.inputs
                                 else np.zeros(arg["count"], arg["dtype"])) for arg in form.args}
        result = launch(form.ptx, form.kernel, form.grid, form.block, [buffers[a["name"]] for a in form.args],
                        shared_bytes=form.shared_bytes)
        assert result.findings == [], (form.name, result.findings[:3])
        assert len(np.unique(buffers["out"])) > 1000, form.name


def test_a_partial_run_merges_into_the_golden_data(tmp_path):
    """--merge-from: the run's forms replace those of the same name and join the others, each with its run's
    provenance; the arrays of replaced forms go, the others stay."""
    old_forms = [{"name": "a.f32", "results": {"outputs": ["ptx"]}}, {"name": "b.f32", "results": {"outputs": ["ptx"]}}]
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "gpu", "date": "then", "forms": old_forms}))
    np.savez_compressed(tmp_path / "data.npz", **{"a.f32__in__in0": np.arange(3), "a.f32__ptx__out": np.arange(3),
                                                 "b.f32__ptx__out": np.arange(4)})
    run = {"date": "now", "device": {"name": "H200"}, "command": "python3 benchmarks/emulator_golden.py --only b",
           "forms": [{"name": "b.f32", "results": {"outputs": ["ptx"]}}, {"name": "c.f32", "results": {}}]}
    meta, arrays = golden.merged(tmp_path, run, {"b.f32__ptx__out": np.ones(2), "c.f32__in__in0": np.zeros(1)})
    by_name = {entry["name"]: entry for entry in meta["forms"]}
    assert set(by_name) == {"a.f32", "b.f32", "c.f32"} and meta["date"] == "then"
    assert "run" not in by_name["a.f32"] and by_name["b.f32"]["run"]["date"] == "now"
    assert meta["merged"] == [{"date": "now", "device": {"name": "H200"}, "command": run["command"],
                               "forms": ["b.f32", "c.f32"]}]
    assert set(arrays) == {"a.f32__in__in0", "a.f32__ptx__out", "b.f32__ptx__out", "c.f32__in__in0"}
    assert np.array_equal(arrays["b.f32__ptx__out"], np.ones(2))
