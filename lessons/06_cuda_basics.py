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
# # Урок 06. Основы CUDA через CuPy: потоки, блоки, память
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# {{COLAB_BADGE}}
#
# Нет своего GPU — откройте ноутбук в Colab по ссылке выше и выберите *Среда выполнения → Сменить среду выполнения → GPU*
# (бесплатный GPU Colab — NVIDIA T4). Первая ячейка поставит пакет курса; CuPy в Colab уже есть.
#
# Уроки 02–05 написали слитые (fused) операторы на NumPy. Чтобы перенести их на GPU (уроки 07 и 08), нужно понимать, **кто**
# выполняет код ядра и **где** лежат данные. За этот урок вы:
# 1. увидите модель исполнения — SM, варп, блок, сетка, регистры, разделяемая память (shared memory), L2, глобальная память — с числами
#    для T4 и H200 и для вашего GPU;
# 2. измерите, сколько стоит запуск ядра и почему соседние потоки должны читать соседние адреса;
# 3. напишете три ядра: `scale_add` (индекс и защита хвоста), `row_sums` (блок на строку, дерево в разделяемой памяти,
#    `__shfl_xor_sync`) и `matmul_tiled` (тайлы в разделяемой памяти — репетиция $S = Q_i K_j^T$ из FlashAttention).
#
# **Как проверяется.** Баллы — в строке ✓/✗ каждой ячейки «Проверка» и в `make test` (окно Validate их не показывает). Проверка компиляции работает везде, даже без GPU: NVRTC компилирует ядро для sm_75 (T4), sm_80
# (A100) и sm_90 (H100/H200). Проверки запуска идут на GPU, а без него — на **эмуляторе GPU** (первая ячейка с кодом
# пишет, где): он выполняет ваше ядро поток за потоком на CPU, с теми же случаями и допусками, и сам проверяет каждое
# обращение к памяти (что он умеет и чего не моделирует — раздел 7). Каждый новый массив проверка заполняет NaN до
# запуска вашего кода, а на GPU вокруг массивов кладёт контрольные байты: невыписанный элемент или запись за конец
# массива видны, даже если числа «случайно» совпали.

# %%
# {{COURSE_INSTALL}}

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
import matplotlib.pyplot as plt
from autograder import grade
from autograder.gpu.runtime import choose_cupy, gpu_status
from autograder.lessons.roofline import show as show_roofline   # без GPU: ядро на roofline урока 01
from autograder.lessons.lesson06 import cuda_basics as cb
cp = choose_cupy()   # CuPy на GPU, без GPU — эмулятор GPU с тем же API; строка ниже говорит, что выбрано
cb.describe_gpu()

# %% [markdown]
# ## 1. Модель исполнения
#
# Ядро (`__global__`-функция) запускается сразу многими потоками. Потоки сгруппированы так:
#
# | уровень | что это | как ядро его видит |
# | --- | --- | --- |
# | **поток** | выполняет код ядра со своими регистрами | `threadIdx.x` (и `.y`, `.z`) внутри блока |
# | **варп** | 32 соседних потока блока; как правило, выполняют одну инструкцию вместе (SIMT). С Volta (sm_70) потоки варпа могут расходиться и идти не в ногу (CUDA C++ Programming Guide, «Independent Thread Scheduling»), поэтому обмен внутри варпа синхронизирует их явно: `__shfl_xor_sync(0xffffffff, …)`, `mma.sync` | `threadIdx.x / 32`, `threadIdx.x % 32` |
# | **блок** | до 1024 потоков на одном SM; общая **разделяемая память** (shared memory) и барьер `__syncthreads()` | `blockIdx.x`, размер — `blockDim.x` |
# | **сетка** | все блоки одного запуска; блоки независимы, порядок их выполнения не задан | `gridDim.x` |
# | **SM** (streaming multiprocessor, потоковый мультипроцессор) | вычислительный узел GPU (у H200 их 132): держит несколько блоков, переключает варпы, пока другие ждут память | не видно из кода |
#
# Потоки одного блока могут обмениваться данными через разделяемую память и ждать друг друга на `__syncthreads()`;
# потоки **разных** блоков — нет (только через глобальную память и атомарные операции). Поэтому задачу режут так, чтобы
# блоки не зависели друг от друга: строка — блок (`row_sums`), тайл результата — блок (`matmul_tiled`, FlashAttention).
#
# Таблица в выводе первой ячейки с кодом (импорты и `describe_gpu()`) — числа для T4 (Colab), H200 и вашего GPU (если он есть). Столбец T4 — по
# паспорту NVIDIA T4, whitepaper архитектуры Turing и таблице compute capability 7.5 из CUDA C++ Programming Guide;
# столбец H200 — свойства устройства, прочитанные на H200 курса (`benchmarks/results/gpu_kernels_h200.json`, ключ
# `device_facts`), и паспорт H200 для памяти и fp32. Что из них следует — посчитаем:

# %%
for name, g in cb.REFERENCE_GPUS.items():
    resident = g["SM"] * g["потоков на SM, макс."]
    regs = g["регистров на SM (32 бит)"] * 4 * g["SM"] / 2**20
    flop_per_byte = g["fp32, TFLOP/s (паспорт)"] * 1e12 / (g["память, ГБ/с (паспорт)"] * 1e9)
    print(f"{name:>11}: одновременно живут до {resident:,} потоков ({resident // 32:,} варпов); "
          f"регистров всего {regs:.0f} МиБ, L2 — {g['L2, МиБ']} МиБ; "
          f"ridge fp32 = {flop_per_byte:.0f} FLOP на байт памяти")

