"""The GPU banks of lessons 06 and 07 (tests/test_gpu_lessons.py) on the PTX emulator: a smoke run, not the grading.

    python benchmarks/emulator_banks.py [compute_75|compute_80]

Each bank entry's answers (kernel source and wrapper) run with a stand-in for CuPy whose RawKernel launches
the emulator (numpy arrays as device arrays, new arrays NaN-filled), on the checks' visible and sanitizer
cases.  Per entry and wrapper it prints what the emulator saw: "ok" (within the lesson's tolerance),
"WRONG" (outside it) or the kinds of its findings, beside the checks the bank says the entry loses on a GPU.
Wiring the lessons' checks to the emulator (and comparing verdicts) is a later step.
"""
import contextlib
import io
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import test_gpu_lessons as banks  # noqa: E402
from autograder.gpu import nvrtc
from autograder.gpu.emulator import launch
from autograder.lessons.lesson06 import checks as l06
from autograder.lessons.lesson07 import checks as l07
from autograder.checks import reference as oracle
ARCH = sys.argv[1] if len(sys.argv) > 1 else "compute_75"
runs = []
_ptx = {}
class Kernel:
    def __init__(self, src, name, options=(), **kw):
        key = (src, name)
        if key not in _ptx: _ptx[key] = nvrtc.ptx(src, arch=ARCH)
        self.ptx, self.name, self.max_dynamic_shared_size_bytes = _ptx[key], name, 0
    def __call__(self, grid, block, args, shared_mem=0, **kw):
        runs.append(launch(self.ptx, self.name, grid, block, list(args), shared_mem))
def empty(shape, dtype=np.float32): return np.full(shape, np.nan, dtype)
cp = types.SimpleNamespace(RawKernel=Kernel, empty=empty, empty_like=lambda a, dtype=None: np.full_like(a, np.nan, dtype=dtype),
    zeros=np.zeros, zeros_like=np.zeros_like, float32=np.float32, int32=np.int32, asarray=np.asarray, ndarray=np.ndarray,
    ascontiguousarray=np.ascontiguousarray, sqrt=np.sqrt, mean=np.mean, cuda=types.SimpleNamespace(Device=lambda *a: types.SimpleNamespace(attributes={"MaxSharedMemoryPerBlockOptin": 227*1024})))
def cases06(kernel):
    out = []
    for table in (l06.VISIBLE, l06.SANITIZER_CASES):
        for c in table[kernel]:
            if kernel == "scale_add":
                a, x, y = l06._vectors(c["n"], c["seed"]); out.append(((a, x, y), l06._scale_add_oracle(a, x, y), dict(atol=1e-5, rtol=1e-5)))
            elif kernel == "row_sums":
                x = l06._rows(c["T"], c["D"], c["seed"]); out.append(((x,), l06._row_sums_oracle(x), dict(atol=l06._row_tolerance(c["D"]), rtol=1e-5)))
            else:
                A, B = l06._matrices(c["M"], c["K"], c["N"], c["seed"]); out.append(((A, B), l06._matmul_oracle(A, B), dict(atol=1e-5 + 2e-7 * c["K"], rtol=1e-5)))
    return out
def cases07():
    out = []
    for c in list(l07.VISIBLE) + list(l07.TAILS) + [{"T": 3, "D": 1000, "seed": 8}]:
        x, w = l07._inputs(c["T"], c["D"], c["seed"], c.get("scale", 1.0)); eps = c.get("eps", 1e-6)
        out.append(((x, w, eps), oracle.rms_norm(x, w, eps), dict(atol=1e-5, rtol=1e-5)))
    return out
for lesson, entries, fns in [("06_cuda_basics", banks.bank_06(), {"scale_add_gpu": "scale_add", "row_sums_gpu": "row_sums", "matmul_tiled_gpu": "matmul"}),
                             ("07_cupy_rmsnorm", banks.bank_07(), {"fused_rms_norm_gpu": None})]:
    for e in entries:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                ns = banks.namespace(lesson, e.answers)
        except Exception as ex:
            print(f"{e.name:<40} (namespace failed: {type(ex).__name__})"); continue
        ns["cp"] = cp
        for fn, k in fns.items():
            verdicts = []
            for args, expected, tol in (cases06(k) if k else cases07()):
                runs.clear()
                try:
                    got = ns[fn](*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
                except Exception as ex:
                    verdicts.append(f"raises {type(ex).__name__}: {str(ex)[:60]}"); break
                kinds = sorted({f.kind for r in runs for f in r.findings})
                if kinds: verdicts.append("+".join(kinds)); continue
                got = np.asarray(got)
                okv = got.shape == expected.shape and np.all(np.abs(got - expected) <= tol["atol"] + tol["rtol"] * np.abs(expected))
                verdicts.append("ok" if okv else "WRONG")
            print(f"{e.name:<34} {fn:<19} {' '.join(sorted(set(verdicts))):<22} loses on a GPU: "
                  f"{', '.join(sorted(x.split('.')[1] for x in e.loses)) or '-'}")
