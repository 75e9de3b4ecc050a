# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# # Урок 07. Слитая RMSNorm на GPU: CUDA-ядро через `cupy.RawKernel`
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# {{COLAB_BADGE}}
#
# Нет своего GPU — откройте ноутбук в Colab по ссылке выше и выберите *Среда выполнения → Сменить среду выполнения → GPU*. Первая ячейка поставит пакет курса; CuPy в Colab уже есть.
#
# В уроке 02 слитая RMSNorm на NumPy убрала временные массивы (T, D). Здесь тот же оператор становится настоящим
# GPU-ядром. Вы:
# 1. разложите циклы NumPy по сетке CUDA: строка → блок, элементы строки → потоки, сумма → редукция в варпе и между варпами;
# 2. напишете ядро на CUDA C в строке Python — оно компилируется NVRTC даже без GPU, так что синтаксис и расход регистров
#    проверяются на любом ноутбуке;
# 3. напишете обёртку, которая запускает ядро через `cupy.RawKernel`;
# 4. измерите достигнутую пропускную способность и сравните её с копированием память→память, с наивной версией на CuPy
#    и с `torch.nn.functional.rms_norm`.
#
# **Как проверяется.** Баллы — в строке ✓/✗ каждой ячейки «Проверка» и в `make test` (окно Validate их не показывает). Проверка компиляции работает везде. Проверки, которые запускают ядро, идут на GPU, а без него —
# на эмуляторе GPU (урок 06, раздел 7): те же случаи и допуски, а вместо `compute-sanitizer` эмулятор сам видит выход
# за границы и гонки. Только проверка скорости требует GPU: у эмулятора нет часов, без GPU она пишет «нужен GPU» и
# даёт 0 баллов (а не пропускается). Каждая проверка идёт в отдельном процессе со своим тайм-аутом: ядро, которое
# обратилось за границу массива или зациклилось, стоит только своей ячейки.

# %%
# {{COURSE_INSTALL}}

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math
import numpy as np
import matplotlib.pyplot as plt
from autograder import grade
from autograder.gpu.runtime import choose_cupy, gpu_status
from autograder.lessons.roofline import show as show_roofline   # ядро на roofline урока 01: без GPU по счёту эмулятора, на GPU по замеру
cp = choose_cupy()   # CuPy на GPU, без GPU — эмулятор GPU с тем же API; строка ниже говорит, что выбрано

# %% [markdown]
# ## 1. От циклов NumPy к сетке CUDA
#
# RMSNorm строки $x_t \in \mathbb{R}^D$: $\;y_{t} = x_{t} \,/\, \sqrt{\tfrac1D \sum_j x_{tj}^2 + \varepsilon} \;\odot\; w$.
# Строки независимы, поэтому естественное разбиение такое:
#
# | NumPy (урок 02) | CUDA |
# | --- | --- |
# | цикл по строкам `t` | **блок** `blockIdx.x = t`: запускаем T блоков |
# | сумма квадратов по `j` | поток `threadIdx.x` суммирует элементы `j = threadIdx.x, threadIdx.x + blockDim.x, …`; затем редукция частичных сумм внутри варпа и между варпами |
# | `x[t] * inv_rms * w` | второй проход тех же потоков по тем же `j` |
#
# **Коалесцированный доступ.** 32 потока варпа выполняют одну инструкцию; если соседние потоки читают соседние адреса,
# варп забирает один непрерывный кусок памяти (128 байт для `float`, 512 — для `float4`). Поэтому поток берёт элементы
# с шагом `blockDim.x`, а не «свой» непрерывный кусок строки.
#
# **Свёртка в варпе.** `__shfl_xor_sync(0xffffffff, v, offset)` обменивает регистры между потоками варпа без памяти.
# Пять шагов (`offset` = 16, 8, 4, 2, 1) — и у каждого из 32 потоков сумма всего варпа. Суммы варпов складываются через
# разделяемую память: поток 0 каждого варпа пишет в `__shared__ float partial[32]`, затем **`__syncthreads()`** — пока
# все не записали, читать нельзя, — и каждый поток складывает `partial` в одном и том же порядке.
#
# **Векторные загрузки.** `float4` читает 16 байт одной инструкцией: меньше инструкций на байт и больше байт в полёте.
# Адрес должен быть кратен 16: это так, когда `D % 4 == 0` и массив начинается с выделения памяти, а не со среза
# (`cudaMalloc` выдаёт адреса, кратные 256 байтам, — CUDA C++ Programming Guide, «Device Memory Accesses»; пул CuPy
# режет память кусками, кратными 512 байтам). Иначе — поэлементный путь.
#
# **Строка в регистрах.** При D = 4096 строка — 16 КиБ: 128 потоков держат по 32 числа в регистрах, и второй проход
# вообще не читает память. Минимальный трафик — прочитать x и записать y: $2 \cdot T \cdot D \cdot 4$ байт
# (вес w — 16 КиБ, он живёт в кэше). Достигнутая пропускная способность = байты / время; её потолок на практике —
# копирование память→память, которое двигает те же байты.
#
# **Хвосты.** D не обязано делиться ни на размер блока, ни на 4: цикл идёт до `i < D`, а не D / blockDim.x итераций;
# `float4` — только на выровненных строках.