# %% [markdown]
# Регистров на чипе — мегабайты и десятки мегабайт, столько же по порядку, сколько L2: у T4 регистров больше (10 МиБ против 4 МиБ L2), у
# H200 — меньше (33 МиБ против 60 МиБ L2). И они в разы быстрее любой памяти: значения, с которыми поток работает,
# должны жить в регистрах. Разделяемая память — от 64 КиБ (T4) до 228 КиБ (H200) на SM — место для тайлов, которыми
# пользуются все потоки блока. Глобальная память (где лежат массивы
# `cp.ndarray`) огромна, но каждый её байт дорог: ridge point в десятки FLOP на байт значит, что ядро, которое
# делает меньше операций на прочитанный байт, упирается в память (урок 01).

# %%
cb.plot_memory_hierarchy()
plt.show()

# %% [markdown]
# ### Сколько блоков живут на SM одновременно (occupancy) и что такое волна
#
# Блок целиком попадает на один SM и живёт там до конца. Сколько блоков одного ядра SM держит сразу, решают четыре
# лимита из таблицы выше — берётся наименьший (CUDA C++ Best Practices Guide, «Occupancy»; числа — таблица
# «Technical Specifications per Compute Capability» из CUDA C++ Programming Guide):
# - **потоки**: потоков на SM ÷ потоков в блоке;
# - **регистры**: 65 536 регистров SM ÷ (регистров на поток × потоков в блоке); регистры выдаются варпу порциями по 256
#   (CUDA Occupancy Calculator), так что 255 регистров на поток стоят как 256;
# - **разделяемая память**: её объём на SM ÷ (разделяемой памяти блока + 1 КиБ, который система с sm_80 держит на
#   каждый блок для себя);
# - **потолок числа блоков**: 16 на SM у T4, 32 у H200.
#
# `cb.resident_blocks(gpu, потоков, регистров на поток, байт разделяемой памяти)` считает все четыре. Три ядра курса:

# %%
course_kernels = {   # потоков в блоке, регистров на поток, байт разделяемой памяти на блок (у T4, у H200)
    "простое ядро, блок 256 потоков": (256, 32, (0, 0)),
    "урок 09: FlashAttention на тензорных ядрах, d = 128": (128, 255, ((128 + 4 * 16) * 136 * 2, (128 + 4 * 64) * 136 * 2)),
    "урок 11: декод, ядро split": (128, 128, (16640, 16640)),
}
for name, (threads, registers, shared) in course_kernels.items():
    print(name)
    for gpu, smem in zip(cb.REFERENCE_GPUS, shared):
        limits = cb.resident_blocks(gpu, threads, registers, smem)
        print(f"   {gpu:>11}: " + ", ".join(f"{k} → {v}" for k, v in limits.items())
              + f";  живут одновременно: {min(limits.values())}")

# %% [markdown]
# Ядро урока 09 держит 255 регистров на поток: больше двух блоков не поместится нигде, а у T4 его тайлы (51 КиБ)
# оставляют место только одному блоку. Ядро декода урока 11 (128 регистров) — 4 блока на SM у H200, а у T4 его 16 КиБ
# разделяемой памяти пускают только 3.
#
# **Волна.** Все места сразу — «SM × блоков на SM» — это одна **волна**: блоки сетки занимают места, а следующие ждут,
# пока освободится место. Сетка из 200 простых блоков на T4 (40 SM × 4 места = 160) — это 1.25 волны: вторая волна
# из 40 блоков идёт, пока три четверти мест пустуют. А сетка меньше одной волны оставляет SM без работы вовсе —
# поэтому урок 11 делит контекст декода так, чтобы блоков хватило на одну полную волну.

# %%
cb.plot_waves(num_blocks=200, sm_count=40, per_sm=min(cb.resident_blocks("T4 (Colab)", 256, 32).values()))
plt.show()

# %% [markdown]
# ## 2. Сколько стоит запуск ядра
#
# Каждый запуск ядра — это работа драйвера на CPU и очередь команд на GPU: несколько микросекунд, даже если ядро
# ничего не делает. Маленькая операция над тысячами чисел длится меньше, чем её запуск. Поэтому десять мелких
# ядер подряд (`x * 1.5 + 2 ...` в CuPy — каждая операция запускает своё ядро и пишет свой временный массив) стоят
# заметно больше одного ядра, которое делает всё сразу. Это первая причина сливать операторы (fused), ещё до байтов
# памяти из урока 02.
#
# **Прогноз.** Сколько микросекунд стоит запуск пустого ядра, если запускать его много раз подряд? И во сколько раз
# десять операций CuPy над 4096 числами медленнее тех же операций одним ядром? (Не оценивается.)

# %%
my_guess_launch_us = None      # ваш прогноз: мкс на запуск пустого ядра
my_guess_ten_ops_ratio = None  # ваш прогноз: 10 ядер / одно слитое ядро

# %% [markdown]
# На H200 курса:
#
# | что | время |
# | --- | --- |
# | пустое ядро, запуски подряд (CUDA events) | 5.0 мкс на запуск |
# | пустое ядро, запуск + ожидание (`synchronize`, часы CPU) | 9.5 мкс |
# | 10 операций CuPy над 4096 числами (10 ядер) | 123.6 мкс |
# | те же 10 операций одним ядром | 5.9 мкс (20.9× быстрее) |
#
# Измерено на NVIDIA H200 (132 SM), 2026-12-01, CuPy 14.2.0, CUDA runtime 13.2; функции `cb.launch_latency()` и `cb.strided_bandwidth()` из ячеек ниже (их же вызывает `python benchmarks/gpu_kernels.py`), результаты — `benchmarks/results/gpu_kernels_h200.json` в репозитории курса (ключ `cuda_basics`). CUDA events, среднее по серии запусков после прогрева; от запуска к запуску числа плавают на несколько процентов.
#
# Измерим на вашем GPU (без GPU ячейка ничего не делает):

