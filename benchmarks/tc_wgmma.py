"""Lesson 09's FlashAttention on Hopper's warpgroup MMA (wgmma, sm_90a): the candidate for issue 30's 400 TFLOP/s.

    python benchmarks/tc_wgmma.py --compile                 # NVRTC sm_90a, no GPU: registers, spills, ptxas notes
    python benchmarks/tc_wgmma.py --emulate                 # no GPU: the selftest and the check on the PTX emulator
    python benchmarks/tc_wgmma.py --selftest                # on an sm_90 GPU: the two wgmma forms against NumPy
    python benchmarks/tc_wgmma.py [--only a,b] [--runs 3] [--out f.json]   # check against float64, time 8 shapes, H = 16

The kernels are benchmarks/tc_wgmma.cu (it says how they work), instantiated here per variant with the wgmma
wrappers this module writes (one operand list per N). ``--selftest`` checks each wgmma form alone (S = Q K^T with
both operands from 128-byte-swizzled shared memory, O += P V with P from registers and V N-major) for N = 64 and
128, and prints which output elements differ, so that a wrong descriptor field shows as a pattern. The timing run
then checks every variant against a float64 reference on small shapes before it times the eight shapes of
benchmarks/tc_variants.py beside the lesson's kernel and SDPA f16, and prints tc_variants' table.

``--emulate`` runs the same selftest and check on the PTX emulator (autograder/gpu/emulator/ops_wgmma.py): the
kernels' data flow, masks, barriers and shared-memory races, under the emulator's model of wgmma (descriptor,
swizzle and fragments as CUTLASS and the PTX ISA write them down). Only the GPU's ``--selftest`` confirms that
model; until it has run, a pass here says the kernels agree with it.

NVRTC compiles the source to PTX for compute_90a (CuPy would compile for sm_90, where wgmma does not exist); the
driver loads that PTX (``cp.RawModule(path=...)``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

#: name: (warpgroups per block, keys per K/V tile at d = 64, at d = 128, softmax overlapped with O += P V, blocks
#: per SM asked of the compiler at d = 64 and at d = 128: 2 caps the registers at 128 a thread)
VARIANTS = {
    "wg2_bc128": (2, 128, 128, False, (1, 1)),
    "wg2_bc64": (2, 128, 64, False, (1, 1)),
    "wg3_bc64": (3, 128, 64, False, (1, 1)),
    "overlap_wg2_bc64": (2, 128, 64, True, (1, 1)),   # the other overlapped shapes spill (3 warpgroups; 128 keys at d 128)
    "wg2_bc64_x2": (2, 64, 64, False, (2, 1)),        # two blocks per SM spill at d = 128
    # one warpgroup a block, several blocks an SM (4 at d = 64: 41 KiB each; 2 at d = 128: 81 KiB): the blocks'
    # softmax and wgmma phases drift apart on their own (FA3's ping-pong, unsynchronised), for twice the K/V reads
    # (128 keys a tile at d = 64 spill at 3 blocks an SM)
    "wg1": (1, 64, 64, False, (4, 2)),
}
SELFTEST_N = (64, 128)
SELFTEST_SHARED = 64 * 1024
ARCH = "compute_90a"


def wrappers(sizes=(64, 128)) -> str:
    """wgmma_ss<N> (A and B from shared memory, K-major, accumulate when asked) and wgmma_rs<N> (A from registers,
    B N-major from shared memory, always accumulate), f16 inputs, f32 accumulators m64nNk16."""
    out = ["template <int N> __device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 a, u64 b, int accumulate);",
           "template <int N> __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], u64 b);"]
    for n in sizes:
        r = n // 2
        regs = ", ".join(f"%{i}" for i in range(r))
        outs = ", ".join(f'"+f"(d[{i}])' for i in range(r))
        out.append(
            f"template <> __device__ __forceinline__ void wgmma_ss<{n}>(float (&d)[{r}], u64 a, u64 b, int accumulate)\n{{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r + 2}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, %{r}, %{r + 1}, p, 1, 1, 0, 0;\\n}}\\n"\n'
            f'                 : {outs}\n                 : "l"(a), "l"(b), "r"(accumulate));\n}}')
        out.append(
            f"template <> __device__ __forceinline__ void wgmma_rs<{n}>(float (&d)[{r}], const unsigned (&a)[4], u64 b)\n{{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r + 5}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, '
            f'{{%{r}, %{r + 1}, %{r + 2}, %{r + 3}}}, %{r + 4}, p, 1, 1, 1;\\n}}\\n"\n'
            f'                 : {outs}\n                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));\n}}')
    return "\n".join(out) + "\n"


def kernel_name(variant: str, d: int) -> str:
    return f"wgmma_{variant}_d{d}"


def shared_bytes(nwg: int, bc: int, d: int, overlap: bool = False) -> int:
    """Q (64 * nwg rows), two K tiles and two V tiles (three when overlapped), and 1 KiB to align the panels."""
    return (64 * nwg + (5 if overlap else 4) * bc) * d * 2 + 1024


def tile_and_shared(variant: str, d: int) -> tuple[int, int]:
    """(keys per K/V tile, dynamic shared bytes) of ``variant`` at head size ``d``."""
    nwg, bc64, bc128, overlap, _ = VARIANTS[variant]
    bc = bc64 if d == 64 else bc128
    return bc, shared_bytes(nwg, bc, d, overlap)


def source(variants=None, cu_text=None) -> str:
    """The module's CUDA source: tc_wgmma.cu (or ``cu_text`` in its place) with the wrappers and the kernels."""
    body = cu_text if cu_text is not None else (ROOT / "benchmarks" / "tc_wgmma.cu").read_text(encoding="utf-8")
    head, sep, rest = body.partition("__device__ __forceinline__ void wgmma_fence()")
    text = head + wrappers() + sep + rest
    for v in variants or VARIANTS:
        nwg, bc64, bc128, overlap, (per_sm64, per_sm128) = VARIANTS[v]
        for d, bc, per_sm in ((64, bc64, per_sm64), (128, bc128, per_sm128)):
            text += (f'\nextern "C" __global__ void __launch_bounds__({128 * nwg}, {per_sm})\n{kernel_name(v, d)}(const f16* Q, '
                     f"const f16* K, const f16* V, f16* O, int n, float scale, int causal)\n"
                     f"{{ flash_wgmma{'_overlap' if overlap else ''}<{d}, {bc}, {nwg}>(Q, K, V, O, n, scale, causal); }}\n")
    for n in SELFTEST_N:
        text += (f'\nextern "C" __global__ void __launch_bounds__(128, 1) selftest_ss_n{n}(const f16* A, const f16* Bt, '
                 f"float* C) {{ selftest_ss<{n}>(A, Bt, C); }}\n"
                 f'extern "C" __global__ void __launch_bounds__(128, 1) selftest_rs_n{n}(const f16* A, const f16* B, '
                 f"float* C) {{ selftest_rs<{n}>(A, B, C); }}\n")
    return text


