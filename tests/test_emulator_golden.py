"""Does the PTX emulator compute what the H200 computed, form by form (issue 26, "Proof against the H200")?

For every opcode form in ``tests/golden/emulator/manifest.json`` (written by ``benchmarks/emulator_golden.py`` on an
H200; docs/emulator-golden.md), the stored PTX is launched through :func:`autograder.gpu.emulator.launch` with the
stored inputs, and every output buffer is compared with the one the H200 wrote running that same PTX (the
``ptx`` output: compute_75 or compute_80 PTX JIT-compiled by the driver; the ``native`` sm_90 output is only used
where the PTX run is missing).

The rule (:func:`mismatches`):

* integer and predicate outputs: bit-equal;
* float outputs (f32, f64, f16, bf16; f16x2 and bf16x2 as two halves): bit-equal, signed zeros included, except
  that a NaN matches any NaN.  The GPU returns a canonical NaN (0x7fffffff for f32, 0x7fff for f16) from most
  arithmetic where IEEE 754 lets an implementation pick the payload, and passes payloads through others (neg, abs,
  min/max, moves); PTX does not promise either, so the payload is not part of what the emulator must match;
* approximate forms (the manifest's ``compare: approx``: ex2/lg2/rsqrt/sin/cos/tanh/rcp.approx/sqrt.approx/
  div.approx/div.full, the f64 approximations, mma with f32 or f16 accumulation): zeros, infinities and NaNs
  exactly as above; a finite result within ``ulp`` units in the last place of the GPU's, or within ``abs``
  (sin, cos, lg2: the PTX ISA bounds those by an absolute error; a bound may add ``abs_per_input * |x|`` beyond
  ``abs_within``, none does since the emulator follows the H200's sin/cos range reduction); mma: per warp within
  ``rel * (K * max|a| * max|b| + max|c|)`` of the GPU (the tensor cores truncate in their f32 accumulation).
  :data:`TOLERANCE_OVERRIDES` may tighten or widen a form's bound: each entry says why.

Forms the emulator does not implement yet answer with a finding of kind ``unsupported``: their test skips, and
:func:`test_unsupported_forms_are_exactly_the_expected_ones` keeps that gap visible and shrinking by asserting the
set equals :data:`EXPECTED_UNSUPPORTED` (a form that starts working must leave the set, a new gap must enter it).

Until both the emulator package and the golden data exist in the tree, the whole module skips and says which is
missing.  That skip is temporary: it goes once the emulator (``autograder/gpu/emulator/``) and an H200 run's
``tests/golden/emulator/`` are committed.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "emulator"
REGENERATE = "python3 benchmarks/emulator_golden.py (on a GPU machine; docs/emulator-golden.md)"


def _missing() -> list[str]:
    why = []
    try:
        from autograder.gpu.emulator import launch  # noqa: F401
    except ImportError as error:
        why.append(f"the emulator package autograder.gpu.emulator (launch) is not in the tree ({error})")
    manifest = GOLDEN / "manifest.json"
    if not manifest.exists() or not (GOLDEN / "data.npz").exists():
        why.append(f"the golden data {GOLDEN.relative_to(ROOT)}/manifest.json and data.npz are not in the tree: "
                   f"{REGENERATE}")
    elif json.loads(manifest.read_text(encoding="utf-8")).get("kind") != "gpu":
        why.append(f"{GOLDEN.relative_to(ROOT)}/manifest.json is a dry run's (no GPU outputs): {REGENERATE}")
    return why


_WHY = _missing()
if _WHY:
    pytest.skip("emulator golden data: skipped for now: " + "; ".join(_WHY), allow_module_level=True)

from autograder.gpu.emulator import launch  # noqa: E402

MANIFEST = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
FORMS = {form["name"]: form for form in MANIFEST["forms"] if form["results"].get("outputs")}

#: Forms the emulator does not emulate yet (a finding of kind "unsupported"). Keep it exact: remove a name once
#: its form is emulated, add one only with a reason.
EXPECTED_UNSUPPORTED: set[str] = set()  # every form of the 2026-12-02 golden data is emulated

#: Forms whose emulated output differs from the H200's today, each group with what is known.  A test of one
#: of them is expected to fail (strict: a form that starts matching must leave the set).  Shrink it.
KNOWN_MISMATCHES: dict[str, str] = {  # empty since the data of 2026-12-02 05:30 (the first with real f32/f64)
}

#: Per-form changes of the manifest's tolerance: name -> (dict merged into the tolerance, why).
_SINCOS = ({"abs": 2.0 ** -22}, "the emulator models the H200's range reduction (FMUL.RZ by float32(1/2pi), a 25-bit "
           "fixed-point turn): on 274,016 inputs every zero and sign matched and values were within 1.8e-7 < 2^-22, "
           "for any |x| (the PTX ISA's 2^-20.5 holds only in [-pi, pi])")
TOLERANCE_OVERRIDES: dict[str, tuple[dict, str]] = {
    "sin.approx.f32": _SINCOS,
    "sin.approx.ftz.f32": _SINCOS,
    "cos.approx.f32": _SINCOS,
    "cos.approx.ftz.f32": _SINCOS,
    "rcp.approx.ftz.f64": ({"ulp": 2 ** 32}, "the emulator models MUFU.RCP64H (the high word's reciprocal, truncated "
                           "to the high word): 487 of 512 bit-equal, the other 25 one unit of the high word (2^32 ulp) "
                           "below the H200's"),
    **{name: ({"rel": 0.0}, "tightened to bit-equal (zeros of either sign): the emulator models the H200's "
                            "truncating accumulation (ops_tensor.accumulate_f32; f16: rounded once)")
       for name in ("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
                    "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16",
                    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                    "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32",
                    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")},
    **{name: ({"rel": 0.0}, "tightened to bit-equal: the emulator's wgmma (ops_wgmma) reads what the H200 reads for every "
                            "swizzle, major and N of the catalogue, and accumulates as its mma.sync does: all elements "
                            "of the 2026-12-05 data bit-equal")
       for name in (form["name"] for form in MANIFEST["forms"] if form["family"] == "wgmma")},
}


@functools.cache
def _data():
    return np.load(GOLDEN / "data.npz")


def _expected(form: dict, arg: str) -> np.ndarray:
    data = _data()
    for run in ("ptx", "native"):
        key = f"{form['name']}__{run}__{arg}"
        if key in data.files:
            return data[key]
    raise KeyError(f"{form['name']}: no stored output for {arg}")


@functools.cache
def run_form(name: str):
    """The form on the emulator: (its output buffers by name, its findings)."""
    form = FORMS[name]
    data = _data()
    buffers, args = {}, []
    for arg in form["args"]:
        if arg["role"] == "scalar":
            args.append(np.int32(arg["value"]))
            continue
        key = f"{name}__in__{arg['name']}"
        buf = data[key].copy() if key in data.files else np.zeros(arg["count"], dtype=arg["dtype"])
        buffers[arg["name"]] = buf
        args.append(buf)
    result = launch(form["ptx"], form["kernel"], tuple(form["grid"]), tuple(form["block"]), args,
                    shared_bytes=form["shared_bytes"])
    return {arg: buffers[arg] for arg in form["outputs"]}, list(result.findings)


def _unsupported(findings) -> bool:
    return any(getattr(f, "kind", None) == "unsupported" for f in findings)


# --- the comparison rule ----------------------------------------------------------------------------
FLOAT = {"f32": (np.uint32, np.float32), "f64": (np.uint64, np.float64), "f16": (np.uint16, np.float16),
         "bf16": (np.uint16, None)}


def _halves(words: np.ndarray) -> np.ndarray:
    words = words.astype(np.uint32)
    return np.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(-1).astype(np.uint16)


def as_float(bits: np.ndarray, kind: str) -> np.ndarray:
    """Float64 values of raw bits of a float kind (bf16 through f32)."""
    with np.errstate(invalid="ignore"):  # signalling NaNs
        if kind == "bf16":
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return bits.astype(FLOAT[kind][0]).view(FLOAT[kind][1]).astype(np.float64)


def ordered(bits: np.ndarray, kind: str) -> np.ndarray:
    """Integers in the order of the floats the bits encode (-0 and +0 both 0): ulp distance is a difference."""
    width = {"f32": 32, "f64": 64, "f16": 16, "bf16": 16}[kind]
    b = bits.astype(np.uint64).astype(object) if width == 64 else bits.astype(np.int64)
    sign = 1 << (width - 1)
    if width == 64:
        return np.array([int(x) if int(x) < sign else sign - int(x) for x in b], dtype=object)
    return np.where(b < sign, b, sign - b)


def _flatten(kind: str, got: np.ndarray, want: np.ndarray):
    if kind in ("f16x2", "bf16x2"):
        return kind[:-2], _halves(got), _halves(want)
    return kind, got, want


def mismatches(kind: str, got: np.ndarray, want: np.ndarray, tol: dict | None = None,
               inputs: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of the elements where the emulator's output breaks the rule (module docstring)."""
    kind, got, want = _flatten(kind, got, want)
    if kind not in FLOAT:
        return got != want
    fg, fw = as_float(got, kind), as_float(want, kind)
    nan_g, nan_w = np.isnan(fg), np.isnan(fw)
    bad = (got != want) & ~(nan_g & nan_w)
    if not tol or not bad.any():
        return bad
    special = ~np.isfinite(fw) | (fw == 0) | ~np.isfinite(fg)
    close = np.zeros_like(bad)
    if "ulp" in tol:
        distance = ordered(got, kind) - ordered(want, kind)
        close |= np.array([abs(int(d)) <= tol["ulp"] for d in distance]) if distance.dtype == object \
            else np.abs(distance) <= tol["ulp"]
    if "abs" in tol:
        bound = np.full(fw.shape, float(tol["abs"]))
        if inputs is not None and "abs_per_input" in tol:
            x = np.abs(as_float(inputs, kind))
            bound = bound + np.where(x > tol.get("abs_within", math.inf), tol["abs_per_input"] * x, 0.0)
        close |= np.abs(fg - fw) <= bound
    return bad & ~(close & ~special)


