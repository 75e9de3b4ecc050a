"""Lesson 01's roofline for the students' own CUDA kernels, from what the PTX emulator counted (ungraded feedback).

Without a GPU, every launch on the emulator records the bytes its global loads and stores moved and its
floating-point operations (:mod:`autograder.gpu.emulator.counts`).  :func:`show` puts each kernel launched since
its last call on the roofline of a T4 (Colab's free GPU) and of the H200 of the lessons' measurements: its
arithmetic intensity against each ridge point, what bounds it, and the least time the roofline allows it — the
point of the module, bytes rather than FLOPs deciding, seen on the student's own kernel.  On a GPU the lessons'
measurement cells time the kernels (the emulator does not model time) and pass :class:`Measured` points —
time, the bytes the operation must move, its FLOPs — to :func:`show`, which puts the attained point under the
roofs: how far below its roof the kernel runs.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..gpu import emulated_cupy, runtime


@dataclasses.dataclass(frozen=True)
class Roof:
    """A GPU's roof: memory bandwidth (bytes/s), fp32 on CUDA cores and dense f16 on tensor cores (FLOP/s)."""

    bandwidth: float
    fp32: float
    tensor_f16: float


#: The two GPUs the lessons compare.  T4: NVIDIA T4 datasheet (320 GB/s, fp32 8.1 TFLOP/s, f16 tensor 65 TFLOP/s).
#: H200: H200 datasheet (4.8 TB/s; dense f16/bf16 989 TFLOP/s) and the H100 SXM fp32 figure, 67 TFLOP/s (the same
#: SMs and clocks; ../shared/FACTS.md).  Lesson 06's table of the two GPUs quotes these.
ROOFS = {"T4": Roof(320e9, 8.1e12, 65e12), "H200": Roof(4.8e12, 67e12, 989e12)}


@dataclasses.dataclass(frozen=True)
class KernelTraffic:
    """What the emulator counted for one kernel over its launches."""

    name: str
    launches: int
    bytes_read: int
    bytes_written: int
    flops: float  # on CUDA cores
    tensor_flops: float  # mma.sync

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOP per byte of global memory moved."""
        return (self.flops + self.tensor_flops) / max(self.bytes, 1)

    def least_seconds(self, roof: Roof) -> float:
        """The roofline's bound on the time: the bytes at full bandwidth or the FLOPs at the peak, whichever is longer."""
        return max(self.bytes / roof.bandwidth, self.flops / roof.fp32 + self.tensor_flops / roof.tensor_f16)

    def peak(self, roof: Roof) -> float:
        """The FLOP/s roof that applies: tensor cores when most of the work is mma.sync, else fp32."""
        return roof.tensor_f16 if self.tensor_flops > self.flops else roof.fp32


@dataclasses.dataclass(frozen=True)
class Measured:
    """A kernel timed on a GPU: ``seconds`` a call, the ``bytes`` of global memory the operation must move (its
    inputs read and its output written once) and its ``flops``; ``tensor``: the FLOPs run on tensor cores."""

    name: str
    seconds: float
    bytes: float
    flops: float
    tensor: bool = False

    @property
    def intensity(self) -> float:
        return self.flops / max(self.bytes, 1)

    @property
    def attained(self) -> float:
        """FLOP/s."""
        return self.flops / self.seconds

    def roof_at_intensity(self, roof: Roof) -> float:
        """The most FLOP/s the roofline allows at this intensity."""
        return min(roof.tensor_f16 if self.tensor else roof.fp32, self.intensity * roof.bandwidth)


def device_roof() -> str | None:
    """The :data:`ROOFS` key of the GPU this process runs on (None: another GPU, or none)."""
    ok, text = runtime.gpu_status()
    return next((name for name in ROOFS if ok and name in text), None)


_SEEN = {"launches": 0}


def new_launches() -> list[KernelTraffic]:
    """Per kernel, in the order first launched: the launches on the emulator since the last call."""
    start = _SEEN["launches"] if _SEEN["launches"] <= len(emulated_cupy.LAUNCHES) else 0
    _SEEN["launches"] = len(emulated_cupy.LAUNCHES)
    totals: dict[str, list] = {}
    for name, result in emulated_cupy.LAUNCHES[start:]:
        t = totals.setdefault(name, [0, 0, 0, 0.0, 0.0])
        for k, value in enumerate((1, result.global_read, result.global_written, result.flops, result.tensor_flops)):
            t[k] += value
    return [KernelTraffic(name, *t) for name, t in totals.items()]


def _megabytes(n: float) -> str:
    return f"{n / 1e6:.3g} МБ" if n >= 1e5 else f"{n / 1e3:.3g} КБ"


def _seconds(s: float) -> str:
    return f"{s * 1e6:.3g} мкс" if s < 1e-3 else f"{s * 1e3:.3g} мс"


