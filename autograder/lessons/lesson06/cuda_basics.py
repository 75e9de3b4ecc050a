"""Lesson 06's demonstrations (not graded): device facts, launch latency, coalescing, ownership pictures.

* :func:`device_facts` reads the execution-model numbers of the student's GPU (CuPy device
  properties); :data:`REFERENCE_GPUS` holds the same numbers for a T4 and an H200 with their sources.
* :func:`launch_latency` and :func:`strided_bandwidth` measure with CUDA events on the student's GPU;
  ``benchmarks/gpu_kernels.py`` runs them on an H200 and the lesson quotes that run.
* The ``plot_*`` functions draw, from the index arithmetic alone (no GPU needed), which block and
  thread own which element - the pictures GPU-Puzzles draws beside each exercise.
* :func:`resident_blocks`, :func:`waves` and :func:`plot_waves`: occupancy (blocks that live on one SM at once,
  from the limits in :data:`REFERENCE_GPUS`) and waves of a grid; :func:`sectors_touched` / :func:`plot_sectors`:
  the 32-byte sectors one warp's load touches; :func:`bank_of`, :func:`conflict_degree` / :func:`plot_banks`:
  shared-memory banks; :func:`kernel_names`: the names NVRTC gives kernels (``extern "C"`` or C++-mangled);
  :func:`plot_tile_load`: which thread loads which element of lesson 08's K/V tile.
* :data:`BUGGY_KERNELS` and :func:`emulator_report`: two kernels with the bugs compute-sanitizer exists for (no tail
  guard, a missing barrier) and what the PTX emulator says of them, on any machine;
  ``benchmarks/sanitizer_vs_emulator.py`` puts compute-sanitizer's report on an H200 beside it.
"""
from __future__ import annotations

import time

import numpy as np

from ...gpu import runtime as gpu
from ..roofline import ROOFS

# Figures of the two GPUs the lesson compares.  T4: NVIDIA T4 datasheet (40 SMs, 320 GB/s, fp32 8.1
# TFLOP/s), NVIDIA Turing architecture whitepaper and the CUDA C++ Programming Guide's table for
# compute capability 7.5 (1024 threads, 16 resident blocks and 64 KB shared memory per SM, 64K registers per SM, 4 MB L2).
# Resident blocks per SM (16 for 7.5, 32 for 9.0) and the 1 KB of shared memory the system reserves per block from
# compute capability 8.0 on (0 on 7.5): CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
# and "Compute Capability 8.x / Shared Memory"; cudaDeviceProp.maxBlocksPerMultiProcessor / reservedSharedMemPerBlock.
# H200: the device properties read on the H200 used for this course (benchmarks/results/gpu_kernels_h200.json,
# key "device_facts") and the H200 datasheet (141 GB HBM3e).  Bandwidth and fp32 peaks: lessons/roofline.py (ROOFS).
REFERENCE_GPUS = {
    "T4 (Colab)": {"compute capability": "7.5", "SM": 40, "warp": 32, "потоков на блок, макс.": 1024,
                   "потоков на SM, макс.": 1024, "регистров на SM (32 бит)": 65536,
                   "блоков на SM, макс.": 16, "разделяемая память на SM, КиБ": 64,
                   "разделяемая память, резерв на блок, КиБ": 0, "разделяемая память на блок, КиБ (opt-in)": 64,
                   "L2, МиБ": 4, "память, ГБ": 16, "память, ГБ/с (паспорт)": round(ROOFS["T4"].bandwidth / 1e9),
                   "fp32, TFLOP/s (паспорт)": ROOFS["T4"].fp32 / 1e12},
    "H200": {"compute capability": "9.0", "SM": 132, "warp": 32, "потоков на блок, макс.": 1024,
             "потоков на SM, макс.": 2048, "регистров на SM (32 бит)": 65536,
             "блоков на SM, макс.": 32, "разделяемая память на SM, КиБ": 228,
             "разделяемая память, резерв на блок, КиБ": 1, "разделяемая память на блок, КиБ (opt-in)": 227,
             "L2, МиБ": 60, "память, ГБ": 141, "память, ГБ/с (паспорт)": round(ROOFS["H200"].bandwidth / 1e9),
             "fp32, TFLOP/s (паспорт)": ROOFS["H200"].fp32 / 1e12},
}
FACT_KEYS = list(REFERENCE_GPUS["T4 (Colab)"])


