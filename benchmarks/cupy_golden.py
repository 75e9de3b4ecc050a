"""Golden data for the CuPy stand-in (issue 59, "A laptop's verdict is the GPU's verdict"): a corpus of snippets a
student's wrapper or demo cell could hold, observed with real CuPy on a GPU.

    python3 benchmarks/cupy_golden.py --record            # on a GPU: writes tests/golden/cupy/manifest.json
    python benchmarks/cupy_golden.py                      # here: the stand-in against that manifest, a table

The corpus (:func:`corpus`): argument marshalling (every Python and NumPy scalar type into every C parameter type a
kernel of the course declares; the kernel copies the parameter's bytes out, so garbage shows as garbage), pointers
(``x.data.ptr``, ``x.data``, offsets), launch configurations (empty, too large), views versus copies
(``ascontiguousarray``, ``asarray``, ``astype(copy=False)``, reshapes, slices), creation, dtypes and promotion,
reductions, elementwise functions, constants, and what a wrapper reads of the device.  Each snippet is observed by
:func:`autograder.gpu.differential.observe` (exception type, result, allocations as the memory checks count them);
``tests/test_cupy_golden.py`` observes each with the stand-in and asserts the same.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MANIFEST = ROOT / "tests" / "golden" / "cupy" / "manifest.json"

# --- argument marshalling ------------------------------------------------------------------------

#: C parameter types of the corpus's kernels: (kernel suffix, C type).
PARAMETERS = [("bool", "bool"), ("char", "signed char"), ("uchar", "unsigned char"), ("short", "short"),
              ("ushort", "unsigned short"), ("int", "int"), ("uint", "unsigned int"), ("ll", "long long"),
              ("ull", "unsigned long long"), ("float", "float"), ("double", "double")]

#: One kernel per parameter type: it copies the bytes of its parameter ``a`` into ``out`` (``out[sizeof a]`` is
#: written 0xAB as an end mark), so what the GPU read is what comes back, garbage included.
MARSHAL_SOURCE = "\n".join(
    f'''extern "C" __global__ void take_{suffix}({ctype} a, unsigned char* out)
{{
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&a);
    for (int i = 0; i < (int)sizeof(a); ++i) out[i] = p[i];
    out[sizeof(a)] = 0xAB;
}}''' for suffix, ctype in PARAMETERS)

#: Python expressions of the arguments passed.
ARGUMENTS = ["7", "-3", "2**40 + 5", "2**63", "1.5", "-2.25", "True", "1 + 2j",
             "np.int8(-5)", "np.uint8(200)", "np.int16(-300)", "np.uint16(60000)", "np.int32(-7)",
             "np.uint32(4000000000)", "np.int64(-9)", "np.uint64(2**63 + 1)", "np.intc(5)", "np.longlong(-6)",
             "np.float16(1.5)", "np.float32(1.5)", "np.float64(-1.5)", "np.bool_(True)", "np.complex64(1 + 2j)",
             "np.longdouble(1.5)", "np.zeros(1, np.float32)", "np.array([-7], np.int32)", "np.array(-7, np.int32)",
             "np.array([1.5], np.float32)", "np.array([1, 2], np.int32)", "np.float32(np.nan)", "2**64",
             "-2**63 - 1", "'a'", "[1]"]


def marshalling() -> list[dict]:
    setup = (f"SOURCE = {MARSHAL_SOURCE!r}\nmodule = cp.RawModule(code=SOURCE)\n"
             "y = cp.zeros(16, dtype=cp.uint8)\n")
    return [{"name": f"marshal {arg} -> {ctype}", "setup": setup,
             "code": f"module.get_function('take_{suffix}')((1,), (1,), ({arg}, y))\nresult = y"}
            for suffix, ctype in PARAMETERS for arg in ARGUMENTS]


# --- pointers and launches -----------------------------------------------------------------------

SCALE = r'''
extern "C" __global__ void scale(const float* x, float* y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
extern "C" __global__ void big_static(float* y)
{
    __shared__ float tile[12 * 1024];   // 48 KiB: the most a block may have statically
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}
extern "C" __global__ void dynamic(float* y)
{
    extern __shared__ float tile[];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}
'''
_SCALE_SETUP = (f"SOURCE = {SCALE!r}\nk = cp.RawKernel(SOURCE, 'scale')\nx = cp.arange(8, dtype=cp.float32)\n"
                "y = cp.zeros(8, dtype=cp.float32)\n")

POINTERS = {
    "pointer: x.data.ptr": "k((1,), (8,), (x.data.ptr, y.data.ptr, np.float32(2), np.int32(8)))\nresult = y",
    "pointer: x.data": "k((1,), (8,), (x.data, y.data, np.float32(2), np.int32(8)))\nresult = y",
    "pointer: offset ptr": "k((1,), (4,), (x.data.ptr + 16, y.data.ptr, np.float32(2), np.int32(4)))\nresult = y",
    "pointer: slice": "k((1,), (4,), (x[4:], y[2:], np.float32(2), np.int32(4)))\nresult = y",
    "pointer: difference of slices": "result = x[3:].data.ptr - x.data.ptr",
    "pointer: ptr is int": "result = type(x.data.ptr).__name__",
    "pointer: empty ptr of a view equals": "result = x[:4].data.ptr == x.data.ptr",
    "pointer: host array": "k((1,), (8,), (np.arange(8, dtype=np.float32), y, np.float32(2), np.int32(8)))\n"
                           "result = y",
    "pointer: python float and int": "k((1,), (8,), (x, y, 2.0, 8))\nresult = y",
}

LAUNCHES = {
    "launch: grid 0": "k((0,), (8,), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block 0": "k((1,), (0,), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: grid (0, 0)": "k((0, 0), (8, 1), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: 2-d grid and block": "k((2, 1), (4, 1), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block 1024": "k((1,), (1024,), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block 1025": "k((1,), (1025,), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block 2048": "k((1,), (2048,), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block 32x33": "k((1,), (32, 33), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block z 65": "k((1,), (1, 1, 65), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: grid y 65536": "k((1, 65536), (1,), (x, y, np.float32(2), np.int32(0)))\nresult = y",
    "launch: grid z 65536": "k((1, 1, 65536), (1,), (x, y, np.float32(2), np.int32(0)))\nresult = y",
    "launch: grid an int": "k(1, (8,), (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: block a list": "k((1,), [8], (x, y, np.float32(2), np.int32(8)))\nresult = y",
    "launch: args a list": "k((1,), (8,), [x, y, np.float32(2), np.int32(8)])\nresult = y",
    "launch: shared_mem 1 MiB": "k((1,), (8,), (x, y, np.float32(2), np.int32(8)), shared_mem=2**20)\nresult = y",
    "launch: shared 48 KiB static": "cp.RawKernel(SOURCE, 'big_static')((1,), (8,), (y,))\nresult = y",
    "launch: dynamic 48 KiB": "cp.RawKernel(SOURCE, 'dynamic')((1,), (8,), (y,), shared_mem=48 * 1024)\nresult = y",
    "launch: dynamic 49 KiB without opt-in": "cp.RawKernel(SOURCE, 'dynamic')((1,), (8,), (y,), "
                                             "shared_mem=49 * 1024)\nresult = y",
    "launch: dynamic 100 KiB with opt-in": "d = cp.RawKernel(SOURCE, 'dynamic')\n"
                                           "d.max_dynamic_shared_size_bytes = 100 * 1024\n"
                                           "d((1,), (8,), (y,), shared_mem=100 * 1024)\nresult = y",
    "launch: opt-in past the device": "d = cp.RawKernel(SOURCE, 'dynamic')\n"
                                      "d.max_dynamic_shared_size_bytes = 300 * 1024\n"
                                      "d((1,), (8,), (y,), shared_mem=300 * 1024)\nresult = y",
    "launch: too few arguments": "k((1,), (8,), (x, y, np.float32(2)))\nresult = y",
}


def kernels() -> list[dict]:
    return [{"name": name, "setup": _SCALE_SETUP, "code": code}
            for name, code in {**POINTERS, **LAUNCHES}.items() if name != "launch: too few arguments"]


# --- the array API: views and copies, creation, dtypes, reductions, constants ----------------------

_MATRIX = "x = cp.arange(12, dtype=cp.float32).reshape(3, 4)\n"
ARRAY_API = [
    # views or copies (the memory checks count the copies)
    "cp.ascontiguousarray(x)", "cp.ascontiguousarray(x.T)", "cp.ascontiguousarray(x, dtype=cp.float64)",
    "cp.ascontiguousarray(x[:, 1:])", "cp.ascontiguousarray(x[1:])", "cp.asarray(x)",
    "cp.asarray(x, dtype=cp.float32)", "cp.asarray(x, dtype=cp.float16)", "cp.asarray(x.T)",
    "cp.asarray(np.ones(3, np.float32))", "cp.asarray([1, 2, 3])", "cp.asarray([1.0, 2.0])", "cp.asarray(3.0)",
    "x.astype(cp.float32, copy=False)", "x.astype(cp.float32)", "x.astype(cp.float16)", "x.astype(cp.int32)",
    "x.astype('float64', copy=False)", "cp.array(x)", "cp.array(x, copy=False)", "cp.array(x, dtype=cp.float64)",
    "x.copy()", "cp.copy(x)", "x.reshape(-1)", "x.reshape(4, 3)", "x.reshape((2, 6))", "x.T.reshape(-1)",
    "x.ravel()", "x.T.ravel()", "x.flatten()", "x.T", "x.transpose()", "cp.transpose(x)", "x.swapaxes(0, 1)",
    "x[1]", "x[1:]", "x[:, 1]", "x[:, 1:3]", "x[::2]", "x[..., None]", "x[cp.newaxis]", "x[None, :, None]",
    "x[1, 2]", "x[-1, -1]", "x[[0, 2]]", "x[x > 5]", "x.view(cp.int32)", "x.view(cp.uint8)",
    "x[0].view(cp.float16)", "cp.expand_dims(x, 0)", "cp.squeeze(x[None])", "x.squeeze()",
    "cp.broadcast_to(x[0], (3, 4))",
    # creation
    "cp.empty((2, 3), dtype=cp.float32).shape", "cp.empty_like(x).dtype", "cp.zeros_like(x)", "cp.ones_like(x)",
    "cp.full_like(x, 7)", "cp.zeros(3)", "cp.ones((2, 2), dtype=cp.int32)", "cp.full((2, 2), 3.5)",
    "cp.full((2, 2), 3)", "cp.full(3, 2.0, dtype=cp.float32)", "cp.arange(5)", "cp.arange(0, 1, 0.25)",
    "cp.arange(5, dtype=cp.float32)", "cp.linspace(0, 1, 5)", "cp.eye(3)", "cp.zeros((2, 3), dtype=cp.float16)",
    "cp.zeros(0)", "cp.zeros((0, 4), cp.float32)", "cp.empty(0)", "cp.tril(cp.ones((3, 3)))",
    "cp.triu(x)", "cp.concatenate([x, x])", "cp.stack([x, x])", "cp.vstack([x, x])", "cp.hstack([x, x])",
    "cp.zeros(3, dtype='float32')", "cp.zeros(3, dtype=np.float32)", "cp.zeros(3, np.dtype('int8'))",
    # to the host
    "cp.asnumpy(x)", "x.get()", "x[1].get()", "x[1, 2].get()", "cp.asnumpy(x[1, 2])", "x.tolist()",
    "float(x[1, 2])", "int(x[1, 2])", "x[1, 2].item()", "x.item(5)", "bool(x[0, 0] == 0)",
    # reductions
    "x.sum()", "cp.sum(x)", "x.sum(axis=1)", "x.sum(axis=0, keepdims=True)", "x.max()", "cp.max(x, axis=0)",
    "x.min()", "cp.amax(x)", "x.mean()", "x.mean(axis=1)", "cp.abs(x - 1).max()", "float(x.sum())",
    "x.argmax()", "cp.argmax(x, axis=1)", "x.std()", "x.var(axis=0)", "x.prod()", "cp.cumsum(x, axis=1)",
    "cp.linalg.norm(x)", "cp.allclose(x, x)", "cp.allclose(x, x + 1)", "cp.isnan(x).any()",
    "cp.isfinite(x).all()", "cp.array_equal(x, x)", "cp.count_nonzero(x)", "(x > 3).sum()",
    # elementwise and promotion
    "x * 2", "x * 2.0", "x + 1", "x / 3", "x // 3", "x % 3", "x ** 2", "-x", "abs(x - 5)",
    "x + np.float64(1)", "x + np.float32(1)", "x + cp.float16(1)", "x.astype(cp.float16) + 1.0",
    "x.astype(cp.float16) * x", "x.astype(cp.int32) + 1.5", "x.astype(cp.int32) // 2",
    "cp.exp(x)", "cp.sqrt(x)", "cp.log1p(x)", "cp.tanh(x)", "cp.maximum(x, 3)", "cp.minimum(x, 3.5)",
    "cp.where(x > 5, x, 0)", "cp.where(x > 5, x, -cp.inf)", "cp.clip(x, 2, 8)", "x > 5", "x == x.T.T",
    "cp.matmul(x, x.T)", "x @ x.T", "cp.dot(x, x.T)", "cp.einsum('ij,kj->ik', x, x)", "x @ x[0]",
    "cp.exp(x - x.max(axis=1, keepdims=True))", "cp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)",
    "1 / cp.sqrt(x + 1)", "cp.isnan(cp.full(2, cp.nan))", "cp.nan_to_num(cp.full(2, cp.inf))",
    # constants, dtypes, modules
    "cp.inf", "cp.nan", "cp.pi", "cp.e", "cp.euler_gamma", "cp.newaxis", "cp.float32", "cp.float16",
    "cp.int64", "cp.bool_", "cp.complex64", "cp.dtype('float32')", "cp.dtype(cp.float16).itemsize",
    "cp.finfo(cp.float32).eps", "cp.iinfo(cp.int32).max", "cp.float32(1.5)", "cp.int32(7) + 1",
    "cp.get_array_module(x) is cp", "cp.get_array_module(np.ones(2)) is np",
    "isinstance(x, cp.ndarray)", "type(x).__name__", "type(x).__module__.split('.')[0]",
    "x.shape", "x.size", "x.nbytes", "x.dtype", "x.strides", "x.itemsize", "x.ndim", "len(x)",
    "x.flags.c_contiguous", "x.T.flags.c_contiguous", "x.T.flags.f_contiguous", "x[:, 1].flags.c_contiguous",
    "x.T.strides", "x[:, ::2].strides", "x.device.id",
    # the device, streams, events, the memory pool
    "cp.cuda.Device().synchronize()", "cp.cuda.Device(0).id", "cp.cuda.runtime.getDeviceCount() >= 1",
    "cp.cuda.Stream.null.synchronize()", "cp.cuda.get_current_stream().synchronize()",
    "cp.cuda.Event().record()", "cp.cuda.Event().synchronize()", "cp.get_default_memory_pool().free_all_blocks()",
    "isinstance(cp.get_default_memory_pool().used_bytes(), int)", "cp.cuda.runtime.deviceSynchronize()",
    "cp.random.seed(0)", "cp.random.standard_normal((2, 3), dtype=cp.float32).shape",
    "cp.random.rand(2, 3).dtype", "cp.random.randn(4).shape", "cp.random.random((2,)).dtype",
    # misuse a student makes
    "x + np.ones((3, 4), np.float32)", "np.asarray(x)", "x.reshape(5, 3)", "x[3, 0]", "cp.zeros((2, 3), 'nope')",
    "x.get(1)", "cp.asnumpy(np.ones(2))", "float(x)", "x @ x",
]


#: Compound functions and reductions: their results are compared, not the temporaries CuPy's implementation
#: allocates inside them (a CUB workspace beside a reduction's output: 1 B at 12 elements, more at larger sizes;
#: the index arrays of fancy indexing).  A wrapper that calls one allocates more than its output on a GPU and on
#: the stand-in alike, so the memory checks (which allow the output) fail it on both.
COMPOUND = {"x[[0, 2]]", "x[x > 5]", "cp.tril(cp.ones((3, 3)))", "cp.triu(x)", "x.std()", "x.var(axis=0)",
            "cp.linalg.norm(x)", "cp.allclose(x, x)", "cp.allclose(x, x + 1)", "cp.array_equal(x, x)",
            "cp.einsum('ij,kj->ik', x, x)", "cp.nan_to_num(cp.full(2, cp.inf))", "x.argmax()",
            "x.sum()", "cp.sum(x)", "x.sum(axis=1)", "x.max()", "x.min()", "cp.amax(x)", "x.mean()",
            "x.mean(axis=1)", "cp.abs(x - 1).max()", "float(x.sum())", "x.prod()",
            "cp.exp(x - x.max(axis=1, keepdims=True))", "cp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)"}


def array_api() -> list[dict]:
    uninitialised = {"cp.empty((2, 3), dtype=cp.float32).shape", "cp.empty_like(x).dtype"}
    varying = {"cp.cuda.Event().record()"}
    return [{"name": f"api: {code}", "setup": _MATRIX, "code": f"result = {code}",
             **({"values": False} if code in uninitialised | varying else {}),
             **({"allocations": False} if code in COMPOUND else {})} for code in ARRAY_API]


def corpus() -> list[dict]:
    return marshalling() + kernels() + array_api()


# --- record on a GPU, compare here ---------------------------------------------------------------

def record(out: Path) -> None:
    import cupy

    from autograder.gpu import differential, runtime

    rows = []
    for snippet in corpus():
        rows.append({**snippet, "observed": differential.observe(cupy, snippet, runtime.DeviceAllocations)})
    props = cupy.cuda.runtime.getDeviceProperties(0)
    manifest = {"device": props["name"].decode(), "date": datetime.date.today().isoformat(),
                "cupy": cupy.__version__, "command": "python3 benchmarks/cupy_golden.py --record",
                "snippets": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    raised = sum("raises" in r["observed"] for r in rows)
    print(f"{len(rows)} snippets ({raised} raise) on {manifest['device']}, CuPy {manifest['cupy']}: {out}")


def compare(manifest: Path) -> int:
    from autograder.gpu import differential, emulated_cupy, runtime

    data = json.loads(manifest.read_text())
    differ = 0
    with runtime.stand_in("H200"):
        for row in data["snippets"]:
            got = differential.observe(emulated_cupy, row, emulated_cupy.DeviceAllocations)
            found = differential.differences(row["observed"], got)
            if found:
                differ += 1
                print(f"DIFFERS  {row['name']}\n    " + "\n    ".join(found))
    print(f"{len(data['snippets']) - differ} of {len(data['snippets'])} snippets agree with "
          f"{data['device']} (CuPy {data['cupy']}, {data['date']})")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="observe with real CuPy (needs a GPU)")
    parser.add_argument("--out", type=Path, default=MANIFEST)
    args = parser.parse_args()
    if args.record:
        record(args.out)
    else:
        sys.exit(1 if compare(args.out) else 0)


if __name__ == "__main__":
    main()
