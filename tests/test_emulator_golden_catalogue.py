"""Is benchmarks/emulator_golden.py's catalogue well formed, without a GPU (the full ``--dry-run`` compiles all of it)?

Every form's argument layout must match its inputs and outputs, inputs must be reproducible from the seed, and one
form of each family must compile (NVRTC PTX for its virtual architecture, ptxas for the matching sm and sm_90).
"""
from __future__ import annotations

import importlib.util
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
        assert form.kernel in form.source and form.arch in ("compute_75", "compute_80"), form.name
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