def device_facts() -> dict | None:
    """The execution-model numbers of GPU 0 as :data:`REFERENCE_GPUS` names them, or None without a GPU."""
    ok, _ = gpu.gpu_status()
    if not ok:
        return None
    cp = gpu._cp
    p = cp.cuda.runtime.getDeviceProperties(0)
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    facts = {"name": name, "compute capability": f"{p['major']}.{p['minor']}", "SM": p["multiProcessorCount"],
             "warp": p["warpSize"], "потоков на блок, макс.": p["maxThreadsPerBlock"],
             "потоков на SM, макс.": p["maxThreadsPerMultiProcessor"],
             "регистров на SM (32 бит)": p["regsPerMultiprocessor"],
             "блоков на SM, макс.": p.get("maxBlocksPerMultiProcessor", "—"),
             "разделяемая память на SM, КиБ": p["sharedMemPerMultiprocessor"] // 1024,
             "разделяемая память, резерв на блок, КиБ": (p["reservedSharedMemPerBlock"] // 1024
                                                        if "reservedSharedMemPerBlock" in p else "—"),
             "разделяемая память на блок, КиБ (opt-in)": p.get("sharedMemPerBlockOptin", p["sharedMemPerBlock"]) // 1024,
             "L2, МиБ": round(p["l2CacheSize"] / 2**20, 1), "память, ГБ": round(p["totalGlobalMem"] / 1e9, 1)}
    return facts


def describe_gpu() -> None:
    """Print the student's GPU next to the T4 and the H200 (the setup cell's ``choose_cupy`` said whether there
    is one)."""
    mine = device_facts()
    columns = dict(REFERENCE_GPUS)
    if mine is not None:
        columns = {f"ваш: {mine['name']}": mine, **columns}
    width = max(len(k) for k in FACT_KEYS) + 2
    print(f"{'':<{width}}" + "".join(f"{name[:22]:>24}" for name in columns))
    for key in FACT_KEYS:
        print(f"{key:<{width}}" + "".join(f"{str(col.get(key, '—')):>24}" for col in columns.values()))


# --- measurements (need a GPU) ---------------------------------------------------------------

_EMPTY = 'extern "C" __global__ void empty_kernel() {}'
_AXPB = r'''
extern "C" __global__ void ten_ops(const float* x, float* y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        v = v * 1.5f; v = v + 2.0f; v = v * 0.5f; v = v - 1.0f; v = v * 3.0f;
        v = v + 0.25f; v = v * 0.75f; v = v - 0.5f; v = v * 2.0f; v = v + 1.0f;
        y[i] = v;
    }
}
'''
_STRIDED = r'''
extern "C" __global__ void strided_copy(const float* x, float* y, long long n, int stride)
{
    // A permutation: consecutive threads read elements `stride` apart, every element exactly once.
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const long long rows = n / stride;
        const long long j = (i % rows) * stride + i / rows;
        y[i] = x[j];
    }
}
'''


def _events_ms(run, repeat: int) -> float:
    """Milliseconds per call: one warm-up, then one round of ``repeat`` calls between CUDA events."""
    return gpu.time_ms(run, repeat=repeat, rounds=1, warmup=1)