# %%
if gpu_status()[0]:
    for key, value in cb.launch_latency().items():
        print(f"{key:>22}: {value:10.2f}" + (" мкс" if key.endswith("_us") else ""))
else:
    print("GPU нет: измерение пропущено, числа H200 — в таблице выше.")
H200_LAUNCH_US, H200_TEN_OPS_RATIO = 5.0, 123.6 / 5.9   # таблица выше (benchmarks/results/gpu_kernels_h200.json)
print(f"H200: запуск {H200_LAUNCH_US} мкс, 10 ядер / одно ядро = {H200_TEN_OPS_RATIO:.1f}"
      + ("" if my_guess_launch_us is None else f"; ваш прогноз: {my_guess_launch_us} мкс")
      + ("" if my_guess_ten_ops_ratio is None else f" и {my_guess_ten_ops_ratio}"))

# %% [markdown]
# ## 3. Коалесцированный доступ
#
# 32 потока варпа выполняют загрузку одной инструкцией. Если они читают 32 **соседних** `float` (128 байт подряд),
# память отдаёт их одной транзакцией из четырёх секторов по 32 байта (CUDA C++ Best Practices Guide, «Coalesced Access
# to Global Memory»); если адреса идут с шагом (stride) — каждый поток тянет свой сектор в 32 байта, из которых нужны 4.
# Ниже ядро копирует массив, но соседние потоки читают элементы через `stride` (это перестановка:
# каждый элемент читается ровно один раз, объём работы одинаков). Пропускная способность — байты чтения + записи в секунду.
#
# **Путь байта и сектор.** Глобальная память (DRAM: GDDR6 у T4, HBM3e у H200) отдаёт данные не SM, а L2-кэшу, а L2 —
# SM (через его кэш L1) и дальше в регистры. Ни L2, ни DRAM не работают с отдельными байтами: их единица — **сектор**,
# 32 байта подряд, выровненных на 32 (CUDA C++ Best Practices Guide, «Coalesced Access to Global Memory»). Загрузка
# варпа — одна инструкция: SM собирает адреса 32 потоков и просит у памяти каждый сектор, в который попал хоть один
# адрес; запросы секторов и называют **транзакциями**. Сколько секторов пришло — столько байт прошло по пути
# DRAM → L2 → SM, сколько из них нужно — решают адреса:

# %%
cb.plot_sectors(strides=(1, 8))
plt.show()
print({stride: cb.sectors_touched(stride) for stride in (1, 2, 4, 8, 16, 32)}, "секторов на одну загрузку варпа")

# %% [markdown]
# При stride = 1 четыре сектора несут ровно 128 нужных байт; при stride = 8 — 32 сектора (1024 байта), из которых
# нужны те же 128: каждый восьмой.
#
# **Прогноз.** При stride = 32 каждый поток варпа читает свой 32-байтный сектор ради 4 байт. Какую долю пропускной
# способности stride = 1 вы ожидаете?

# %%
my_guess_stride32_share = None   # ваш прогноз: доля от stride = 1, например 0.5

# %% [markdown]
# На H200 курса (2²⁶ чисел float32):
#
# | stride | пропускная способность | доля от stride = 1 |
# | --- | --- | --- |
# | 1 | 2,030 ГБ/с | 100 % |
# | 2 | 1,944 ГБ/с | 96 % |
# | 4 | 1,597 ГБ/с | 79 % |
# | 8 | 983 ГБ/с | 48 % |
# | 16 | 518 ГБ/с | 26 % |
# | 32 | 455 ГБ/с | 22 % |
# | 64 | 340 ГБ/с | 17 % |
#
# Измерено на NVIDIA H200 (132 SM), 2026-12-01, CuPy 14.2.0, CUDA runtime 13.2; функции `cb.launch_latency()` и `cb.strided_bandwidth()` из ячеек ниже (их же вызывает `python benchmarks/gpu_kernels.py`), результаты — `benchmarks/results/gpu_kernels_h200.json` в репозитории курса (ключ `cuda_basics`). CUDA events, среднее по серии запусков после прогрева; от запуска к запуску числа плавают на несколько процентов.
#
# Это ядро простое — по одному `float` на поток, без векторных загрузок, индекс перестановки считается 64-битным
# делением, — и даже при stride = 1 даёт около половины копирования память→память (4.1–4.2 ТБ/с на том же H200,
# урок 07). Деление — меньшая часть разницы: обычное копирование `y[i] = x[i]` той же формы (тоже по одному `float` на
# поток) идёт на H200 курса около 2.7 ТБ/с против 2.03 ТБ/с у перестановки со stride = 1
# (`benchmarks/results/review_measurements_h200.json`, ключ `strided_copy`); остальное — форма ядра: на поток мало
# байт в полёте. Поэтому сравнивайте строки таблицы между собой и помните, что stride = 1 здесь отчасти упирается в
# арифметику индекса: столбец «доля от stride = 1» скорее занижает цену некоалесцированного доступа.
#
# При stride = 1 варп читает 128 байт подряд — 4 сектора по 32 байта. Уже при stride = 8 (32 байта между соседними
# потоками) каждый поток попадает в свой сектор: 32 сектора вместо четырёх, в 8 раз больше на одну инструкцию загрузки, — и
# пропускная способность падает вдвое, а при stride = 64 — в шесть раз.
#
# Отсюда правило для всех ядер курса: поток `threadIdx.x` берёт элементы `threadIdx.x`, `threadIdx.x + blockDim.x`, …,
# а не «свой непрерывный кусок».