# %% [markdown]
# ## 2. Что получается на настоящем GPU
#
# Эталонное ядро этого урока (fp32), `torch.nn.functional.rms_norm` и наивная композиция CuPy
# `x / cp.sqrt(cp.mean(x * x, axis=-1, keepdims=True) + eps) * w`.
#
# **Прогноз** до таблицы: в уроке 02 наивная композиция (каждая операция — своё ядро) гоняет 7 проходов по (T, D)
# против 2 у слитого ядра, то есть 3.5× байт. Во сколько раз слитое ядро окажется быстрее на H200?

# %%
my_guess_speedup = None   # ваш прогноз: время наивной CuPy / время слитого ядра

# %% [markdown]
# В скобках — доля от копирования память→память (4.24 ТБ/с, байты чтения + записи; паспортная пропускная способность
# HBM3e H200 — 4.8 ТБ/с).
#
# | форма | слитое ядро | torch rms_norm | наивная CuPy | слитое / torch | слитое / CuPy |
# | --- | --- | --- | --- | --- | --- |
# | T=65536, D=4096 | 0.554 мс, 3.87 ТБ/с (91 %) | 0.719 мс, 2.99 ТБ/с | 4.076 мс, 0.53 ТБ/с | 1.30× | 7.4× |
# | T=65536, D=1024 | 0.151 мс, 3.55 ТБ/с (84 %) | 0.143 мс, 3.76 ТБ/с | 1.099 мс, 0.49 ТБ/с | 0.94× | 7.3× |
# | T=8192, D=4096 | 0.073 мс, 3.68 ТБ/с (87 %) | 0.089 мс, 3.01 ТБ/с | 0.533 мс, 0.50 ТБ/с | 1.22× | 7.3× |
#
# Измерено на NVIDIA H200 (132 SM), 2026-11-30, CuPy 14.2.0, PyTorch 2.11.0+cu130; команда `python benchmarks/gpu_kernels.py`, результаты — `benchmarks/results/gpu_kernels_h200.json` в репозитории курса. CUDA events, медиана нескольких повторов после прогрева; абсолютные числа от запуска к запуску плавают на несколько процентов.
#
# То же эталонное ядро в замере у предела (`python benchmarks/gpu_kernels.py --limits`, 2026-12-01,
# `benchmarks/results/gpu_kernels_limits_h200.json`: прогрев не короче 100 мс, раунд не короче 20 мс, выход — из
# чистого пула памяти CuPy) даёт 96.3 % копирования при D = 4096 и 95.5 % при D = 1024, то есть
# 1.37× и 1.06× от torch. Ядро то же, значит, разница с таблицей — в методе замера. Чем именно, мы не измеряли, а
# только предполагаем: прогрев в таблице был короче (простаивавший GPU, вероятно, поднимает частоту не сразу — частоту
# мы не записывали), а освобождённые временные массивы наивной версии, лежавшие в пуле CuPy, замедляли то же ядро
# (причину мы не нашли). Обогнать torch в 1.35 раза при D = 1024 нельзя: он и сам идёт на 90 % копирования, и для этого
# понадобилось бы 122 %.
#
# Наивная версия запускает несколько ядер и гоняет через HBM временные массивы (T, D) — это и есть лишние проходы
# из урока 02, теперь во времени, а не в памяти. Но проходов в 3.5 раза больше, а времени — в 7.3 раза. Разложим
# измеренное ускорение на два множителя: число проходов и собственную скорость наивных ядер (ТБ/с на их же байтах).