def compiled():
    """NVRTC's sm_90a build of every kernel (no GPU needed): the result and ptxas's warnings (a wgmma it had to
    serialise, a spill)."""
    from autograder.gpu.nvrtc import compile_source
    result = compile_source(source(), arch="sm_90a")
    notes = [line for line in result.log.splitlines() if "warning" in line.lower() or "serializ" in line.lower()]
    return result, notes


def kernel_shape(name: str) -> tuple[int, int, int]:
    """(threads, dynamic shared bytes, d) of a flash kernel of this module."""
    variant, d = name[len("wgmma_"):].rsplit("_d", 1)
    return 128 * VARIANTS[variant][0], tile_and_shared(variant, int(d))[1], int(d)


def compile_report() -> int:
    result, notes = compiled()
    if not result.ok:
        print("sm_90a FAILED\n" + result.log[:6000])
        return 1
    for name, res in sorted(result.resources.items()):
        smem = f"  shared {kernel_shape(name)[1] / 1024:6.1f} KiB" if name.startswith("wgmma_") else ""
        print(f"sm_90a {name:<28} regs {res.registers:4d} spill st/ld {res.spill_stores:4d}/{res.spill_loads:4d}{smem}")
    print("\n".join(notes) if notes else "ptxas: no warnings (no wgmma serialised)")
    return 0


