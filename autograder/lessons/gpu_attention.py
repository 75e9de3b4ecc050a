"""What the attention kernels of lessons 08 (float32) and 09 (float16 on tensor cores) share on the GPU.

The same contract (``fn(Q, K, V, causal=False, tile_counter=None)`` on (H, n, d) cupy arrays) gives the
same checks: one run of a case (:func:`run_attention`), the device memory (:func:`memory_verdict`), the
ungraded timing (:func:`performance_report`) and the six checks :func:`register_checks` registers
(equivalence, tails, causal, memory, the causal tile counter and compute-sanitizer).  What differs
(inputs, oracle, tolerance, hints) a lesson passes in.
"""
from __future__ import annotations

import numpy as np

from ..checks.core import CheckFailed, describe_case
from ..gpu import runtime as gpu
from ..gpu.sanitizer import sanitizer_verdict

MiB = 2**20

#: The cases of both lessons.  Sequence lengths in equivalence / causal cases are multiples of 128, so any
#: tile size up to 128 divides them; the tails check breaks that on purpose.
VISIBLE = [{"H": 2, "n": 256, "d": 64, "seed": 0}, {"H": 1, "n": 128, "d": 128, "seed": 1}]
TAILS = [{"H": 2, "n": 100, "d": 64, "seed": 2}, {"H": 1, "n": 1, "d": 64, "seed": 3},
         {"H": 1, "n": 77, "d": 128, "seed": 4, "causal": True}]
CAUSAL = [{"H": 2, "n": 256, "d": 64, "seed": 5}, {"H": 1, "n": 384, "d": 128, "seed": 6}]

#: On the PTX emulator (no GPU) a case runs at most this long a sequence and two heads: it executes every thread
#: of every block in turn, about a second for one head at n = 256 (benchmarks/emulator_speed.py).  The causal
#: tile counter runs one head at n = 256: two tiles of the largest size (128) already tell skipping (at most 3 of 4
#: pairs) from masking (all 4), within runtime.causal_tile_bound's 0.8.
EMULATOR_N, EMULATOR_HEADS, EMULATOR_CAUSAL_SKIP_N = 256, 2, 256


def emulator_sized(cases) -> list[dict]:
    """A check's cases, visible or hidden, as the emulator runs them: the same seeds, d, masks and scales, at most
    :data:`EMULATOR_HEADS` heads and n at most :data:`EMULATOR_N` plus the case's own tail past a multiple of 128
    (n = 500 runs as 372: the partial tile stays partial)."""
    return [{**c, "H": min(c["H"], EMULATOR_HEADS),
             "n": c["n"] if c["n"] <= EMULATOR_N else EMULATOR_N + c["n"] % 128} for c in cases]


def emulator_sized_causal_skip(cases) -> list[dict]:
    """The tile counter's cases on the emulator: one head at n = :data:`EMULATOR_CAUSAL_SKIP_N`."""
    return [{**c, "H": 1, "n": min(c["n"], EMULATOR_CAUSAL_SKIP_N)} for c in cases]


def run_attention(fn, host, c: dict, *, causal: bool, counter, what: str, dtype=np.float32):
    """Run the student's ``fn`` on ``host`` (q, k, v) of case ``c``: (host, the output on the host, the case)."""
    q, k, v = host
    case = describe_case(**{**c, "causal": causal})
    kwargs = {"causal": causal} if counter is None else {"causal": causal, "tile_counter": counter}
    got = gpu.run_student(fn, gpu.device(q), gpu.device(k), gpu.device(v), case=case, what=what, **kwargs)
    return host, gpu.to_host(got, shape=q.shape, case=case, dtype=dtype), case


def allowed_extra_bytes(H: int, n: int) -> int:
    """Device memory beyond the output: per-row statistics (m, l), a counter and 1 MiB (CuPy's pool rounds
    allocations up); on the emulator, whose arrays are their exact size, 64 KiB instead of the 1 MiB, so that an
    (n, n) S of its n = 256 (256 KiB a head) still shows."""
    return (64 * 1024 if gpu.emulated() else MiB) + 16 * H * n


def size(nbytes: int) -> str:
    """Bytes for a message: МиБ, or КиБ below one MiB (the emulator's cases)."""
    return f"{nbytes / MiB:.2f} МиБ" if nbytes >= MiB else f"{nbytes / 1024:.0f} КиБ"


def memory_verdict(fn, cases, *, inputs, compare, what: str, itemsize: int, where_s: str) -> str:
    """The memory check: a call allocates on the device no more than its output and
    :func:`allowed_extra_bytes`.  ``inputs(H, n, d, seed)`` gives the host (q, k, v);
    ``compare(got, host, case)`` checks the values; ``where_s`` says where the lesson's S lives."""
    for c in cases:
        H, n, d = c["H"], c["n"], c["d"]
        host = inputs(H, n, d, c["seed"])
        q, k, v = (gpu.device(a) for a in host)
        case = describe_case(**c)
        with gpu.DeviceAllocations() as seen:
            got = gpu.run_student(fn, q, k, v, case=case, what=what, causal=False)
        compare(got, host, case)
        output = H * n * d * itemsize
        extra = seen.total - output
        if extra > allowed_extra_bytes(H, n):
            raise CheckFailed(
                f"на устройстве выделено {size(seen.total)} за вызов ({len(seen.sizes)} выделений, самое "
                f"большое {size(seen.largest)}), а выход O занимает {size(output)}; сверх "
                f"выхода допустимо {size(allowed_extra_bytes(H, n))} ({case}).\n"
                f"Матрица S одной головы — это n·n·4 = {size(n * n * 4)}: FlashAttention не хранит "
                f"её в глобальной памяти — {where_s}.")
        return (f"выделено {size(seen.total)} при выходе {size(output)} "
                f"(матрица S заняла бы {size(H * n * n * 4)})")