# %%
T_, D_ = 65536, 4096
size = T_ * D_ * 4                           # один проход по (T, D) в fp32, байт
naive_ms, fused_ms = 4.076, 0.554            # таблица выше, T=65536, D=4096
passes_naive, passes_fused = 7, 2            # урок 02: каждая операция CuPy — своё ядро; слитое ядро
naive_bw = passes_naive * size / (naive_ms * 1e-3)
fused_bw = passes_fused * size / (fused_ms * 1e-3)
print(f"наивная CuPy: {passes_naive} проходов за {naive_ms} мс = {naive_bw / 1e12:.2f} ТБ/с на своих байтах "
      f"({naive_bw / 4.24e12:.0%} копирования); слитое ядро: {fused_bw / 1e12:.2f} ТБ/с")
print(f"ускорение {naive_ms / fused_ms:.2f}x = проходы {passes_naive / passes_fused:.1f}x × скорость ядер "
      f"{fused_bw / naive_bw:.2f}x" + ("" if my_guess_speedup is None else f" (ваш прогноз: {my_guess_speedup}x)"))

# %% [markdown]
# Половина выигрыша — байты (3.5×), другая половина — то, что наивные ядра CuPy и сами не выходят на полную
# пропускную способность: в среднем они идут на 43 % копирования, а слитое ядро — на 91 %. Лишние запуски (урок 06) при
# этих размерах почти ничего не стоят: около шести ядер (`x * x`, `mean`, `+ eps`, `sqrt`, деление, `* w`) по 5 мкс — 30 мкс
# из 4 мс.

# %% [markdown]
# ## 3. Задание 1: ядро `rms_norm`
#
# Контракт (его использует проверка):
# ```
# extern "C" __global__
# void rms_norm(const float* x, const float* w, float* y, int T, int D, float eps)
# ```
# - как разложить строки по блокам, решает ваша обёртка: проще всего один блок на строку (`blockIdx.x` — номер строки,
#   потоков — кратно 32, не больше 1024); эталон для коротких строк (D ≤ 1024) берёт варп на строку и 8 строк в блоке;
# - `y[t, j] = x[t, j] / sqrt(mean_j(x[t, j]²) + eps) * w[j]`, всё во float32;
# - любое D ≥ 1 (хвосты) и строки, не выровненные на 16 байт (например, D = 4098);
# - x и w не меняются.
#
# В ячейке ниже замените строки заглушки (`# ВАШ КОД ЗДЕСЬ` / `raise NotImplementedError()`) внутри строки кодом CUDA C:
# первую — вспомогательными функциями (редукция в варпе и в блоке; можно оставить пустой), вторую — телом ядра.
# Строки, начинающиеся с `//`, — комментарии C.