def _fragment_values(words: np.ndarray, kind: str) -> np.ndarray:
    """Element values of mma fragment words (A/B operands): f16x2, bf16x2, tf32 (as f32) or s8 x 4."""
    if kind in ("f16x2", "bf16x2"):
        return as_float(_halves(words), kind[:-2])
    if kind == "s8":
        return words.astype(np.uint32).view(np.int8).astype(np.float64)
    return as_float(words.astype(np.uint32), "f32")


def mma_mismatches(form: dict, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per warp bound of an mma form with float accumulation (module docstring)."""
    tol = form["tolerance"]
    name = form["name"]
    ab = "bf16x2" if ".bf16." in name else "f32" if ".tf32." in name else "f16x2"
    data = _data()
    kind = form["outputs"]["out"]
    c_kind = "f32" if kind == "f32" else "f16x2"
    a = _fragment_values(data[f"{name}__in__a"], ab)
    b = _fragment_values(data[f"{name}__in__b"], ab)
    c = _fragment_values(data[f"{name}__in__c"], c_kind) if c_kind != "f32" else as_float(data[f"{name}__in__c"], "f32")
    warps = form["grid"][0]
    flat_kind, g, w = _flatten(kind, got, want)
    fg, fw = as_float(g, flat_kind), as_float(w, flat_kind)
    bad = (g != w) & ~(np.isnan(fg) & np.isnan(fw))
    scale = []
    for array in (a, b, c):
        per = array.reshape(warps, -1)
        with np.errstate(invalid="ignore"):
            scale.append(np.nanmax(np.where(np.isfinite(per), np.abs(per), 0.0), axis=1))
    bound = tol["rel"] * (tol["k"] * scale[0] * scale[1] + scale[2])
    bound = np.repeat(bound, fw.size // warps)
    special = ~np.isfinite(fw) | ~np.isfinite(fg)
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
        return bad & (special | ~(np.abs(fg - fw) <= bound))


def wgmma_mismatches(form: dict, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per warpgroup (block) bound of a wgmma form: ``rel * (K * max|A| * max|B| + max|C|)``, A and B bounded by the
    block's shared-memory image (and A's registers where it has them)."""
    tol, name, data = form["tolerance"], form["name"], _data()
    kind = "bf16x2" if ".bf16." in name else "f16x2"
    blocks = form["grid"][0]

    def block_max(values):
        per = values.reshape(blocks, -1)
        with np.errstate(invalid="ignore"):
            return np.max(np.where(np.isfinite(per), np.abs(per), 0.0), axis=1)

    image = block_max(_fragment_values(data[f"{name}__in__image"], kind))
    a = np.maximum(image, block_max(_fragment_values(data[f"{name}__in__a"], kind))) \
        if f"{name}__in__a" in data.files else image
    c = block_max(as_float(data[f"{name}__in__c"], "f32"))
    bound = np.repeat(tol["rel"] * (tol["k"] * a * image + c), want.size // blocks)
    fg, fw = as_float(got, "f32"), as_float(want, "f32")
    bad = (got != want) & ~(np.isnan(fg) & np.isnan(fw))
    special = ~np.isfinite(fw) | ~np.isfinite(fg)
    with np.errstate(invalid="ignore"):
        return bad & (special | ~(np.abs(fg - fw) <= bound))


# --- the tests ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FORMS))
def test_form_matches_the_h200(name, record_property, request):
    """Does the emulator give this form's stored H200 outputs (bit-equal, or within the form's bound)?"""
    form = FORMS[name]
    outputs, findings = run_form(name)
    if _unsupported(findings):
        pytest.skip(f"{name}: not emulated yet (in EXPECTED_UNSUPPORTED)")
    if name in KNOWN_MISMATCHES:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_MISMATCHES[name], strict=True))
    assert not findings, f"{name}: findings on a clean micro-kernel: {findings[:5]}"
    tol = dict(form["tolerance"]) if form["compare"] == "approx" else None
    if tol is not None and name in TOLERANCE_OVERRIDES:
        tol.update(TOLERANCE_OVERRIDES[name][0])
    problems, equal, total = [], 0, 0
    for arg, kind in form["outputs"].items():
        got, want = outputs[arg], _expected(form, arg)
        equal += int(np.count_nonzero(got == want))
        total += want.size
        if tol and tol.get("warp_scale"):
            bad = mma_mismatches(form, got, want)
        elif tol and tol.get("warpgroup_scale"):
            bad = wgmma_mismatches(form, got, want)
        else:
            inputs = _data()[f"{name}__in__in0"] if f"{name}__in__in0" in _data().files else None
            bad = mismatches(kind, got, want, tol, inputs if inputs is not None and inputs.size == want.size
                             else None)
        if bad.any():
            where = np.flatnonzero(bad)[:8]
            problems.append(f"{arg} ({kind}): {bad.sum()} of {bad.size} elements, e.g. at {where.tolist()}: "
                            f"emulator {[hex(int(x)) for x in np.asarray(got).reshape(-1)[where]]} "
                            f"H200 {[hex(int(x)) for x in np.asarray(want).reshape(-1)[where]]}")
    record_property("bit_equal_rate", equal / total if total else 1.0)
    assert not problems, f"{name}: " + "; ".join(problems)