def performance_report(fn, inputs, H: int, n: int, d: int, *, what: str, others, note: str) -> str:
    """Feedback, not graded: the student's time without a mask and with causal, its TFLOP/s next to those of
    ``others(q, k, v, causal)`` (pairs (label, ms), a pair with no time left out), and the causal / full
    ratio with the lesson's ``note``.  ``inputs(H, n, d, seed)`` gives the host (q, k, v)."""
    q, k, v = (gpu.device(a) for a in inputs(H, n, d, 11))
    case = describe_case(H=H, n=n, d=d)
    lines, times = [], {}
    for causal in (False, True):
        ms = gpu.time_student(fn, q, k, v, causal, case=case, what=what, repeat=3, rounds=3)
        times[causal] = ms
        flops = gpu.attention_flops(H, n, d, causal)
        line = f"{'causal' if causal else 'без маски'}: ваше ядро {ms:.2f} мс = {flops / ms / 1e9:.1f} TFLOP/s"
        for label, other in others(q, k, v, causal):
            if other:
                line += f"; {label} {flops / other / 1e9:.1f}"
        lines.append(line + " TFLOP/s")
    lines.append(f"время causal / без маски = {times[True] / times[False]:.2f} ({note})")
    return f"Производительность ({case}, не оценивается):\n" + "\n".join(lines)


def register_checks(lesson: str, check_case, memory, report, *, hints: dict, verdicts: dict, rows: str,
                    inputs: str) -> None:
    """The checks of an attention kernel both lessons give, with their points and titles:

    * ``{lesson}.equivalence`` (no mask, on :data:`VISIBLE`), ``{lesson}.tails`` (:data:`TAILS`) and
      ``{lesson}.causal`` (:data:`CAUSAL`): ``check_case(fn, c, causal=..., hint=...)`` checks one case and
      returns its error; ``hints`` and ``verdicts`` (the worst error -> the detail line) are the lesson's,
      by check;
    * ``{lesson}.memory``: ``memory(fn, cases)``, the lesson's call of :func:`memory_verdict`;
    * ``{lesson}.causal_skip``: the tile counter (:func:`runtime.causal_tile_counts`, ``rows`` the Q tile's
      height as the lesson writes it), then the ungraded ``report(fn)`` (:func:`performance_report`);
    * ``{lesson}.sanitizer``: memcheck and racecheck of one case whose values ``check_case(fn, c,
      causal=False)`` checks first; ``inputs`` builds its arguments in the child.
    """

    def worst(fn, cases, *, causal: bool, hint: str) -> float:
        return max(check_case(fn, c, causal=causal, hint=hint) for c in cases)

    def equivalence(fn, cases=VISIBLE):
        return verdicts["equivalence"](worst(fn, cases, causal=False, hint=hints["equivalence"]))

    def tails(fn, cases=TAILS):
        for c in cases:
            check_case(fn, c, causal=c.get("causal", False),
                       hint="строки Q и ключи за пределами n: загружайте нули, ключи j ≥ n маскируйте −inf, "
                            "строки i ≥ n не записывайте")
        return "хвосты обработаны: " + "; ".join(f"n={c['n']}, d={c['d']}" for c in cases)

    def causal(fn, cases=CAUSAL):
        return verdicts["causal"](worst(fn, cases, causal=True, hint=hints["causal"]))

    def memory_check(fn, cases=({"H": 2, "n": 2048, "d": 64, "seed": 9},)):
        return memory(fn, cases)

    def causal_skip(fn, cases=({"H": 2, "n": 1024, "d": 64, "seed": 10},)):
        def run_case(c, is_causal, counter):
            check_case(fn, c, causal=is_causal, counter=counter)

        detail = gpu.causal_tile_counts(run_case, cases, rows=rows)
        if gpu.emulated():
            return detail + "\nПроизводительность не измерялась: эмулятор не моделирует время (запустите на GPU)."
        return detail + "\n" + report(fn)

    def sanitizer(fn, cases=({"H": 1, "n": 100, "d": 64, "seed": 12},)):
        return sanitizer_verdict(fn, inputs, cases, lambda c: check_case(fn, c, causal=False), races=True)

    # Without a GPU every check runs on the PTX emulator at its sizes (emulator_sized: the GPU's hidden cases, n up to
    # 4096, would take it minutes).
    gpu.gpu_check(f"{lesson}.equivalence", points=3, title="GPU: совпадение с эталоном float64 (без маски)",
                  emulator_cases=emulator_sized)(equivalence)
    gpu.gpu_check(f"{lesson}.tails", points=2, title="GPU: n не кратно размеру тайла",
                  emulator_cases=emulator_sized)(tails)
    gpu.gpu_check(f"{lesson}.causal", points=2, title="GPU: causal-маска совпадает с эталоном",
                  emulator_cases=emulator_sized)(causal)
    gpu.gpu_check(f"{lesson}.memory", points=1, title="GPU: нет выделений размера (n, n)",
                  emulator_cases=emulator_sized)(memory_check)
    gpu.gpu_check(f"{lesson}.causal_skip", points=2, title="GPU: causal пропускает тайлы над диагональю (счётчик)",
                  timeout_s=120, emulator_cases=emulator_sized_causal_skip)(causal_skip)
    gpu.gpu_check(f"{lesson}.sanitizer", points=1, timeout_s=150, emulator_cases=emulator_sized,
                  title="GPU: нет выходов за границы и гонок (compute-sanitizer memcheck, racecheck)")(sanitizer)