# %% nbgrader={"grade": false, "grade_id": "rmsnorm_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
RMSNORM_SRC = r"""
// Fused RMSNorm, float32. A row is handled by the blockDim.x threads of one block row:
// a whole block (blockDim.y == 1) for long rows, one warp (blockDim.x == 32) for short ones,
// with blockDim.y rows per block. The row stays in registers between the two passes.
// ### BEGIN SOLUTION
#define VEC_PER_THREAD 8   // at most 8 float4 (32 floats) of the row per thread, kept in registers

__device__ __forceinline__ float warp_sum(float v)
{
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);     // butterfly: every lane gets the sum
    return v;
}

// Sum over the blockDim.x threads of a row: the warp itself, or all warps of the block.
__device__ __forceinline__ float row_sum(float v)
{
    v = warp_sum(v);
    if (blockDim.x == 32)                                 // one warp per row: done, no barrier
        return v;
    __shared__ float partial[32];                         // one slot per warp
    if ((threadIdx.x & 31) == 0)
        partial[threadIdx.x >> 5] = v;
    __syncthreads();                                      // all partial sums written
    float total = 0.0f;
    const int warps = blockDim.x >> 5;
    for (int i = 0; i < warps; ++i)                       // same order in every thread
        total += partial[i];
    return total;
}
// ### END SOLUTION

extern "C" __global__
void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
              int T, int D, float eps)
{
    // ### BEGIN SOLUTION
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= T)            // only with several rows per block, where row_sum has no barrier
        return;
    const float* xr = x + (size_t)row * D;
    float* yr = y + (size_t)row * D;
    const bool aligned = (D % 4 == 0) && ((((size_t)x | (size_t)w | (size_t)y) & 15) == 0);

    if (aligned && D / 4 <= VEC_PER_THREAD * (int)blockDim.x) {
        // Fast path: 16-byte loads; every float4 of the row is loaded once and kept.
        const int D4 = D / 4;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        float4* y4 = reinterpret_cast<float4*>(yr);
        float4 v[VEC_PER_THREAD];
        #pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k) {
            const int i = threadIdx.x + k * blockDim.x;
            v[k] = i < D4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // streamed once
        }
        float sum_sq = 0.0f;
        #pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k)
            sum_sq += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        const float inv_rms = rsqrtf(row_sum(sum_sq) / D + eps);
        #pragma unroll
        for (int k = 0; k < VEC_PER_THREAD; ++k) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < D4) {
                const float4 g = __ldg(w4 + i);                                   // w is reused: cached
                __stcs(y4 + i, make_float4(v[k].x * inv_rms * g.x, v[k].y * inv_rms * g.y,
                                           v[k].z * inv_rms * g.z, v[k].w * inv_rms * g.w));
            }
        }
        return;
    }
    // General path (any D, any alignment): two passes, the second re-reads the row from L1/L2.
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        sum_sq += xr[i] * xr[i];
    const float inv_rms = rsqrtf(row_sum(sum_sq) / D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        yr[i] = xr[i] * inv_rms * w[i];
    // ### END SOLUTION
}
"""

# %% [markdown]
# Проверка компиляции работает и без GPU: NVRTC компилирует ядро для sm_90 (H100/H200), показывает ошибки со строкой
# и столбцом и сообщает, сколько регистров и разделяемой памяти нужно ядру.

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.compiles', RMSNORM_SRC)


# %% [markdown]
# ## 4. Задание 2: обёртка `fused_rms_norm_gpu`
#
# `fused_rms_norm_gpu(x, w, eps=1e-6)`: `x` — `cupy.ndarray` (T, D) float32, `w` — (D,) float32; вернуть **новый**
# `cupy.ndarray` (T, D) float32. На устройстве не выделять ничего, кроме выхода.
#
# Запуск: `kernel = cp.RawKernel(RMSNORM_SRC, "rms_norm")`, затем `kernel(grid, block, args)` — например `grid = (T,)`,
# `block = (число_потоков,)` (блок может быть и двумерным: `block = (32, 8)` — 8 строк по варпу). Аргументы передаются в порядке сигнатуры; массивы — как есть, скаляры — с точным типом C:
# `np.int32(T)`, `np.float32(eps)` (обычный `int` Python CuPy передаст как 64-битное целое, и ядро прочитает мусор).
# Первый запуск компилирует ядро (около секунды), дальше CuPy берёт его из кэша.