# %%
if gpu_status()[0]:
    bandwidth = cb.strided_bandwidth()
    plt.plot(list(bandwidth), list(bandwidth.values()), "o-")
    plt.xscale("log", base=2); plt.xlabel("stride (элементов между соседними потоками)"); plt.ylabel("ГБ/с")
    plt.title("Копирование с шагом чтения на вашем GPU"); plt.show()
else:
    print("GPU нет: измерение пропущено, числа H200 — в таблице выше.")
print(f"H200: stride 32 даёт {455 / 2030:.0%} от stride 1 (таблица выше)"
      + ("" if my_guess_stride32_share is None else f"; ваш прогноз: {my_guess_stride32_share:.0%}"))

# %% [markdown]
# ## 4. Задание 1: `scale_add` — индекс потока и защита хвоста
#
# `out = a * x + y` для векторов длины n. Каждому элементу — свой поток:
# ```
# i = blockIdx.x * blockDim.x + threadIdx.x
# ```
# Блоков нужно $\lceil n / B \rceil$ = `(n + B - 1) // B`: если n не кратно размеру блока B, последний блок
# **неполный** — часть его потоков получает `i >= n` и не должна ни читать, ни писать (`if (i < n)`). Потерять
# последний блок (`n // B`) или забыть проверку `i < n` — две классические ошибки; проверка ловит обе, даже если
# числа выглядят верно: новые массивы заполнены NaN, а за концом массивов лежат контрольные байты.
#
# Кто что пишет (n = 20, блок из 8 потоков — 3 блока, последние 4 потока последнего блока простаивают):

# %%
cb.plot_ownership_1d(n=20, block=8)
plt.show()

# %% [markdown]
# **Что в ядрах курса пришло из C/C++.** Ядро — функция C++; вот то, что в нём незнакомо после NumPy:
#
# | запись | что значит |
# | --- | --- |
# | `extern "C"` | имя ядра остаётся как есть. C++ «искажает» (mangles) имена, дописывая типы аргументов, а `cp.RawKernel(src, "scale_add")` ищет ядро по имени — без `extern "C"` не найдёт (ячейка ниже) |
# | `const float* __restrict__ x` | обещание компилятору: через `x` не пишут и он не пересекается с другими указателями; тогда загрузки можно переставлять и держать в регистрах |
# | `(size_t)row * D` | индекс в 64 битах. `int` — 32 бита со знаком, до 2³¹ − 1: при T·D ≥ 2³¹ элементов `row * D` в `int` переполнится (ячейка ниже) |
# | `c ? a : b` | `a if c else b` в Python: `r < n ? K[...] : 0.0f` — ноль за краем |
# | `#define BR 64` | подстановка текста до компиляции: константа |
# | `template <int D>` и `f<64>(...)` | функция с параметром времени компиляции: `flash_step1<64>` — копия кода с D = 64, поэтому `float q[D]` — массив известного размера (урок 08) |
# | `constexpr int G = D / 32;` | константа, которую компилятор вычисляет сам |
# | `#pragma unroll` | просьба развернуть цикл с известным числом шагов: без счётчика, индексы — константы, массив живёт в регистрах (урок 07) |

# %%
demo = """
__global__ void twice(float* x) { x[threadIdx.x] *= 2; }
extern "C" __global__ void twice_c(float* x) { x[threadIdx.x] *= 2; }
"""
print("имена ядер после компиляции (NVRTC, GPU не нужен):", cb.kernel_names(demo))
T, D = 140_000, 16_384                                 # 2.3·10⁹ > 2³¹ элементов (9 ГБ float32)
row = np.array([T - 1], dtype=np.int32)                # последняя строка; int в CUDA — как np.int32
print(f"T·D = {T * D:,}, а 2³¹ − 1 = {2**31 - 1:,}")
print("начало последней строки в int:   ", (row * np.int32(D))[0])                     # переполнилось
print("начало последней строки в size_t:", (row.astype(np.uint64) * np.uint64(D))[0])

# %% [markdown]
# Контракт:
# ```
# extern "C" __global__
# void scale_add(float a, const float* x, const float* y, float* out, int n)
# ```
# Замените заглушку в строке кодом CUDA C (строки с `//` — комментарии C). Вместо `if (i < n)` можно написать цикл
# с шагом сетки: `for (int i = ...; i < n; i += gridDim.x * blockDim.x)` — он верен при любом числе блоков.

# %% nbgrader={"grade": false, "grade_id": "scale_add_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
SCALE_ADD_SRC = r"""
extern "C" __global__
void scale_add(float a, const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int n)
{
    // ### BEGIN SOLUTION
    // a grid-stride loop: correct for any n and any number of blocks
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a * x[i] + y[i];
    // ### END SOLUTION
}
"""

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_scale_add_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.scale_add_compiles', SCALE_ADD_SRC)