def report(kernels: list[KernelTraffic]) -> str:
    """Russian lines, a kernel each: bytes, FLOPs, intensity, and per GPU the ridge point, the bound and the least
    time."""
    lines = []
    for k in kernels:
        flops = f"{(k.flops + k.tensor_flops) / 1e6:.3g} MFLOP" + (
            f" (из них на тензорных ядрах {k.tensor_flops / 1e6:.3g})" if k.tensor_flops else "")
        line = (f"{k.name} (запусков: {k.launches}): прочитано {_megabytes(k.bytes_read)}, записано "
                f"{_megabytes(k.bytes_written)}, {flops} → интенсивность {k.intensity:.3g} FLOP/байт.")
        for gpu, roof in ROOFS.items():
            ridge = k.peak(roof) / roof.bandwidth
            bound = "памятью" if k.intensity < ridge else "вычислениями"
            line += (f" {gpu}: ridge point {ridge:.3g} FLOP/байт — ограничено {bound}, не быстрее "
                     f"{_seconds(k.least_seconds(roof))}.")
        lines.append(line)
    return "\n".join(lines)


def measured_report(points: list[Measured], device: str | None) -> str:
    """Russian lines, a timed kernel each: its bandwidth and FLOP/s, and how much of the roof at its intensity
    that is on this GPU (``device``, a :data:`ROOFS` key) or, on another GPU, on the H200's."""
    lines = []
    for m in points:
        gpu = device or "H200"
        roof = ROOFS[gpu]
        share = m.attained / m.roof_at_intensity(roof)
        bound = "памятью" if m.intensity * roof.bandwidth < (roof.tensor_f16 if m.tensor else roof.fp32) else \
            "вычислениями"
        lines.append(f"{m.name}: {_seconds(m.seconds)} → {m.bytes / m.seconds / 1e9:.4g} ГБ/с, "
                     f"{m.attained / 1e12:.3g} TFLOP/s при интенсивности {m.intensity:.3g} FLOP/байт; крыша {gpu} "
                     f"здесь (ограничено {bound}) — {m.roof_at_intensity(roof) / 1e12:.3g} TFLOP/s, достигнуто "
                     f"{share:.0%}" + ("" if device else " (ваш GPU не T4 и не H200: для сравнения взята крыша H200)")
                     + ".")
    return "\n".join(lines)


def plot(kernels: list[KernelTraffic], measured: list[Measured] = ()):
    """Lesson 01's roofline of the T4 and the H200 (log-log) with each kernel at its intensity on both roofs and
    each timed kernel at the FLOP/s it attained (a star)."""
    import matplotlib.pyplot as plt

    tensor = any(k.tensor_flops > k.flops for k in kernels) or any(m.tensor for m in measured)
    intensities = [k.intensity for k in (*kernels, *measured) if k.intensity > 0] or [1.0]
    x = np.logspace(np.log10(min(min(intensities) / 4, 0.05)), np.log10(max(max(intensities) * 4, 500)), 200)
    fig, ax = plt.subplots(figsize=(7, 4))
    for (gpu, roof), style in zip(ROOFS.items(), ("-", "--")):
        peak = roof.tensor_f16 if tensor else roof.fp32
        ax.plot(x, np.minimum(peak, x * roof.bandwidth) / 1e12, style, color="gray",
                label=f"{gpu}: {roof.bandwidth / 1e9:.0f} ГБ/с, {peak / 1e12:.3g} TFLOP/s "
                      f"({'f16 тензорные ядра' if tensor else 'fp32'})")
        for k in kernels:
            ax.plot([k.intensity], [min(k.peak(roof), k.intensity * roof.bandwidth) / 1e12], "o" if gpu == "T4" else "s",
                    color=f"C{kernels.index(k)}", label=k.name if gpu == "T4" else None)
    for i, m in enumerate(measured):
        ax.plot([m.intensity], [m.attained / 1e12], "*", markersize=12, color=f"C{len(kernels) + i}",
                label=f"{m.name}: замер, {m.attained / 1e12:.3g} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("интенсивность, FLOP/байт глобальной памяти")
    ax.set_ylabel("достижимо, TFLOP/s")
    ax.set_title("Ваши ядра на roofline (замер на GPU: ★; крыши: T4 сплошная, H200 пунктир)" if measured else
                 "Ваши ядра на roofline (счёт эмулятора GPU; ● T4, ■ H200)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def show(measured: list | None = None) -> None:
    """The notebooks' call after a kernel ran: on the emulator, the report and the plot of the kernels launched
    since the last call; on a GPU, given the ``measured`` kernels of a measurement cell (:class:`Measured`, or
    its fields as a tuple: name, seconds, bytes, FLOPs[, tensor]), where they are under the roofs, else one line
    (the lesson's measurement cells pass them)."""
    if measured:
        measured = [m if isinstance(m, Measured) else Measured(*m) for m in measured]
        if runtime.emulated():
            print("Эмулятор не моделирует время: точки по замеру строятся на GPU.")
            return
        print("Где ваши ядра на roofline урока 01 по замеру (байты — сколько операция должна прочитать и "
              "записать; не оценивается):\n" + measured_report(measured, device_roof()))
        import matplotlib.pyplot as plt

        plot([], measured)
        plt.show()
        return
    if not runtime.emulated():
        print("Roofline по счёту эмулятора строится без GPU; на GPU ядра попадают на него в ячейках с замерами ниже.")
        return
    kernels = new_launches()
    if not kernels:
        print("С прошлого вызова ядра на эмуляторе GPU не запускались: запустите ячейку с ядром выше.")
        return
    print("Где ваши ядра на roofline урока 01 (эмулятор сосчитал байты глобальной памяти и FLOP каждого запуска; "
          "не оценивается):\n" + report(kernels))
    import matplotlib.pyplot as plt

    plot(kernels)
    plt.show()