# %% nbgrader={"grade": false, "grade_id": "fused_rms_norm_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fused_rms_norm_gpu(x, w, eps=1e-6):
    ### BEGIN SOLUTION
    if x.ndim != 2 or x.dtype != cp.float32 or w.dtype != cp.float32 or not x.flags.c_contiguous:
        raise ValueError("ожидается x формы (T, D) float32 (C-порядок) и w формы (D,) float32")
    T, D = x.shape
    y = cp.empty_like(x)
    kernel = cp.RawKernel(RMSNORM_SRC, "rms_norm")   # компилируется один раз, дальше из кэша CuPy
    args = (x, w, y, np.int32(T), np.int32(D), np.float32(eps))
    if D <= 1024:   # короткая строка: варп на строку, 8 строк в блоке (редукция без барьера)
        kernel(((T + 7) // 8,), (32, 8), args)
    else:           # длинная: блок на строку, около D/32 потоков — по 8 float4 на поток
        threads = min(1024, 32 * math.ceil(D / (32 * 32)))
        kernel((T,), (threads,), args)
    return y
    ### END SOLUTION


# %% [markdown]
# Быстрая самопроверка (не оценивается; без GPU — на эмуляторе GPU):

# %%
if cp is not None:   # на GPU или на эмуляторе GPU
    x_small = cp.asarray([[1, 2, 3, 4], [0, 0, 0, 0], [3, 0, 0, 0]], dtype=cp.float32)
    print(fused_rms_norm_gpu(x_small, cp.ones(4, dtype=cp.float32)))   # ожидается [0.365 0.730 1.095 1.461], нули, [2 0 0 0]
    show_roofline()   # без GPU: байты и FLOP, которые эмулятор насчитал ядру, на roofline урока 01
else:
    print("Нет ни GPU, ни эмулятора GPU (он выключен) — самопроверка пропущена; проверки запуска ниже покажут «нужен GPU».")

# %% [markdown]
# ### Проверки
#
# - совпадение с эталоном float64 (D кратно 256 и 4) и отдельно **хвосты** (D = 1000, 4097, 4098 — не кратно блоку,
#   не кратно 4, невыровненные строки);
# - входы не изменяются; на устройстве выделяется только выход (проверка смотрит все выделения через распределитель CuPy);
# - нет выходов за границы массивов и гонок в разделяемой памяти: ядро выполняет эмулятор GPU (урок 06, раздел 7),
#   с GPU и без, при D = 1000 и 4097 (не кратно блоку). Он видит каждое обращение: чтение за концом x, даже когда
#   прочитанное отброшено и ответ верен, и пропущенный `__syncthreads()`, который часто даёт верный ответ «по
#   везению» (на самом GPU их находят `compute-sanitizer --tool memcheck` и `--tool racecheck`);
# - скорость: не меньше чем в 2 раза быстрее наивной версии на CuPy при T = 8192, D = 4096, измерено рядом в одном
#   процессе; в сообщении — ГБ/с и доля от копирования на вашем GPU.
#
# Проверки памяти, гонок и скорости засчитываются только при верном результате на своём случае.

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.equivalence', fused_rms_norm_gpu)
### BEGIN HIDDEN TESTS
grade('lesson07.equivalence', fused_rms_norm_gpu, cases=[{'T': 1000, 'D': 4096, 'seed': 101}, {'T': 3, 'D': 1024, 'seed': 102, 'eps': 0.001}, {'T': 17, 'D': 256, 'seed': 103, 'scale': 0.05, 'eps': 0.1}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_tails", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.tails', fused_rms_norm_gpu)
### BEGIN HIDDEN TESTS
grade('lesson07.tails', fused_rms_norm_gpu, cases=[{'T': 3, 'D': 3, 'seed': 104}, {'T': 9, 'D': 33, 'seed': 105}, {'T': 2, 'D': 8190, 'seed': 106}, {'T': 1, 'D': 1, 'seed': 107}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_not_mutated", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.not_mutated', fused_rms_norm_gpu)
### BEGIN HIDDEN TESTS
grade('lesson07.not_mutated', fused_rms_norm_gpu, cases=[{'T': 7, 'D': 512, 'seed': 108}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.memory', fused_rms_norm_gpu)
### BEGIN HIDDEN TESTS
grade('lesson07.memory', fused_rms_norm_gpu, cases=[{'T': 2048, 'D': 4096, 'seed': 109}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_sanitizer", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.sanitizer', fused_rms_norm_gpu)
### BEGIN HIDDEN TESTS
grade('lesson07.sanitizer', fused_rms_norm_gpu, cases=[{'T': 5, 'D': 4097, 'seed': 110}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson07_speed", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson07.speed', fused_rms_norm_gpu)
### BEGIN HIDDEN TESTS
grade('lesson07.speed', fused_rms_norm_gpu, cases=[{'T': 16384, 'D': 2048, 'seed': 111}])
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Измеряем на вашем GPU
#
# Сравним ваше ядро с наивной композицией CuPy и (если установлен PyTorch) с `torch.nn.functional.rms_norm`,
# а пропускную способность — с копированием память→память того же объёма; в конце ваше ядро встанет по замеру на
# roofline урока 01 (★ под крышей вашего GPU). Без GPU ячейка ничего не делает.
#
# **Прогноз.** Какую долю скорости копирования наберёт ваше ядро (эталонное на H200 — 84–96 %, смотря как мерить, раздел 2)?

# %%
my_guess_copy_share = None   # ваш прогноз: доля копирования, например 0.8

# %%
def time_ms(fn, repeat=20):
    fn(); cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    end.record(); end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / repeat

if gpu_status()[0]:
    T, D = 16384, 4096
    x = cp.random.standard_normal((T, D), dtype=cp.float32)
    w = cp.ones(D, dtype=cp.float32)
    moved = 2 * x.nbytes                                   # прочитать x, записать y
    dst = cp.empty_like(x)
    timings = {"копирование x → y": time_ms(lambda: dst.__setitem__(Ellipsis, x)),
               "ваше ядро": time_ms(lambda: fused_rms_norm_gpu(x, w)),
               "наивная CuPy": time_ms(lambda: x / cp.sqrt(cp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w)}
    try:
        import torch
        tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
        timings["torch rms_norm"] = time_ms(lambda: torch.nn.functional.rms_norm(tx, (D,), tw, 1e-6))
    except ImportError:
        pass
    for name, ms in timings.items():
        print(f"{name:>18}: {ms:7.3f} мс, {moved / ms / 1e9:6.2f} ТБ/с")
    plt.barh(list(timings), [moved / ms / 1e9 for ms in timings.values()])
    plt.xlabel("ТБ/с (байты чтения + записи)"); plt.title(f"RMSNorm fp32, T={T}, D={D}"); plt.show()
    share = timings["копирование x → y"] / timings["ваше ядро"]
    print(f"ваше ядро: {share:.0%} копирования" + ("" if my_guess_copy_share is None else f"; прогноз: {my_guess_copy_share:.0%}"))
    # на roofline урока 01: 4 FLOP на элемент (квадрат и сумма — одно FMA, умножение на 1/rms и на w)
    show_roofline(measured=[("ваше ядро", timings["ваше ядро"] / 1e3, moved, 4 * x.size)])
else:
    print("GPU нет: измерения пропущены. Числа с H200 — в разделе 2 (эталонное ядро: 84–96 % копирования)"
          + ("" if my_guess_copy_share is None else f"; ваш прогноз: {my_guess_copy_share:.0%}"))

# %% [markdown]
# ## Итог
#
# - Одна строка — один блок; элементы строки — потоки с шагом `blockDim.x` (коалесцированный доступ); сумма —
#   `__shfl_xor_sync` внутри варпа и `__shared__` + `__syncthreads()` между варпами.
# - Слитое ядро читает x один раз и пишет y один раз: оно упирается в ту же стену, что и копирование памяти;
#   наивная композиция CuPy гоняет через HBM временные (T, D) и в разы медленнее.
# - Хвосты (D не кратно блоку и 4) и выравнивание для `float4` — обязательная часть ядра, а не деталь.
#
# Дальше — урок 08: тот же подход для FlashAttention, где тайлы Q, K, V живут в разделяемой памяти.

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. В FlashAttention урока 05 поток может взять одну строку Q. Где ему держать $m$, $\ell$ и строку $acc$, и сколько
#    это регистров при $d = 128$?
# 2. Тайл $K_j$ нужен всем строкам блока. Сколько раз его прочитают из HBM, если каждый поток читает его сам, и сколько —
#    если блок один раз положит его в разделяемую память?
# 3. Какой барьер нужен между загрузкой тайла в разделяемую память и его чтением, и какой — перед перезаписью
#    следующим тайлом?
