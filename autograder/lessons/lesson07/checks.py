"""Lesson 07: fused RMSNorm as a CUDA kernel launched through ``cupy.RawKernel``.

Contract: ``RMSNORM_SRC`` is CUDA C with ``extern "C" __global__ void rms_norm(...)``;
``fused_rms_norm_gpu(x, w, eps=1e-6)`` takes cupy float32 arrays x (T, D) and w (D,) and returns
a new cupy float32 array ``y = x / sqrt(mean(x**2, axis=-1) + eps) * w`` with no device memory
beyond the output.  The compile check runs anywhere (NVRTC); the others need a GPU.
"""
from __future__ import annotations

import numpy as np

from ...gpu import runtime as gpu, nvrtc
from ...checks import reference
from ...checks.core import CheckFailed, check, describe_case
from ...gpu.sanitizer import sanitizer_verdict
from ...checks.inputs import normal
from ...checks.mistakes import compare_or_name

WHAT = "fused_rms_norm_gpu"
MiB = 2**20

#: Equivalence cases keep D a multiple of 256 (a common block size) and of 4; tails break both.
VISIBLE = [{"T": 4096, "D": 512, "seed": 0}, {"T": 64, "D": 256, "seed": 1, "scale": 0.01, "eps": 1e-2}]
TAILS = [{"T": 37, "D": 1000, "seed": 2}, {"T": 5, "D": 4097, "seed": 3}, {"T": 4, "D": 4098, "seed": 4}]
SPEEDUP_REQUIRED = 2.0


def _inputs(T: int, D: int, seed: int, scale: float = 1.0):
    x = normal((T, D), seed, scale)
    w = normal((D,), seed + 1000, 0.5) + np.float32(1.0)
    return x, w


def sanitizer_inputs(T: int, D: int, seed: int):
    """Arguments for the run under compute-sanitizer (built in the child process)."""
    x, w = _inputs(T, D, seed)
    return gpu.device(x), gpu.device(w), 1e-6


def _run_case(fn, c: dict, *, hint: str = "") -> float:
    """Run one case on the GPU and compare with the float64 oracle; the max abs error."""
    x, w = _inputs(c["T"], c["D"], c["seed"], c.get("scale", 1.0))
    eps = c.get("eps", 1e-6)
    case = describe_case(**{**c, "eps": eps})
    got = gpu.run_student(fn, gpu.device(x), gpu.device(w), eps, case=case, what=WHAT)
    got = gpu.to_host(got, shape=x.shape, case=case)
    return compare_or_name(got, reference.rms_norm(x, w, eps), inputs=(x, w, eps), variants=reference.GPU_RMS_NORM_MISTAKES,
                           case=case, hint=hint)


@check("lesson07.compiles", points=1, title="Ядро rms_norm компилируется (NVRTC, без GPU)",
       memory_limit_gib=None, timeout_s=nvrtc.COMPILE_TIMEOUT_S)  # NVRTC and its threads map more than the CPU checks' 4 GiB cap
def compiles(source):
    return nvrtc.compile_check(source, ("rms_norm",), what="RMSNORM_SRC")


@gpu.gpu_check("lesson07.equivalence", points=3, title="GPU: совпадение с эталоном float64")
def equivalence(fused_rms_norm_gpu, cases=VISIBLE):
    errors = [_run_case(fused_rms_norm_gpu, c,
                        hint="eps прибавляется под корнем; сумма квадратов — по всей строке (все потоки "
                             "блока и все варпы), делится на D") for c in cases]
    return f"макс. ошибка {max(errors):.2e} (допуск 1e-5 + 1e-5·|y|)"


@gpu.gpu_check("lesson07.tails", points=2, title="GPU: хвосты — D не кратно блоку и 4, невыровненные строки")
def tails(fused_rms_norm_gpu, cases=TAILS):
    for c in cases:
        _run_case(fused_rms_norm_gpu, c,
                  hint="хвост строки не обработан: цикл по i < D с шагом blockDim.x (а не D / blockDim.x "
                       "итераций); float4 — только когда D % 4 == 0 и адрес кратен 16 байтам, "
                       "остаток — поэлементно")
    return "хвосты обработаны: " + "; ".join(f"T={c['T']}, D={c['D']}" for c in cases)


def _device_case(c: dict):
    """A case's host inputs (x, w), their device copies and the case as messages name it."""
    x, w = _inputs(c["T"], c["D"], c["seed"])
    return x, w, gpu.device(x), gpu.device(w), describe_case(**c)


def _require_right(got, x, w, case: str, rows=slice(None)) -> None:
    """The output (its ``rows``) matches the oracle with eps = 1e-6, or names the known mistake."""
    compare_or_name(gpu.to_host(got, shape=x.shape, case=case)[rows], reference.rms_norm(x[rows], w, 1e-6),
                    inputs=(x[rows], w, 1e-6), variants=reference.GPU_RMS_NORM_MISTAKES, case=case)


