"""What a student's code can tell about one snippet of CuPy code, as plain data: the proof that the CuPy stand-in
(:mod:`autograder.gpu.emulated_cupy`) is CuPy.

A snippet is ``{"name", "setup", "code"}``: ``setup`` runs first (inputs, kernels), then ``code`` inside a device
allocation counter; ``code`` leaves what it made in ``result``.  :func:`observe` runs a snippet with a ``cupy`` module
(real CuPy on a GPU, ``benchmarks/cupy_golden.py``; the stand-in, ``tests/test_cupy_golden.py``) and describes
what came out: the exception's type, or the result's kind, dtype, shape, values, whether it *is* one of the setup's
arrays or its memory overlaps one's; and, unless the snippet says ``"allocations": False`` (a compound function, whose
temporaries are CuPy's implementation), the sizes of the device allocations ``code`` made, counted as the memory checks
count them (:class:`~autograder.gpu.allocations.AllocationSizes`).  :func:`differences` compares two observations.
"""
from __future__ import annotations

import math

import numpy as np

#: Setup names whose identity and memory a result is compared with.
INPUTS = ("x", "y", "z")


def observe(cp, snippet: dict, allocations) -> dict:
    """Run ``snippet`` with ``cp`` as ``cupy``; ``allocations()`` is the device allocation counter (a context
    manager with ``sizes``)."""
    env = {"cp": cp, "np": np}
    try:
        exec(snippet.get("setup", ""), env)  # noqa: S102 - the corpus is the project's own code
    except Exception as error:  # noqa: BLE001 - the exception is the observation
        return {"setup_raises": type(error).__name__}
    counter = allocations()
    try:
        with counter:
            exec(snippet["code"], env)  # noqa: S102
            cp.cuda.Device().synchronize()
    except Exception as error:  # the exception is the observation
        return {"raises": type(error).__name__,
                **({"allocations": list(counter.sizes)} if snippet.get("allocations", True) else {})}
    finally:
        release = getattr(counter, "release", None)
        if release is not None and getattr(counter, "_outer", None) is None:
            release()
    inputs = {name: env[name] for name in INPUTS if name in env}
    out = {"result": describe(cp, env.get("result"), inputs, values=snippet.get("values", True))}
    if snippet.get("allocations", True):
        out["allocations"] = list(counter.sizes)
    return out


def describe(cp, value, inputs: dict, *, values: bool = True) -> dict:
    """``value`` as plain data; ``values=False`` leaves out values that differ run by run (an address, an
    uninitialised array)."""
    if isinstance(value, cp.ndarray):
        out = {"kind": "device", "dtype": str(value.dtype), "shape": list(value.shape),
               "c_contiguous": bool(value.flags.c_contiguous),
               "is": [name for name, a in inputs.items() if value is a],
               "shares_memory": [name for name, a in inputs.items()
                                 if isinstance(a, cp.ndarray) and _overlap(value, a)]}
        if values:
            out["values"] = _plain(np.asarray(value.get()).tolist())
        return out
    if isinstance(value, np.ndarray):
        out = {"kind": "host", "dtype": str(value.dtype), "shape": list(value.shape)}
        if values:
            out["values"] = _plain(value.tolist())
        return out
    if isinstance(value, np.generic):
        return {"kind": "numpy-scalar", "dtype": str(value.dtype), **({"values": _plain(value.item())} if values else {})}
    if isinstance(value, np.dtype):
        return {"kind": "dtype", "values": str(value)}
    if isinstance(value, type) and issubclass(value, np.generic):
        return {"kind": "scalar-type", "values": value.__name__}
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return {"kind": type(value).__name__, **({"values": _plain(value)} if values else {})}
    if isinstance(value, (tuple, list)):
        return {"kind": type(value).__name__, "items": [describe(cp, v, inputs, values=values) for v in value]}
    return {"kind": "object", "type": type(value).__name__}


def _overlap(a, b) -> bool:
    """Whether the device memory spans of two arrays overlap (``data.ptr`` and ``nbytes``: a view and the array it
    views do, a copy does not)."""
    if a.nbytes == 0 or b.nbytes == 0:
        return False
    lo_a, lo_b = _lowest(a), _lowest(b)
    return lo_a < lo_b + _span(b) and lo_b < lo_a + _span(a)


def _lowest(a) -> int:
    return a.data.ptr + sum(s * (n - 1) for s, n in zip(a.strides, a.shape) if s < 0)


def _span(a) -> int:
    return a.itemsize + sum(abs(s) * (n - 1) for s, n in zip(a.strides, a.shape))


def _plain(value):
    """JSON for values: NaN and infinities as strings, complex numbers as [real, imag]."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, complex):
        return {"complex": [_plain(value.real), _plain(value.imag)]}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


#: Relative tolerance of float values: elementwise functions of the GPU (exp, sqrt) and NumPy's may differ in the
#: last few units of the dtype's precision; everything else is exact.
ULPS = 8
_EPS = {"float16": 2.0**-10, "float32": 2.0**-23, "float64": 2.0**-52, "complex64": 2.0**-23,
        "complex128": 2.0**-52}


def differences(expected: dict, got: dict, path: str = "") -> list[str]:
    """Where ``got`` differs from ``expected`` (an observation each, or parts of one); empty when it does not."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(expected) | set(got)):
            if key not in got or key not in expected:
                out.append(f"{path}{key}: {expected.get(key, '—')!r} != {got.get(key, '—')!r}")
            elif key == "values":
                if not _values_equal(expected[key], got[key], _EPS.get(expected.get("dtype"), 2.0**-52)):
                    out.append(f"{path}values: {_brief(expected[key])} != {_brief(got[key])}")
            else:
                out += differences(expected[key], got[key], f"{path}{key}.")
        return out
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [d for i, (e, g) in enumerate(zip(expected, got)) for d in differences(e, g, f"{path}{i}.")]
    return [] if expected == got else [f"{path.rstrip('.')}: {_brief(expected)} != {_brief(got)}"]


def _values_equal(expected, got, eps: float) -> bool:
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(_values_equal(e, g, eps) for e, g in zip(expected, got))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(_values_equal(expected[k], got[k], eps) for k in expected)
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return abs(expected - got) <= ULPS * eps * max(abs(expected), abs(got))
    return type(expected) is type(got) and expected == got


def _brief(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