# %% [markdown]
# Обёртка `scale_add_gpu(a, x, y)`: x, y — `cupy.ndarray` (n,) float32, a — число; вернуть **новый** массив.
# Запуск: `kernel = cp.RawKernel(SCALE_ADD_SRC, "scale_add")`, затем `kernel(grid, block, args)`, например
# `grid = (число_блоков,)`, `block = (256,)`. Скаляры передавайте с точным типом C: `np.float32(a)`, `np.int32(n)`
# (обычный `int` Python CuPy передаст как 64-битное целое, и ядро прочитает мусор).

# %% nbgrader={"grade": false, "grade_id": "scale_add_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def scale_add_gpu(a, x, y):
    ### BEGIN SOLUTION
    n = x.size
    out = cp.empty_like(x)
    threads = 256
    blocks = (n + threads - 1) // threads          # округление вверх: последний неполный блок тоже нужен
    cp.RawKernel(SCALE_ADD_SRC, "scale_add")((blocks,), (threads,), (np.float32(a), x, y, out, np.int32(n)))
    return out
    ### END SOLUTION


# %%
if cp is not None:   # на GPU или на эмуляторе GPU
    print(scale_add_gpu(2.0, cp.arange(5, dtype=cp.float32), cp.ones(5, dtype=cp.float32)))   # ожидается [1 3 5 7 9]
    show_roofline()   # без GPU: байты и FLOP, которые эмулятор насчитал ядру, на roofline урока 01
else:
    print("Нет ни GPU, ни эмулятора GPU (он выключен) — самопроверка пропущена.")

# %% [markdown]
# ### Проверки `scale_add`
# - совпадение с эталоном float64 при n = 65536, 1000 и 1 (и на скрытых n);
# - входы не меняются; на устройстве выделяется только выход (композиция `a * x + y` из операций CuPy выделяет лишний
#   временный массив и не проходит);
# - ни одного чтения или записи за пределами массивов: это проверяет эмулятор GPU (раздел 7), с GPU и без: он
#   выполняет ядро на CPU и видит каждое обращение. На самом GPU то же находит `compute-sanitizer --tool memcheck`.

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_scale_add", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.scale_add', scale_add_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.scale_add', scale_add_gpu, cases=[{'n': 12345, 'seed': 101}, {'n': 255, 'seed': 102}, {'n': 257, 'seed': 103}, {'n': 3000001, 'seed': 104}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_scale_add_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.scale_add_memory', scale_add_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.scale_add_memory', scale_add_gpu, cases=[{'n': 100003, 'seed': 105}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_scale_add_bounds", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.scale_add_bounds', scale_add_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.scale_add_bounds', scale_add_gpu, cases=[{'n': 77, 'seed': 106}])
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Задание 2: `row_sums` — блок на строку, дерево в разделяемой памяти, shuffle
#
# Суммы строк массива (T, D): `out[t] = x[t, :].sum()`. Блок из 256 потоков на строку (`blockIdx.x = t`):
# 1. поток k складывает элементы k, k + 256, k + 512, … своей строки (соседние потоки — соседние адреса, доступ
#    коалесцирован; D может быть и меньше блока, и больше, и не кратно 32);
# 2. частичные суммы 256 потоков — в `__shared__ float partial[256]`, затем **дерево**: на шаге с половиной h потоки
#    k < h прибавляют `partial[k + h]`; между шагами — `__syncthreads()` (пока все не записали, читать нельзя);
#    Шаги дерева: h = 128, 64, 32 (256 → 32 числа).
# 3. когда осталось 32 числа — один варп (потоки k < 32): каждый берёт `float v = partial[k]` и для offset = 16, 8, 4,
#    2, 1 делает `v += __shfl_xor_sync(0xffffffff, v, offset)` — получает `v` потока `k ^ offset` прямо из его
#    регистра, без памяти и барьеров (маска `0xffffffff` — «участвуют все 32 потока варпа»). После пяти шагов сумма
#    есть у каждого потока варпа; поток 0 пишет `out[t]`.
#
# `__syncthreads()` должны пройти **все** потоки блока: барьер внутри `if (k < h)` — ошибка (часть потоков ждёт
# вечно или результат не определён), даже если ядро компилируется. Ставьте его после `if`, на уровне цикла.
# Проверка компиляции (она работает и без GPU) предупреждает о `__syncthreads()` внутри `if`/`else` и называет строку.
#
# **Почему `__shfl_xor_sync` внутри `if (threadIdx.x < 32)` можно.** Shuffle ждёт только потоки своего варпа,
# названные маской (`0xffffffff` — все 32), а `__syncthreads()` — все потоки блока. Условие `threadIdx.x < 32`
# берёт варп 0 целиком и не берёт ни одного потока других варпов: все 32 участника shuffle на месте. Барьер же в том
# же `if` ждал бы потоков 32…255, которые до него не дойдут. Условие, которое делит варп (`threadIdx.x < 40`),
# сломало бы и shuffle: потоки 40…63 варпа 1 не пришли бы к нему. Кто из варпов блока входит в `if`:

# %%
lanes = np.arange(256).reshape(8, 32)   # блок из 256 потоков: 8 варпов по 32
for condition, takes in (("threadIdx.x < 32", lanes < 32), ("threadIdx.x < 40", lanes < 40)):
    print(f"{condition}: " + ", ".join(f"варп {w}: " + ("все" if row.all() else "никто" if not row.any()
                                                        else f"{row.sum()} из 32") for w, row in enumerate(takes)))
#
# Пропущенный `__syncthreads()` часто даёт верный ответ «по везению». `compute-sanitizer --tool racecheck` находит
# гонки в разделяемой памяти, которые встретились в этом запуске, даже если они не испортили результат (это детектор
# гонок именно в разделяемой памяти: документация compute-sanitizer, «Racecheck Tool»).