def test_unsupported_forms_are_exactly_the_expected_ones():
    """Is the set of forms the emulator reports as unsupported exactly EXPECTED_UNSUPPORTED (no stale names)?"""
    stale = EXPECTED_UNSUPPORTED - set(FORMS)
    assert not stale, f"EXPECTED_UNSUPPORTED names forms the manifest does not have: {sorted(stale)}"
    unsupported = {name for name in FORMS if _unsupported(run_form(name)[1])}
    coverage = f"{len(FORMS) - len(unsupported)} of {len(FORMS)} forms emulated"
    assert unsupported == EXPECTED_UNSUPPORTED, (
        f"{coverage}; newly unsupported: {sorted(unsupported - EXPECTED_UNSUPPORTED)}; "
        f"now emulated (remove from EXPECTED_UNSUPPORTED): {sorted(EXPECTED_UNSUPPORTED - unsupported)}")


FLOAT_KINDS = {"f32", "f64", "f16", "bf16", "f16x2", "bf16x2"}


@pytest.mark.parametrize("name", sorted(n for n, f in FORMS.items() if f["family"] not in ("warp", "atom")
                                        and FLOAT_KINDS & set(f["outputs"].values())))
def test_float_results_are_results_not_a_constant(name):
    """Does each float-valued output of the H200 hold many different values (at least 16 of its elements)?

    A micro-kernel that stores its result through a value conversion instead of its bits writes 0 almost
    everywhere; the emulator, running the same PTX, then "matches" without testing the instruction.  The data
    of 2026-12-02 02:00 had this for every f32 and f64 output.
    """
    form = FORMS[name]
    for arg, kind in form["outputs"].items():
        if kind in FLOAT_KINDS:
            distinct = len(np.unique(_expected(form, arg)))
            assert distinct >= 16, f"{name}: {arg} holds {distinct} distinct values"