def launch_latency(repeat: int = 2000, n: int = 4096) -> dict:
    """Microseconds: an empty kernel back to back, launch + wait, and ten CuPy ops vs one fused kernel."""
    cp = gpu._cp
    empty = cp.RawKernel(_EMPTY, "empty_kernel")
    queued = _events_ms(lambda: empty((1,), (32,), ()), repeat) * 1e3
    empty((1,), (32,), ())
    cp.cuda.Device().synchronize()
    waits = []
    for _ in range(200):
        t0 = time.perf_counter()
        empty((1,), (32,), ())
        cp.cuda.Device().synchronize()
        waits.append(time.perf_counter() - t0)
    x = cp.arange(n, dtype=cp.float32)
    y = cp.empty_like(x)
    fused = cp.RawKernel(_AXPB, "ten_ops")

    def ten_cupy_ops():
        v = x * 1.5
        v = v + 2.0
        v = v * 0.5
        v = v - 1.0
        v = v * 3.0
        v = v + 0.25
        v = v * 0.75
        v = v - 0.5
        v = v * 2.0
        return v + 1.0

    def one_kernel():
        fused(((n + 255) // 256,), (256,), (x, y, np.int32(n)))

    return {"empty_kernel_us": queued, "launch_and_wait_us": float(np.median(waits)) * 1e6,
            "ten_cupy_ops_us": _events_ms(ten_cupy_ops, repeat // 10) * 1e3,
            "one_fused_kernel_us": _events_ms(one_kernel, repeat // 10) * 1e3, "n": n}


def strided_bandwidth(strides=(1, 2, 4, 8, 16, 32, 64), n: int = 1 << 26) -> dict[int, float]:
    """GB/s (bytes read + written) of a copy whose reads are ``stride`` elements apart within a warp."""
    cp = gpu._cp
    x = cp.arange(n, dtype=cp.float32)
    y = cp.empty_like(x)
    kernel = cp.RawKernel(_STRIDED, "strided_copy")
    result = {}
    for stride in strides:
        ms = _events_ms(lambda: kernel(((n + 255) // 256,), (256,), (x, y, np.int64(n), np.int32(stride))), 10)
        result[int(stride)] = 2 * n * 4 / (ms * 1e-3) / 1e9
    return result


# --- pictures: who owns what (no GPU needed) -----------------------------------------------------

def _colors(count: int):
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return [cmap(i % 10) for i in range(count)]


def plot_ownership_1d(n: int = 20, block: int = 8, ax=None):
    """scale_add: element i belongs to block i // B, thread i % B; threads with i >= n must do nothing."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    blocks = (n + block - 1) // block
    total = blocks * block
    ax = ax or plt.subplots(figsize=(min(0.55 * total + 1, 16), 2.2))[1]
    colors = _colors(blocks)
    for i in range(total):
        b, t = divmod(i, block)
        inside = i < n
        ax.add_patch(Rectangle((i, 0), 0.95, 0.95, facecolor=colors[b] if inside else "white",
                               edgecolor=colors[b], hatch=None if inside else "//", alpha=0.85 if inside else 1))
        ax.text(i + 0.47, 0.62, f"t{t}", ha="center", va="center", fontsize=7)
        ax.text(i + 0.47, 0.28, str(i) if inside else "—", ha="center", va="center", fontsize=7)
    for b in range(blocks):
        ax.text(b * block + block / 2, 1.15, f"блок {b}", ha="center", fontsize=9, color=colors[b])
    ax.axvline(n - 0.02, color="red", lw=2)
    ax.text(n + 0.1, -0.35, "i = n: дальше потоки\nничего не делают", color="red", fontsize=8, va="top")
    ax.set_xlim(-0.2, total + 0.2)
    ax.set_ylim(-0.9, 1.5)
    ax.axis("off")
    ax.set_title(f"scale_add: n = {n}, блок = {block} потоков, блоков = ⌈n / блок⌉ = {blocks}", fontsize=10)
    return ax


def plot_ownership_rows(T: int = 3, D: int = 20, block: int = 8, ax=None):
    """row_sums: row t belongs to block t; thread k adds elements k, k + B, k + 2B, ... of the row."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ax = ax or plt.subplots(figsize=(min(0.5 * D + 3, 16), 0.7 * T + 1.4))[1]
    colors = _colors(block)
    for t in range(T):
        for j in range(D):
            k = j % block
            ax.add_patch(Rectangle((j, T - 1 - t), 0.95, 0.9, facecolor=colors[k], alpha=0.8))
            ax.text(j + 0.47, T - 1 - t + 0.45, f"t{k}", ha="center", va="center", fontsize=7)
        ax.text(-0.3, T - 1 - t + 0.45, f"блок {t}", ha="right", va="center", fontsize=9)
        ax.annotate("", xy=(D + 1.6, T - 1 - t + 0.45), xytext=(D + 0.2, T - 1 - t + 0.45),
                    arrowprops=dict(arrowstyle="->"))
        ax.text(D + 1.8, T - 1 - t + 0.45, f"out[{t}]: дерево в __shared__ → варп → t0 пишет",
                va="center", fontsize=8)
    ax.set_xlim(-3, D + 14)
    ax.set_ylim(-0.3, T + 0.4)
    ax.axis("off")
    ax.set_title(f"row_sums: D = {D}, блок = {block} потоков; цвет — поток, который добавляет элемент в свою частичную сумму",
                 fontsize=10)
    return ax


def plot_ownership_matmul(M: int = 10, N: int = 12, tile: int = 4, ax=None):
    """matmul_tiled: C tile (by, bx) belongs to one block; element (ty, tx) of the tile to one thread."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ax = ax or plt.subplots(figsize=(8, 6))[1]
    gy, gx = (M + tile - 1) // tile, (N + tile - 1) // tile
    colors = _colors(gy * gx)
    for r in range(gy * tile):
        for c in range(gx * tile):
            by, bx = r // tile, c // tile
            inside = r < M and c < N
            color = colors[by * gx + bx]
            ax.add_patch(Rectangle((c, -r), 0.95, 0.95, facecolor=color if inside else "white",
                                   edgecolor=color, hatch=None if inside else "//", alpha=0.75 if inside else 1))
            if inside:
                ax.text(c + 0.47, -r + 0.47, f"{r % tile},{c % tile}", ha="center", va="center", fontsize=6)
    for by in range(gy):
        for bx in range(gx):
            ax.text(bx * tile + tile / 2, -by * tile + 1.25 if by == 0 else -by * tile + 1.05,
                    f"({by},{bx})", ha="center", fontsize=7, color=colors[by * gx + bx])
    ax.plot([0, N, N, 0, 0], [1, 1, 1 - M, 1 - M, 1], color="red", lw=1.5)
    ax.set_xlim(-0.5, gx * tile + 0.5)
    ax.set_ylim(-gy * tile - 0.5, 2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"C = A @ B, M = {M}, N = {N}, тайл {tile}×{tile}: блок (by, bx) пишет свой тайл C,\n"
                 f"поток (ty, tx) — один элемент; заштрихованные потоки за краем C ничего не пишут", fontsize=10)
    return ax


def plot_flash_ownership(n: int = 12, rows_per_block: int = 4, kv_tile: int = 4, causal: bool = True, ax=None):
    """Lesson 08 step 1: query row i -> thread i % BR of block i // BR; K/V tiles of BC rows in shared memory."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ax = ax or plt.subplots(figsize=(8, 6.5))[1]
    blocks = (n + rows_per_block - 1) // rows_per_block
    colors = _colors(blocks)
    for i in range(n):
        b, t = divmod(i, rows_per_block)
        q0 = b * rows_per_block
        kv_end = min(q0 + rows_per_block, n) if causal else n
        for j in range(n):
            visited = j < ((kv_end + kv_tile - 1) // kv_tile) * kv_tile
            masked = causal and j > i
            face = "white" if not visited else ("lightgrey" if masked else colors[b])
            ax.add_patch(Rectangle((j, -i), 0.95, 0.95, facecolor=face, edgecolor="grey", lw=0.3,
                                   hatch="//" if not visited else None, alpha=0.8))
        ax.text(-0.4, -i + 0.47, f"Q[{i}]: блок {b}, поток {t}", ha="right", va="center", fontsize=7,
                color=colors[b])
    for k in range(0, n, kv_tile):
        ax.add_patch(Rectangle((k, 1.2), kv_tile - 0.05, 0.8, facecolor="khaki", edgecolor="black"))
        ax.text(k + kv_tile / 2, 1.6, f"K/V тайл {k // kv_tile} → __shared__", ha="center", va="center", fontsize=7)
    ax.set_xlim(-7, n + 0.5)
    ax.set_ylim(-n - 0.5, 2.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("Шаг 1: строка i матрицы S (и O) — один поток; цвет — блок; серое — маска j > i;\n"
                 "заштриховано — тайлы, которые блок пропускает (causal)", fontsize=10)
    return ax


def plot_memory_hierarchy(ax=None):
    """Boxes: registers, shared memory, L2, DRAM with the T4 and H200 figures of :data:`REFERENCE_GPUS`."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    t4, h = REFERENCE_GPUS["T4 (Colab)"], REFERENCE_GPUS["H200"]
    levels = [
        ("регистры потока", f"{t4['регистров на SM (32 бит)'] * 4 // 1024} КиБ на SM",
         f"{h['регистров на SM (32 бит)'] * 4 // 1024} КиБ на SM", "свои у каждого потока"),
        ("разделяемая память (__shared__)", f"{t4['разделяемая память на SM, КиБ']} КиБ на SM",
         f"{h['разделяемая память на SM, КиБ']} КиБ на SM", "общая для потоков блока, на чипе"),
        ("L2-кэш", f"{t4['L2, МиБ']} МиБ", f"{h['L2, МиБ']} МиБ", "общий для всех SM"),
        ("глобальная память (GDDR6 / HBM3e)", f"{t4['память, ГБ']} ГБ, {t4['память, ГБ/с (паспорт)']} ГБ/с",
         f"{h['память, ГБ']} ГБ, {h['память, ГБ/с (паспорт)'] / 1000:g} ТБ/с", "cp.ndarray живут здесь"),
    ]
    ax = ax or plt.subplots(figsize=(10, 4.6))[1]
    for k, (name, a, b, note) in enumerate(levels):
        width = 4 + 2.2 * k
        x0 = (12 - width) / 2
        y0 = 3 - k
        ax.add_patch(FancyBboxPatch((x0, y0), width, 0.8, boxstyle="round,pad=0.02",
                                    facecolor=plt.get_cmap("Blues")(0.25 + 0.18 * k), edgecolor="black"))
        ax.text(6, y0 + 0.55, name, ha="center", va="center", fontsize=10, weight="bold")
        ax.text(6, y0 + 0.22, f"T4: {a}   |   H200: {b}   ({note})", ha="center", va="center", fontsize=8)
    ax.text(0.1, 3.4, "быстрее, меньше", fontsize=8)
    ax.text(0.1, -0.2, "медленнее, больше", fontsize=8)
    ax.set_xlim(0, 12)
    ax.set_ylim(-0.4, 4)
    ax.axis("off")
    ax.set_title("Иерархия памяти GPU (размеры — по документации NVIDIA; источники в autograder/cuda_basics.py)",
                 fontsize=10)
    return ax


# --- occupancy and waves (section 1; lessons 09 and 11 point back here) ---------------------------------------

#: Registers are given to a warp in units of 256 (CUDA Occupancy Calculator; Nsight Compute's occupancy calculator,
#: "register allocation unit size" 256, allocation by warp): a thread that uses 255 registers costs 256.
REGISTER_ALLOCATION_UNIT = 256


def resident_blocks(gpu, threads: int, registers: int, shared_bytes: int = 0) -> dict[str, int]:
    """How many blocks of a kernel can live on one SM at once, by each limit of ``gpu`` (a :data:`REFERENCE_GPUS`
    name or such a dict): threads, registers (``registers`` per thread, allocated per warp in units of
    :data:`REGISTER_ALLOCATION_UNIT`), shared memory (``shared_bytes`` per block plus the system's reserve) and the
    cap on resident blocks.  The smallest value is the answer (the CUDA C++ Best Practices Guide, "Occupancy")."""
    g = REFERENCE_GPUS[gpu] if isinstance(gpu, str) else gpu
    warps = -(-threads // g["warp"])
    per_warp = -(-registers * g["warp"] // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    shared = shared_bytes + 1024 * g["разделяемая память, резерв на блок, КиБ"]
    return {"потоки": g["потоков на SM, макс."] // (warps * g["warp"]),
            "регистры": g["регистров на SM (32 бит)"] // (warps * per_warp),
            "разделяемая память": (1024 * g["разделяемая память на SM, КиБ"] // shared) if shared else
            g["блоков на SM, макс."],
            "блоков на SM": g["блоков на SM, макс."]}


def waves(num_blocks: int, sm_count: int, per_sm: int) -> float:
    """Waves of a grid: ``num_blocks`` over ``sm_count * per_sm`` slots (blocks that live at once); 1.5 = one full
    wave and a half-empty second one."""
    return num_blocks / (sm_count * per_sm)


def plot_waves(num_blocks: int, sm_count: int, per_sm: int, ax=None):
    """SMs as columns, resident-block slots as rows; a block's colour is its wave (white: a slot left idle)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    slots = sm_count * per_sm
    count = -(-num_blocks // slots)
    colors = _colors(max(count, 1))
    ax = ax or plt.subplots(figsize=(min(0.12 * sm_count + 2, 16), 0.35 * per_sm * max(count, 1) + 1.2))[1]
    for w in range(count):
        for slot in range(slots):
            block = w * slots + slot
            sm, k = slot % sm_count, slot // sm_count   # the scheduler spreads blocks over the SMs first
            used = block < num_blocks
            ax.add_patch(Rectangle((sm, -(w * per_sm + k)), 0.9, 0.85, facecolor=colors[w] if used else "white",
                                   edgecolor=colors[w], lw=0.4))
        ax.text(sm_count + 0.5, -(w * per_sm) + 0.4, f"волна {w + 1}", va="center", fontsize=8, color=colors[w])
    ax.set_xlim(-0.5, sm_count + 6)
    ax.set_ylim(-count * per_sm - 0.2, 1.2)
    ax.axis("off")
    ax.set_title(f"{num_blocks} блоков, {sm_count} SM × {per_sm} блоков на SM = {slots} мест: "
                 f"{waves(num_blocks, sm_count, per_sm):.2f} волны\n(столбец — SM, белое — место простаивает)",
                 fontsize=9)
    return ax


# --- global memory: 32-byte sectors (section 3) --------------------------------------------------------------

#: A sector is the unit in which L2 and DRAM serve global memory: 32 bytes (CUDA C++ Best Practices Guide,
#: "Coalesced Access to Global Memory"; Programming Guide, "Global Memory" of compute capability 5.x and later).
SECTOR_BYTES = 32


def sectors_touched(stride: int, warp: int = 32, element_bytes: int = 4) -> int:
    """Distinct 32-byte sectors that one load of a warp touches when lane k reads element ``k * stride``."""
    addresses = np.arange(warp) * stride * element_bytes
    return len(np.unique(addresses // SECTOR_BYTES))


def plot_sectors(strides=(1, 8), warp: int = 32, ax=None):
    """One row per stride: the 32-byte sectors of memory, filled where a lane of the warp reads (dots: the lanes)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    span = max(-(-warp * s * 4 // SECTOR_BYTES) for s in strides)   # sectors from the first to the last lane's address
    ax = ax or plt.subplots(figsize=(12, 1.1 * len(strides) + 0.8))[1]
    for row, stride in enumerate(strides):
        y = -1.4 * row
        lanes = np.arange(warp) * stride * 4 / SECTOR_BYTES   # lane positions, in sectors
        touched = set(lanes.astype(int))
        for sector in range(span):
            ax.add_patch(Rectangle((sector, y), 0.95, 0.8, facecolor="tab:orange" if sector in touched else "white",
                                   edgecolor="grey", lw=0.5))
        ax.plot(lanes + 0.06, np.full(warp, y + 0.4), "k.", ms=3)
        ax.text(-0.5, y + 0.4, f"stride {stride}: секторов — {len(touched)}", ha="right", va="center", fontsize=9)
    ax.set_xlim(-9, span + 0.5)
    ax.set_ylim(-1.4 * (len(strides) - 1) - 0.3, 1.3)
    ax.axis("off")
    ax.set_title(f"Одна загрузка варпа (32 потока по 4 байта): клетка — сектор {SECTOR_BYTES} байт, точка — адрес "
                 "потока; оранжевые секторы идут из L2 (а в L2 — из DRAM)", fontsize=9)
    return ax


# --- shared memory: banks (section 6; lessons 08 and 09 point back here) ---------------------------------------

#: 32 banks of 4 bytes: successive 32-bit words go to successive banks (CUDA C++ Programming Guide, "Shared Memory" of
#: compute capability 5.x, which holds for 7.5 and 9.0 as well).
SHARED_BANKS, BANK_BYTES = 32, 4


def bank_of(byte_address):
    """The shared-memory bank of a byte address (an int or an array)."""
    return (np.asarray(byte_address) // BANK_BYTES) % SHARED_BANKS


def conflict_degree(byte_addresses) -> int:
    """How many times one warp's access is serialised: the most distinct 4-byte words that fall into one bank
    (1 = no conflict; threads reading the same word get it by broadcast and do not conflict)."""
    words = np.unique(np.asarray(byte_addresses) // BANK_BYTES)
    return int(np.bincount(words % SHARED_BANKS, minlength=SHARED_BANKS).max())


def plot_banks(rows: int = 8, row_floats: int = 32, pads=(0, 1), column: int = 0):
    """Side by side for each padding: a float tile of ``rows`` rows, colour = bank; framed = the elements that
    ``rows`` threads read when thread r reads element (r, column) - a column of the tile."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    cmap = plt.get_cmap("hsv")
    fig, axes = plt.subplots(1, len(pads), figsize=(7.5 * len(pads), 0.42 * rows + 1.3))
    for ax, pad in zip(np.atleast_1d(axes), pads):
        stride = row_floats + pad
        for r in range(rows):
            for c in range(stride):
                bank = int(bank_of(4 * (r * stride + c)))
                read = c == column
                ax.add_patch(Rectangle((c, -r), 0.95, 0.9, facecolor=cmap(bank / SHARED_BANKS) if c < row_floats
                                       else "lightgrey", alpha=0.55, edgecolor="black" if read else "none",
                                       lw=2 if read else 0))
                if read or c < 3 or c == stride - 1:
                    ax.text(c + 0.47, -r + 0.45, str(bank), ha="center", va="center", fontsize=6)
        degree = conflict_degree(4 * (np.arange(rows) * stride + column))
        ax.set_xlim(-0.3, stride + 0.3)
        ax.set_ylim(-rows + 0.5, 1.2)
        ax.axis("off")
        ax.set_title(f"строка {row_floats}{f' + {pad}' if pad else ''} float: столбец {column} — банки "
                     f"{sorted(set(int(b) for b in bank_of(4 * (np.arange(rows) * stride + column))))[:8]}"
                     f"\n{degree}-кратный конфликт" if degree > 1 else
                     f"строка {row_floats} + {pad} float (серое — добавка): столбец {column} — {rows} разных банков"
                     f"\nконфликта нет", fontsize=9)
    fig.suptitle("Число в клетке и цвет — банк (адрес / 4) mod 32; рамка — что читают потоки 0…"
                 f"{rows - 1} (поток r — строку r)", fontsize=10)
    fig.tight_layout()
    return fig


# --- C details: kernel names (section 4) ------------------------------------------------------------------------

def kernel_names(source: str) -> list[str]:
    """The names under which the kernels of ``source`` exist after NVRTC (what ``cp.RawKernel(source, name)``
    looks up): the C++ name is mangled unless the kernel is declared ``extern "C"``.  Needs NVRTC, not a GPU."""
    import re

    from ...gpu import nvrtc

    return re.findall(r"\.entry\s+(\w+)", nvrtc.ptx(source))


# --- lesson 08: who loads which element of a K/V tile ------------------------------------------------------------

def plot_tile_load(threads: int = 4, rows: int = 3, d: int = 8, ax=None):
    """Lesson 08 step 1, ``for (e = threadIdx.x; e < BC * D; e += BR)``: element e of the tile is row e / D, column
    e % D, loaded by thread e % BR on pass e / BR of the loop."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ax = ax or plt.subplots(figsize=(min(0.9 * d + 2, 16), 0.8 * rows + 1.4))[1]
    colors = _colors(threads)
    for e in range(rows * d):
        r, c = divmod(e, d)
        ax.add_patch(Rectangle((c, -r), 0.95, 0.9, facecolor=colors[e % threads], alpha=0.75))
        ax.text(c + 0.47, -r + 0.45, f"e={e}\nt{e % threads}, шаг {e // threads}", ha="center", va="center",
                fontsize=6)
    for r in range(rows):
        ax.text(-0.2, -r + 0.45, f"строка k0+{r}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-2.5, d + 0.2)
    ax.set_ylim(-rows + 0.6, 1.4)
    ax.axis("off")
    ax.set_title(f"Загрузка тайла: BR = {threads} потоков, BC = {rows} строк, D = {d}:\nэлемент e — строка e / D, "
                 f"столбец e % D, поток e % BR (цвет), шаг цикла e / BR", fontsize=9)
    return ax


# --- the emulator's report of two classic bugs (section 7) ----------------------------------------------------

#: name -> (CUDA source, kernel, what the launch is): the two bugs compute-sanitizer's memcheck and racecheck exist
#: for, each as small as it gets.  :func:`emulator_report` launches them; the H200's compute-sanitizer output for
#: the same launches is ``benchmarks/results/sanitizer_vs_emulator_h200.json``.
BUGGY_KERNELS = {
    "scale_add без защиты хвоста": (r'''
extern "C" __global__ void scale_add_no_guard(float a, const float* x, const float* y, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = a * x[i] + y[i];   // нет if (i < n): потоки 1000..1023 последнего блока читают за концом x
}
''', "scale_add_no_guard", "n = 1000, блоки по 256 потоков: 4 блока, 1024 потока"),
    "row_sums без барьера": (r'''
extern "C" __global__ void row_sums_no_barrier(const float* x, float* out, int D)
{
    __shared__ float partial[256];
    const float* row = x + (size_t)blockIdx.x * D;
    float s = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) s += row[j];
    partial[threadIdx.x] = s;
    // здесь нужен __syncthreads(): дерево ниже читает partial[] других варпов
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
''', "row_sums_no_barrier", "T = 4 строки по D = 1000, блок из 256 потоков на строку"),
}


def launch_buggy(cp, name: str):
    """Launch :data:`BUGGY_KERNELS` ``name`` with CuPy ``cp`` (real, or the emulator's stand-in); its output."""
    source, kernel, _ = BUGGY_KERNELS[name]
    function = cp.RawKernel(source, kernel)
    if kernel == "scale_add_no_guard":
        n = 1000
        x, y = cp.arange(n, dtype=cp.float32), cp.ones(n, dtype=cp.float32)
        out = cp.empty(n, dtype=cp.float32)
        function(((n + 255) // 256,), (256,), (cp.float32(2.0), x, y, out, cp.int32(n)))
    else:
        T, D = 4, 1000
        x = cp.asarray(np.ones((T, D), dtype=np.float32))
        out = cp.empty(T, dtype=cp.float32)
        function((T,), (256,), (x, out, cp.int32(D)))
    return out


def emulator_report(name: str) -> str:
    """What the PTX emulator says of :data:`BUGGY_KERNELS` ``name`` (run here, on the CPU, posing as a T4)."""
    from ...gpu import emulated_cupy

    with gpu.stand_in("T4") as cp:
        emulated_cupy.reset()
        try:
            out = launch_buggy(cp, name)
        except emulated_cupy.EmulatedFault as fault:
            return f"ядро остановлено, как остановился бы GPU с ошибкой CUDA:\n{fault}"
        found = emulated_cupy.findings()
        values = ", ".join(f"{v:g}" for v in out.get()[:4])
    if not found:
        return f"находок нет; результат: {values}"
    return f"результат: {values} — верный, но:\n{emulated_cupy.findings_message(found)}"