# %%
cb.plot_ownership_rows(T=3, D=20, block=8)
plt.show()

# %% [markdown]
# Контракт: `extern "C" __global__ void row_sums(const float* x, float* out, int T, int D)`; обёртка запускает
# T блоков по 256 потоков (`THREADS` в коде).

# %% nbgrader={"grade": false, "grade_id": "row_sums_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
ROW_SUMS_SRC = r"""
#define THREADS 256   // the wrapper launches blocks of exactly THREADS threads

extern "C" __global__
void row_sums(const float* __restrict__ x, float* __restrict__ out, int T, int D)
{
    __shared__ float partial[THREADS];
    const int t = blockIdx.x;                       // one block per row
    const float* row = x + (size_t)t * D;
    // ### BEGIN SOLUTION
    float s = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x)   // coalesced: neighbours read neighbours
        s += row[j];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half >= 32; half /= 2) {   // tree in shared memory down to one warp
        if (threadIdx.x < half)
            partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x < 32) {                          // the last warp: registers and shuffles, no barrier
        float v = partial[threadIdx.x];
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (threadIdx.x == 0)
            out[t] = v;
    }
    // ### END SOLUTION
}
"""

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_row_sums_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.row_sums_compiles', ROW_SUMS_SRC)


# %% [markdown]
# `row_sums_gpu(x)`: x — `cupy.ndarray` (T, D) float32; вернуть новый массив (T,) float32.

# %% nbgrader={"grade": false, "grade_id": "row_sums_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def row_sums_gpu(x):
    ### BEGIN SOLUTION
    T, D = x.shape
    out = cp.empty(T, dtype=cp.float32)
    cp.RawKernel(ROW_SUMS_SRC, "row_sums")((T,), (256,), (x, out, np.int32(T), np.int32(D)))
    return out
    ### END SOLUTION


# %%
if cp is not None:   # на GPU или на эмуляторе GPU
    print(row_sums_gpu(cp.ones((3, 1000), dtype=cp.float32)))   # ожидается [1000 1000 1000]
else:
    print("Нет ни GPU, ни эмулятора GPU (он выключен) — самопроверка пропущена.")

# %% [markdown]
# ### Проверки `row_sums`
# - совпадение с эталоном float64: D = 1024, 1000, 37 (меньше блока) и 5000 (больше блока, не кратно 32);
#   допуск растёт с D (ошибка округления суммы float32);
# - вход не меняется, выделяется только выход;
# - compute-sanitizer: memcheck (границы) и racecheck (гонки в разделяемой памяти).

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_row_sums", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.row_sums', row_sums_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.row_sums', row_sums_gpu, cases=[{'T': 9, 'D': 1, 'seed': 107}, {'T': 1, 'D': 257, 'seed': 108}, {'T': 100, 'D': 4099, 'seed': 109}, {'T': 2, 'D': 33, 'seed': 110}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_row_sums_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.row_sums_memory', row_sums_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.row_sums_memory', row_sums_gpu, cases=[{'T': 333, 'D': 777, 'seed': 111}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_row_sums_sanitizer", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.row_sums_sanitizer', row_sums_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.row_sums_sanitizer', row_sums_gpu, cases=[{'T': 2, 'D': 300, 'seed': 112}])
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Задание 3: `matmul_tiled` — тайлы в разделяемой памяти
#
# `C = A @ B`, A — (M, K), B — (K, N). Блок из 16×16 потоков отвечает за тайл C 16×16: поток `(threadIdx.y, threadIdx.x)`
# считает один элемент `C[row, col]`, `row = blockIdx.y * 16 + threadIdx.y`, `col = blockIdx.x * 16 + threadIdx.x`.
# Наивно каждый поток прочитал бы из глобальной памяти строку A и столбец B — K·2 чтения на элемент. С тайлами блок
# идёт по K шагами по 16:
# 1. все 256 потоков вместе загружают тайл A (16×16) и тайл B (16×16) в `__shared__` — каждый по одному элементу
#    каждого тайла: на шаге `k0` поток `(ty, tx)` кладёт `As[ty][tx] = A[row, k0 + tx]` и `Bs[ty][tx] = B[k0 + ty, col]`;
#    за краем матрицы (row ≥ M, k ≥ K, col ≥ N) кладут 0. Массивы лежат построчно (C-порядок, как в NumPy):
#    `A[i, j]` — это `A[i * K + j]`, `B[i, j]` — `B[i * N + j]`;
# 2. `__syncthreads()`; каждый поток прибавляет к своему `acc` 16 произведений из разделяемой памяти;
# 3. `__syncthreads()` — прежде чем тайл перезапишут на следующем шаге.
#
# Потоки за краем C (row ≥ M или col ≥ N) не выходят из ядра раньше времени (`return`): они нужны, чтобы загрузить
# тайлы и пройти барьеры. Проверку `row < M && col < N` делайте только при записи результата.
#
# Каждый элемент A и B читается из глобальной памяти в 16 раз реже. Это та же схема, что $S = Q_i K_j^T$ во
# FlashAttention (урок 08): тайл Q и тайл K в разделяемой памяти, произведение — в регистрах.

# %%
cb.plot_ownership_matmul(M=10, N=12, tile=4)
plt.show()