@gpu.gpu_check("lesson07.not_mutated", points=1, title="GPU: входы x и w не изменяются")
def not_mutated(fused_rms_norm_gpu, cases=({"T": 64, "D": 2048, "seed": 6},)):
    for c in cases:
        x, w, x_dev, w_dev, case = _device_case(c)
        _require_right(gpu.run_student(fused_rms_norm_gpu, x_dev, w_dev, 1e-6, case=case, what=WHAT), x, w, case)
        for name, before, after in (("x", x, x_dev), ("w", w, w_dev)):
            after = after.get()
            if not np.array_equal(before, after):
                raise CheckFailed(f"функция изменила вход {name}: {int(np.sum(before != after))} элементов "
                                  f"({case}). Ядро должно писать только в выходной массив y = cp.empty_like(x).")


def allowed_extra_bytes(T: int) -> int:
    """Device memory beyond the output a fused kernel may take: per-row scratch and 1 MiB."""
    return MiB + 16 * T


@gpu.gpu_check("lesson07.memory", points=1, title="GPU: на устройстве выделяется только выход")
def memory(fused_rms_norm_gpu, cases=({"T": 4096, "D": 1024, "seed": 7},)):
    for c in cases:
        x, w, x_dev, w_dev, case = _device_case(c)
        with gpu.DeviceAllocations() as seen:
            got = gpu.run_student(fused_rms_norm_gpu, x_dev, w_dev, 1e-6, case=case, what=WHAT)
        _require_right(got, x, w, case)
        T, output = c["T"], x.nbytes  # y is float32, as large as x
        extra = seen.total - output
        if extra > allowed_extra_bytes(T):
            raise CheckFailed(
                f"на устройстве выделено {seen.total / MiB:.1f} МиБ за вызов ({len(seen.sizes)} выделений, "
                f"самое большое {seen.largest / MiB:.1f} МиБ), а выход занимает {output / MiB:.1f} МиБ; "
                f"сверх выхода допустимо {allowed_extra_bytes(T) / MiB:.2f} МиБ ({case}).\n"
                "Так бывает, когда норма собрана из операций CuPy (x * x, mean, деление — каждая создаёт "
                "массив (T, D)) или ядро пишет промежуточный буфер. Слитое ядро читает x один раз "
                "и пишет только y.")
        return (f"выделено {seen.total / MiB:.1f} МиБ при выходе {output / MiB:.1f} МиБ "
                f"(сверх выхода {max(extra, 0) / 1024:.1f} КиБ)")


@gpu.gpu_check("lesson07.sanitizer", points=1, timeout_s=150,
               title="GPU: нет выходов за границы и гонок (compute-sanitizer memcheck, racecheck)")
def sanitizer(fused_rms_norm_gpu, cases=({"T": 3, "D": 1000, "seed": 8},)):
    return sanitizer_verdict(fused_rms_norm_gpu, f"{__name__}:sanitizer_inputs", cases,
                             lambda c: _run_case(fused_rms_norm_gpu, c), races=True)


def naive_rms_norm(x, w, eps=1e-6):
    """The composition of CuPy array operations that the fused kernel replaces."""
    return x / gpu._cp.sqrt(gpu._cp.mean(x * x, axis=-1, keepdims=True) + eps) * w


@gpu.gpu_check("lesson07.speed", points=2, timed=True,
               title=f"GPU: не меньше чем в {SPEEDUP_REQUIRED:g} раза быстрее наивной версии на CuPy")
def speed(fused_rms_norm_gpu, cases=({"T": 8192, "D": 4096, "seed": 9},)):
    for c in cases:
        x, w, x_dev, w_dev, case = _device_case(c)
        got = gpu.run_student(fused_rms_norm_gpu, x_dev, w_dev, 1e-6, case=case, what=WHAT)
        _require_right(got, x, w, case, rows=slice(0, c["T"], 16))  # every 16th row: the gate stays fast
        del got
        mine = gpu.time_student(fused_rms_norm_gpu, x_dev, w_dev, 1e-6, case=case, what=WHAT)
        naive = gpu.time_ms(naive_rms_norm, x_dev, w_dev, 1e-6)
        copy = gpu.copy_bandwidth(x.nbytes)
        moved = 2 * x.nbytes  # read x, write y
        achieved = moved / (mine * 1e-3)
        report = (f"ваше ядро {mine:.3f} мс: {achieved / 1e9:.0f} ГБ/с, {100 * achieved / copy:.0f} % от "
                  f"копирования память→память ({copy / 1e9:.0f} ГБ/с на этом GPU); наивная CuPy "
                  f"{naive:.3f} мс; ускорение {naive / mine:.1f}× ({case}, медиана по CUDA events)")
        if naive / mine < SPEEDUP_REQUIRED:
            raise CheckFailed(
                f"{report}.\nНужно ускорение не меньше {SPEEDUP_REQUIRED:g}×. Частые причины: один поток на "
                "строку (соседние потоки читают адреса через D·4 байт — доступ не коалесцирован); "
                "несколько запусков ядер или операции CuPy вокруг ядра; слишком мало потоков в блоке.")
        return report