def load_module(cp):
    from autograder.gpu.nvrtc import ptx
    text = ptx(source(), arch=ARCH)
    folder = tempfile.mkdtemp(prefix="tc_wgmma-")
    path = Path(folder) / "tc_wgmma.ptx"
    path.write_text(text, encoding="utf-8")
    return cp.RawModule(path=str(path))


def gpu_runner(cp, module):
    """run(kernel, grid, block, args, shared) on the GPU: NumPy arrays in ``args`` are copied to the device and
    back; returns the arrays after the launch."""
    def run(kernel, grid, block, args, shared):
        function = module.get_function(kernel)
        function.max_dynamic_shared_size_bytes = shared
        device = [cp.asarray(a) if hasattr(a, "shape") and a.ndim else a for a in args]
        function(grid, block, tuple(device), shared_mem=shared)
        return [cp.asnumpy(a) for a in device if hasattr(a, "shape") and a.ndim]
    return run


def emulator_runner(cuda_source=None):
    """run(...) as gpu_runner's, on the PTX emulator (of :func:`source`, or ``cuda_source``); a finding (a race, a
    read out of bounds) raises."""
    from autograder.gpu import emulator
    from autograder.gpu.nvrtc import ptx
    text = ptx(cuda_source or source(), arch=ARCH)

    def run(kernel, grid, block, args, shared):
        copies = [a.copy() if hasattr(a, "shape") and a.ndim else a for a in args]
        result = emulator.launch(text, kernel, grid, block, copies, shared_bytes=shared)
        if result.findings:
            raise AssertionError(f"{kernel}: " + "; ".join(f"{f.kind}: {f.message}" for f in result.findings))
        return [a for a in copies if hasattr(a, "shape") and a.ndim]
    return run


def selftest(np, run) -> bool:
    """Each wgmma form alone against NumPy; prints the differing elements' rows and columns."""
    rng = np.random.default_rng(0)
    ok = True
    for n in SELFTEST_N:
        a = rng.integers(-3, 4, (64, 16)).astype(np.float16)
        b = rng.integers(-3, 4, (16, n)).astype(np.float16)
        want = a.astype(np.float64) @ b.astype(np.float64)
        for form, operand in (("ss", np.ascontiguousarray(b.T)), ("rs", b)):
            got = run(f"selftest_{form}_n{n}", (1,), (128,), [a, operand, np.zeros((64, n), np.float32)],
                      SELFTEST_SHARED)[-1]
            bad = np.argwhere(got != want)
            ok &= not len(bad)
            print(f"selftest {form} n={n}: {'ok' if not len(bad) else f'{len(bad)} of {64 * n} wrong'}")
            if len(bad):
                print("  wrong rows", sorted(set(bad[:, 0].tolist()))[:16], "columns", sorted(set(bad[:, 1].tolist()))[:16])
                r, col = bad[0]
                print(f"  e.g. C[{r},{col}] = {got[r, col]} (want {want[r, col]}); does it match another element? "
                      f"{np.argwhere(want == got[r, col])[:4].tolist()}")
    return ok