# %% [markdown]
# **Банки разделяемой памяти.** Разделяемая память разбита на 32 **банка** по 4 байта: слово по адресу a (в байтах)
# лежит в банке (a / 4) mod 32, соседние 4-байтные слова — в соседних банках (CUDA C++ Programming Guide, «Shared
# Memory» в разделе о compute capability 5.x и новее). За такт банк отдаёт одно слово. Если потоки варпа просят k
# **разных** слов одного банка — это k-кратный **конфликт банков**: доступ идёт k проходами. Одно и то же слово
# многим потокам — не конфликт (рассылка, broadcast). В `matmul_tiled` конфликтов нет: `As[ty][k]` у потоков одной
# строки — одно слово, `Bs[k][tx]` — соседние слова. А когда потоки читают **столбец** тайла, у которого строка —
# 32 float (128 байт), все строки начинаются в банке 0, и столбец целиком лежит в одном банке. Лекарство — **padding**:
# строка длиннее на одно слово (33 float), и строка r начинается в банке r:

# %%
cb.plot_banks(rows=8, row_floats=32, pads=(0, 1), column=0)
plt.show()
for stride in (32, 33):
    column = 4 * stride * np.arange(32)           # 32 потока, поток r читает элемент (r, 0)
    print(f"строка {stride} float: банки потоков {cb.bank_of(column)[:6]}…, конфликт {cb.conflict_degree(column)}-кратный")

# %% [markdown]
# Контракт: `extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K)`;
# сетка `((N + 15) // 16, (M + 15) // 16)`, блок `(16, 16)` (x — столбцы, y — строки).

# %% nbgrader={"grade": false, "grade_id": "matmul_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
MATMUL_SRC = r"""
#define TILE 16   // blocks of TILE x TILE threads; one thread per element of C

extern "C" __global__
void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;   // this thread's element of C
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    // ### BEGIN SOLUTION
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f;   // zeros past the edge
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
        __syncthreads();                               // the whole tile is in shared memory
        for (int k = 0; k < TILE; ++k)
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();                               // everyone is done before the tile is overwritten
    }
    if (row < M && col < N)
        C[(size_t)row * N + col] = acc;
    // ### END SOLUTION
}
"""

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_matmul_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.matmul_compiles', MATMUL_SRC)


# %% [markdown]
# `matmul_tiled_gpu(A, B)`: `cupy.ndarray` float32 (M, K) и (K, N); вернуть новый массив (M, N) float32.

# %% nbgrader={"grade": false, "grade_id": "matmul_tiled_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def matmul_tiled_gpu(A, B):
    ### BEGIN SOLUTION
    M, K = A.shape
    N = B.shape[1]
    C = cp.empty((M, N), dtype=cp.float32)
    grid = ((N + 15) // 16, (M + 15) // 16)             # x — столбцы, y — строки
    cp.RawKernel(MATMUL_SRC, "matmul_tiled")(grid, (16, 16), (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    return C
    ### END SOLUTION


# %%
if cp is not None:   # на GPU или на эмуляторе GPU
    A_demo = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    print(matmul_tiled_gpu(A_demo, cp.ones((3, 2), dtype=cp.float32)))   # ожидается [[3 3] [12 12]]
else:
    print("Нет ни GPU, ни эмулятора GPU (он выключен) — самопроверка пропущена.")

# %% [markdown]
# ### Проверки `matmul_tiled`
# - совпадение с эталоном float64: 64×64×64 и формы, не кратные тайлу (33×70 @ 70×17, 1×1 @ 1×1);
# - входы не меняются, выделяется только выход;
# - compute-sanitizer: memcheck и racecheck.

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_matmul", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.matmul', matmul_tiled_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.matmul', matmul_tiled_gpu, cases=[{'M': 100, 'K': 3, 'N': 50, 'seed': 113}, {'M': 128, 'K': 96, 'N': 256, 'seed': 114}, {'M': 17, 'K': 33, 'N': 1, 'seed': 115}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_matmul_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.matmul_memory', matmul_tiled_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.matmul_memory', matmul_tiled_gpu, cases=[{'M': 300, 'K': 50, 'N': 70, 'seed': 116}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson06_matmul_sanitizer", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson06.matmul_sanitizer', matmul_tiled_gpu)
### BEGIN HIDDEN TESTS
grade('lesson06.matmul_sanitizer', matmul_tiled_gpu, cases=[{'M': 20, 'K': 33, 'N': 9, 'seed': 117}])
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Эмулятор GPU: что он видит и чего не моделирует
#
# Без GPU ваши ядра в этом и следующих уроках запускает **эмулятор GPU**. NVRTC компилирует ядро в PTX — ассемблер
# виртуальной машины NVIDIA, из которого драйвер делает машинный код для любого GPU, — а эмулятор выполняет этот PTX на
# CPU: все потоки блока идут как дорожки массивов NumPy, варп за варпом, с барьерами, `__shfl_xor_sync`, атомарными
# операциями и даже `mma.sync` тензорных ядер (урок 09). Он изображает T4: PTX для sm_75, те же лимиты разделяемой
# памяти и число SM. Код в ноутбуке тот же, что для CuPy: `cp.RawKernel`, `cp.empty`, срезы, `cp.asnumpy`.
#
# Эмулятор делает то, чего не делает GPU: сверяет каждое обращение к памяти с массивом, в который оно попало (выход за
# конец — с блоком, потоком, строкой ядра и номером аргумента), каждую пару обращений разных варпов к одному байту
# разделяемой памяти между двумя барьерами — на гонку, каждое чтение разделяемой памяти — на то, что в неё уже писали.
# Вот его отчёт о двух классических ошибках (ядра — в `cb.BUGGY_KERNELS`; ячейка работает и без GPU, на CPU):

# %%
for name, (source, kernel, launch) in cb.BUGGY_KERNELS.items():
    print(f"=== {name}: {launch}{source}")
    print(cb.emulator_report(name), end="\n\n")

# %% [markdown]
# В первом ядре нет `if (i < n)`: 24 потока последнего блока читают x за концом. Эмулятор останавливает ядро на таком
# чтении, как GPU останавливается с ошибкой `cudaErrorIllegalAddress`, — только GPU при этом чаще всего **не**
# останавливается: память выделяется кусками, и чтение чуть дальше конца массива попадает в память, которая тоже
# выделена. Во втором ядре нет `__syncthreads()` между записью частичных сумм и деревом: ответ верный, а эмулятор
# сообщает гонку — поток 0 читает сумму потока 128 из другого варпа, которую ничто не обязывает быть записанной.
#
# Те же два запуска на H200 курса под `compute-sanitizer` (2026-12-04, compute-sanitizer 2025.3.1, CuPy 14.2.0;
# `python benchmarks/sanitizer_vs_emulator.py`, вывод целиком — `benchmarks/results/sanitizer_vs_emulator_h200.json`):
#
# | ядро | `compute-sanitizer` | эмулятор |
# | --- | --- | --- |
# | без защиты хвоста | `--tool memcheck`: `ERROR SUMMARY: 0 errors` | остановил ядро: чтение за концом x, блок 3, поток 232, строка 5 |
# | без барьера | `--tool racecheck`: `Race reported between Write access at row_sums_no_barrier+0x230 and Read access at row_sums_no_barrier+0x2a0 [2048 hazards]` | гонка: поток 0 читает `partial`, записанный потоком 128, строки 8 и 11 |
#
# Гонку видят оба (racecheck — по смещениям в машинном коде, эмулятор — по строкам ядра). А чтение за концом
# memcheck пропустил: 4 байта за x лежат внутри куска, который CuPy взял у драйвера, — для memcheck это своя память.
# Поэтому проверка курса запускает memcheck с `--padding` (пустое место после каждого массива), а эмулятор сверяет
# каждое обращение с границами самого массива.
#
# Чего эмулятор не моделирует:
# - **время.** У него нет часов: ячейки с замерами без GPU пропускаются, а проверки скорости (уроки 07 и 11) без GPU
#   пишут «нужен GPU». Сколько стоит запуск ядра и коалесцирование (разделы 2 и 3), показывает только GPU;
# - **кэши** L1/L2 и **конфликты банков** разделяемой памяти: на эмуляторе все обращения равны;
# - **порядок потоков.** Эмулятор выполняет варпы блока по очереди, одну инструкцию сразу для 32 потоков (lockstep).
#   Поэтому гонка почти никогда не видна в его числах: пишущий варп обычно успевает раньше читающего. На GPU так тоже
#   бывает часто, поэтому там нужен `compute-sanitizer --tool racecheck`, а эмулятор сообщает о гонке сам, по адресам,
#   и проверка с гонкой не засчитывается, даже если числа совпали.
#
# Зато эмулятор **считает**: сколько байт каждый запуск прочитал из глобальной памяти и записал в неё и сколько
# операций с плавающей точкой выполнил (`fma` — две). Этого хватает, чтобы поставить ваше ядро на roofline урока 01:
# интенсивность FLOP/байт против ridge point T4 и H200 и нижняя граница времени на каждом. Без GPU это делает
# `show_roofline()` после самопроверок (в задании 1 — для `scale_add`: 2 FLOP на 12 байт, глубоко в области памяти).
# Время на графике — не замер, а то, что позволяет крыша.

# %% [markdown]
# ## Итог
#
# - Поток — регистры; блок — разделяемая память и `__syncthreads()`; варп — 32 потока, обычно идущих в ногу, и
#   `__shfl_xor_sync` с явной синхронизацией;
#   блоки независимы.
# - Блоков — с округлением вверх, в ядре — `if (i < n)`: последний неполный блок обязателен, а лишние потоки молчат.
# - Соседние потоки читают соседние адреса; запуск ядра стоит микросекунды — мелкие операции выгодно сливать.
# - Тайл в разделяемой памяти читается из глобальной памяти один раз и используется всеми потоками блока; 32 банка
#   по 4 байта: разные слова одного банка в одном доступе варпа — конфликт, его снимает добавка к строке (padding).
# - Память отдаёт секторы по 32 байта; сколько блоков живёт на SM, решают потоки, регистры и разделяемая память;
#   все места сразу — одна волна.
#
# Дальше — урок 07: RMSNorm как одно ядро (строка — блок, как в `row_sums`), затем урок 08: FlashAttention из тех же
# деталей — тайлы K/V в разделяемой памяти, как в `matmul_tiled`.

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. Строка RMSNorm при D = 4096 в fp32 — 16 КиБ. Сколько чисел на поток придётся при блоке из 128 потоков, и поместятся
#    ли они в регистры, чтобы второй проход по строке не читал HBM?
# 2. В `row_sums` частичные суммы складывались деревом в разделяемой памяти и `__shfl_xor_sync`. Что из этого нужно,
#    чтобы получить $\sum_j x_j^2$ строки, и где взять результат всем потокам блока?
# 3. Слитая RMSNorm читает x один раз и пишет y один раз. Какую долю скорости копирования память→память она может
#    достичь, и какие проходы добавляет наивная композиция CuPy (урок 02)?