def reference(np, q, k, v, causal):
    """float64 attention of one head."""
    s = q.astype(np.float64) @ k.astype(np.float64).T / math.sqrt(q.shape[1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def launch_arguments(np, variant: str, q, o, causal: bool):
    """(kernel, grid, block, args, shared bytes) of one attention launch of ``variant`` over (H, n, d) arrays."""
    H, n, d = q.shape
    nwg = VARIANTS[variant][0]
    br = 64 * nwg
    return (kernel_name(variant, d), (H, (n + br - 1) // br), (128 * nwg,),
            [q, None, None, o, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(causal)],
            tile_and_shared(variant, d)[1])


def launcher(cp, np, module, variant: str, d: int):
    """An attention function of (H, n, d) CuPy arrays for the timing."""
    def run(q, k, v, causal):
        o = cp.empty_like(q)
        kernel, grid, block, args, shared = launch_arguments(np, variant, q, o, causal)
        args[1:3] = k, v
        function = module.get_function(kernel)
        function.max_dynamic_shared_size_bytes = shared
        function(grid, block, tuple(args), shared_mem=shared)
        return o
    return run


#: the largest |error| against float64 a variant may have to be timed: a few ulps of its f16 output
CHECK_TOLERANCE = 2e-3
#: (n, d, causal) of the check: ragged n, both head sizes, both masks
CHECK_SHAPES = ((64, 64, False), (200, 64, True), (333, 128, False), (1000, 128, True), (513, 64, False))


def check(np, run, variants, shapes=CHECK_SHAPES) -> dict:
    """Max |error| against float64 per variant (two heads per shape)."""
    rng = np.random.default_rng(1)
    errors = {}
    for variant in variants:
        worst = 0.0
        for n, d, causal in shapes:
            q, k, v = (rng.standard_normal((2, n, d)).astype(np.float16) for _ in range(3))
            kernel, grid, block, args, shared = launch_arguments(np, variant, q, np.zeros_like(q), causal)
            args[1:3] = k, v
            got = run(kernel, grid, block, args, shared)[-1]
            for h in range(2):
                error = float(np.max(np.abs(got[h].astype(np.float64) - reference(np, q[h], k[h], v[h], causal))))
                worst = max(worst, error if math.isfinite(error) else math.inf)   # a NaN output fails
        errors[variant] = worst
        print(f"check {variant}: max |error| vs float64 {worst:.2e}", flush=True)
    return errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--emulate", action="store_true", help="the selftest and the check on the PTX emulator (no GPU)")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    ap.add_argument("--runs", type=int, default=1,
                    help="time the eight shapes this many times over; the table of each, then their medians")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.compile:
        return compile_report()
    import numpy as np
    chosen = [v for v in VARIANTS if args.only is None or v in args.only.split(",")]
    if args.emulate:
        run = emulator_runner()
        if not selftest(np, run):
            return 1
        errors = check(np, run, chosen, CHECK_SHAPES[:3] + ((130, 128, True),))
        return 0 if max(errors.values()) <= CHECK_TOLERANCE else 1
    import torch  # before CuPy (benchmarks/decode_kernels.py says why)
    import cupy as cp
    module = load_module(cp)
    if not selftest(np, gpu_runner(cp, module)):
        return 1
    if args.selftest:
        return 0
    from gpu_kernels import Timer, load_answers
    from tc_variants import measure_shapes, median_rows, table
    errors = check(np, gpu_runner(cp, module), chosen)
    wrong = [v for v, e in errors.items() if not e <= CHECK_TOLERANCE]
    if wrong:
        print(f"not timed: {', '.join(wrong)} (error over {CHECK_TOLERANCE})")
        chosen = [v for v in chosen if v not in wrong]
    timer = Timer(cp, torch)
    lesson = load_answers("09_tensor_cores", {"cp": cp, "np": np, "math": math})["flash_attention_tc_gpu"]
    launchers = {name: (lambda d, name=name: launcher(cp, np, module, name, d)) for name in chosen}
    runs = [measure_shapes(cp, torch, timer, lesson, launchers) for _ in range(max(1, args.runs))]
    result = {"command": "python benchmarks/tc_wgmma.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "torch": torch.__version__,
              "cupy": cp.__version__, "variants": {v: VARIANTS[v] for v in chosen}, "check_errors": errors,
              "rows": median_rows(runs) if len(runs) > 1 else runs[0]}
    if len(runs) > 1:
        result["runs"] = runs
        for number, rows in enumerate(runs, 1):
            print(f"run {number} of {len(runs)}\n" + table(dict(result, rows=rows)) + "\n")
        print(f"medians over the {len(runs)} runs (ratios to SDPA taken within each run)")
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
