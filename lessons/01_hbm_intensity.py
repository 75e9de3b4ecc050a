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
# # Урок 01. HBM, арифметическая интенсивность и roofline
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# Прежде чем что-то сливать (fusion) и переписывать attention, нужно уметь ответить на вопрос: **во что упирается оператор —
# в вычисления или в память?** В этом уроке вы:
# 1. напишете модель времени оператора на GPU (roofline): интенсивность, ridge point, достижимая производительность, оценка времени;
# 2. посчитаете трафик HBM для RMSNorm, SwiGLU и наивного attention в Qwen3-0.6B;
# 3. посчитаете, сколько занимает матрица внимания S при n = 4096 и n = 32768;
# 4. нарисуете roofline выбранного GPU и разместите на нём RMSNorm, SwiGLU, наивный attention и GEMM.
#
# Все функции маленькие, ответы точные. Проверки запускаются ячейками «Проверка» или кнопкой **Validate** (баллы — в строке ✓/✗ каждой проверки и в `make test`: окно Validate их не показывает);
# каждая проверка выполняется в отдельном процессе.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
import matplotlib.pyplot as plt

from autograder import grade

# Пик bf16 на тензорных ядрах (dense, без 2:4 sparsity), FLOP/s, и пропускная способность HBM, байт/с.
# Источник: спецификации NVIDIA (A100 Tensor Core GPU Datasheet, H100 Tensor Core GPU Datasheet, NVIDIA H200).
GPUS = {
    "A100 40GB": (312e12, 1.555e12),
    "A100 80GB SXM": (312e12, 2.039e12),
    "H100 SXM": (989e12, 3.35e12),
    "H200 SXM": (989e12, 4.8e12),
}
# Пик fp32 на CUDA-ядрах (без тензорных ядер), FLOP/s: здесь идут поэлементные операции — RMSNorm, epilogue SwiGLU, softmax.
FP32_CUDA_CORES = {"A100 40GB": 19.5e12, "A100 80GB SXM": 19.5e12, "H100 SXM": 67e12, "H200 SXM": 67e12}
# exp считают SFU (special function units, блоки специальных функций): у H100 SXM около 3.9·10¹² exp в секунду
# (статья FlashAttention-3, раздел 3). H200 — тот же чип GH100 с теми же 67 TFLOP/s fp32, берём то же число.
SFU_EXP_PER_S = {"H100 SXM": 3.9e12, "H200 SXM": 3.9e12}


# %% [markdown]
# Откуда числа в `GPUS`: спецификации NVIDIA —
# [A100](https://www.nvidia.com/en-us/data-center/a100/) (BF16 Tensor Core 312 TFLOPS; HBM2 1 555 ГБ/с у 40 ГБ,
# HBM2e 2 039 ГБ/с у 80 ГБ SXM), [H100](https://www.nvidia.com/en-us/data-center/h100/) (H100 SXM: BF16 1 979 TFLOPS
# со sparsity, то есть 989 dense; HBM3 3,35 ТБ/с), [H200](https://www.nvidia.com/en-us/data-center/h200/) (те же 989 TFLOPS
# dense, HBM3e 4,8 ТБ/с; это H200 SXM, у H200 NVL пик ниже). В таблицах NVIDIA рядом с тензорными числами стоит сноска «with sparsity»: для обычных (плотных)
# матриц пик вдвое меньше — его мы и берём. Пик fp32 без тензорных ядер там же: 19,5 TFLOPS у A100, 67 TFLOPS у H100 SXM
# и H200.
#
# ## 1. Модель времени: roofline
#
# Оператор на GPU читает входы из HBM, считает и пишет выход обратно в HBM. Вычисления и обмен с памятью идут параллельно,
# поэтому время снизу ограничено большим из двух:
#
# $$t \;\ge\; \max\left(\frac{\text{FLOPs}}{P},\ \frac{\text{bytes}}{B}\right),$$
#
# где $P$ — пиковая производительность (FLOP/s), $B$ — пропускная способность памяти (байт/с).
# **Арифметическая интенсивность** $I = \text{FLOPs}/\text{bytes}$ (FLOP на байт) — свойство оператора, а не железа.
# Если поделить FLOPs на время, получится достижимая производительность — «крыша» (roofline):
#
# $$\text{attainable}(I) = \min(P,\ I \cdot B).$$
#
# Излом крыши — **ridge point** $I^* = P / B$. Оператор с $I < I^*$ упирается в память (memory-bound): вычислительные блоки
# простаивают. С $I \ge I^*$ — в вычисления (compute-bound; ровно в точке излома считаем `'compute'`).
#
# Во всех функциях урока неверный вход — ошибка программы, а не повод вернуть `inf` или отрицательное время:
# выбросьте `ValueError` с сообщением, какой аргумент неверен. Допустимо: `flops >= 0`, `bytes_moved >= 0`
# (но для интенсивности `bytes_moved > 0`), `intensity >= 0`, `peak_flops > 0`, `bandwidth > 0`.

# %% nbgrader={"grade": false, "grade_id": "arithmetic_intensity", "locked": false, "schema_version": 3, "solution": true, "task": false}
def arithmetic_intensity(flops, bytes_moved):
    ### BEGIN SOLUTION
    if flops < 0:
        raise ValueError(f"flops должно быть >= 0, получено {flops}")
    if bytes_moved <= 0:
        raise ValueError(f"bytes_moved должно быть > 0, получено {bytes_moved}")
    return flops / bytes_moved
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_arithmetic_intensity", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.arithmetic_intensity', arithmetic_intensity)
### BEGIN HIDDEN TESTS
grade('lesson01.arithmetic_intensity', arithmetic_intensity, cases=[{'flops': 51539607552, 'bytes_moved': 71303168}, {'flops': 5, 'bytes_moved': 6}, {'flops': 0.0, 'bytes_moved': 1}])
### END HIDDEN TESTS

# %% nbgrader={"grade": false, "grade_id": "ridge_point", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ridge_point(peak_flops, bandwidth):
    ### BEGIN SOLUTION
    if peak_flops <= 0:
        raise ValueError(f"peak_flops должно быть > 0, получено {peak_flops}")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth должна быть > 0, получено {bandwidth}")
    return peak_flops / bandwidth
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_ridge_point", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.ridge_point', ridge_point)
### BEGIN HIDDEN TESTS
grade('lesson01.ridge_point', ridge_point, cases=[{'peak_flops': 67000000000000.0, 'bandwidth': 3350000000000.0}, {'peak_flops': 1979000000000000.0, 'bandwidth': 4800000000000.0}, {'peak_flops': 1.0, 'bandwidth': 3.0}])
### END HIDDEN TESTS

# %%
for name, (peak, bandwidth) in GPUS.items():
    print(f"{name:>14}: {peak / 1e12:5.0f} TFLOP/s, {bandwidth / 1e12:5.3f} ТБ/с, "
          f"ridge point {ridge_point(peak, bandwidth):5.0f} FLOP/байт")


# %% [markdown]
# Ridge point у всех четырёх — от 150 до 300 FLOP/байт: чтобы загрузить тензорные ядра, на каждый байт из HBM
# нужно сделать сотни операций. H200 быстрее H100 только по памяти, поэтому его излом левее (206 против 295).
#
# Но это крыша **тензорных ядер**, а на них идут только матричные умножения (GEMM). Поэлементные операции — RMSNorm,
# epilogue SwiGLU, softmax — исполняются на обычных CUDA-ядрах в fp32, и их крыша в 15 раз ниже; `exp` считают отдельные
# блоки SFU, и их операций в секунду ещё в 17 раз меньше, если считать FMA CUDA-ядра за 2 FLOP, а `exp` — за одну
# операцию. По инструкциям разница в 8 раз: за такт SM выдаёт 128 результатов fp32 FMA и 16 — `exp2` (CUDA C++
# Programming Guide, таблица пропускной способности арифметических инструкций, compute capability 9.0); ещё 2× дают
# 2 FLOP на FMA, остальное — разные частоты в паспортных числах (1.98 и 1.83 ГГц). Излом fp32-крыши:

# %%
for name, (peak, bandwidth) in GPUS.items():
    peak32 = FP32_CUDA_CORES[name]
    print(f"{name:>14}: fp32 {peak32 / 1e12:4.1f} TFLOP/s, ridge {ridge_point(peak32, bandwidth):4.1f} FLOP/байт "
          f"(тензорные ядра: {ridge_point(peak, bandwidth):3.0f})")
print(f"H100 SXM: тензорные ядра / fp32 = {GPUS['H100 SXM'][0] / FP32_CUDA_CORES['H100 SXM']:.0f}x, "
      f"fp32 / SFU = {FP32_CUDA_CORES['H100 SXM'] / SFU_EXP_PER_S['H100 SXM']:.0f}x")

# %% nbgrader={"grade": false, "grade_id": "attainable_flops", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attainable_flops(intensity, peak_flops, bandwidth):
    ### BEGIN SOLUTION
    if intensity < 0:
        raise ValueError(f"intensity должна быть >= 0, получено {intensity}")
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops и bandwidth должны быть > 0, получено {peak_flops}, {bandwidth}")
    return min(peak_flops, intensity * bandwidth)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_attainable_flops", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.attainable_flops', attainable_flops)
### BEGIN HIDDEN TESTS
grade('lesson01.attainable_flops', attainable_flops, cases=[{'intensity': 0.4, 'gpu': 'A100 40GB'}, {'intensity': 295.0, 'gpu': 'H200 SXM'}, {'intensity': 7.0, 'peak_flops': 10.0, 'bandwidth': 2.0}])
### END HIDDEN TESTS

# %% nbgrader={"grade": false, "grade_id": "roofline_time", "locked": false, "schema_version": 3, "solution": true, "task": false}
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    ### BEGIN SOLUTION
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"flops и bytes_moved должны быть >= 0, получено {flops}, {bytes_moved}")
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops и bandwidth должны быть > 0, получено {peak_flops}, {bandwidth}")
    return max(flops / peak_flops, bytes_moved / bandwidth)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_roofline_time", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.roofline_time', roofline_time)
### BEGIN HIDDEN TESTS
grade('lesson01.roofline_time', roofline_time, cases=[{'flops': 1000000000000.0, 'bytes_moved': 1000000000.0, 'gpu': 'A100 80GB SXM'}, {'flops': 0, 'bytes_moved': 2000000000.0, 'gpu': 'A100 40GB'}, {'flops': 3.0, 'bytes_moved': 5.0, 'peak_flops': 2.0, 'bandwidth': 4.0}])
### END HIDDEN TESTS

# %% [markdown]
# Пример: RMSNorm на префилле 4096 токенов, d = 1024, bf16 (слитая версия: прочитать x, записать y; около 4 FLOP на элемент).

# %%
tokens, d, bf16 = 4096, 1024, 2
flops = 4 * d * tokens
bytes_moved = 2 * d * bf16 * tokens
peak, bandwidth = GPUS["H100 SXM"]
print(f"H100 SXM: по FLOPs {flops / peak * 1e6:.3f} мкс, по байтам {bytes_moved / bandwidth * 1e6:.2f} мкс, "
      f"оценка {roofline_time(flops, bytes_moved, peak, bandwidth) * 1e6:.2f} мкс")
print(f"по FLOPs на fp32 CUDA-ядрах (где RMSNorm и считается): {flops / FP32_CUDA_CORES['H100 SXM'] * 1e6:.2f} мкс")


# %% [markdown]
# **Запуск ядра.** 5 мкс — это столько же, сколько стоит сам запуск ядра. В уроке 06 на H200 курса пустое ядро,
# запускаемое подряд, занимает 5.0 мкс на запуск (CUDA events; `benchmarks/results/gpu_kernels_h200.json`, ключ
# `cuda_basics`), а запуск с ожиданием результата — 9.5 мкс. Грубая модель одного ядра поэтому
#
# $$t \approx t_\text{launch} + \max\left(\frac{\text{FLOPs}}{P},\ \frac{\text{bytes}}{B}\right).$$
#
# Она грубая: запуски подряд частично перекрываются с работой предыдущего ядра. Но порядок величины она даёт верный.
#
# **Прогноз.** На декоде (один токен, T = 1) та же RMSNorm читает и пишет по одной строке. Во сколько раз запуск дольше,
# чем оценка roofline? Впишите прогноз (не оценивается; можно оставить `None`).

# %%
my_guess_launch_ratio = None   # ваш прогноз: t_launch / оценка roofline для RMSNorm на одном токене

# %%
T_LAUNCH = 5.0e-6   # с, пустое ядро подряд, H200 курса (урок 06)
t_roof = roofline_time(4 * d, 2 * d * bf16, peak, bandwidth)
print(f"декод, T = 1: roofline {t_roof * 1e9:.1f} нс, запуск {T_LAUNCH * 1e6:.1f} мкс; отношение {T_LAUNCH / t_roof:,.0f}"
      + ("" if my_guess_launch_ratio is None else f" (ваш прогноз: {my_guess_launch_ratio:,})"))
weights = (28 * (1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 3 * 1024 * 3072) + 151936 * 1024) * bf16
print(f"56 RMSNorm отдельными ядрами: {56 * T_LAUNCH * 1e6:.0f} мкс на токен; чтение всех весов Qwen3-0.6B "
      f"({weights / 1e9:.2f} ГБ): " + ", ".join(
          f"{name} — {weights / GPUS[name][1] * 1e6:.0f} мкс (запуски — {56 * T_LAUNCH / (weights / GPUS[name][1]):.0%} от него)"
          for name in ("H100 SXM", "H200 SXM")))

# %% [markdown]
# На декоде байтов почти нет, и время RMSNorm — это время запуска. 56 норм отдельными ядрами стоят около 80 % от
# чтения всех весов модели на H100 SXM (слои и общая с эмбеддингом матрица LM head, 151 936 × 1024), а на H200, где и
# измерены 5 мкс запуска, — больше, чем само чтение весов. Поэтому на декоде
# сливают не ради байт, а ради числа запусков: норму объединяют с прибавлением residual (бонус урока 02), а весь шаг
# декода записывают в CUDA graph, чтобы не платить CPU-часть запуска за каждое ядро.


# %% nbgrader={"grade": false, "grade_id": "bound_by", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bound_by(flops, bytes_moved, peak_flops, bandwidth):
    ### BEGIN SOLUTION
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"flops и bytes_moved должны быть >= 0, получено {flops}, {bytes_moved}")
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops и bandwidth должны быть > 0, получено {peak_flops}, {bandwidth}")
    return "memory" if bytes_moved / bandwidth > flops / peak_flops else "compute"
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_bound_by", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.bound_by', bound_by)
### BEGIN HIDDEN TESTS
grade('lesson01.bound_by', bound_by, cases=[{'flops': 8600000000.0, 'bytes_moved': 172000000.0, 'gpu': 'H200 SXM'}, {'flops': 1099511627776, 'bytes_moved': 402653184, 'gpu': 'A100 40GB'}, {'flops': 100.0, 'bytes_moved': 1.0, 'peak_flops': 1000.0, 'bandwidth': 1.0}])
### END HIDDEN TESTS

# %% [markdown]
# Неверный вход во всех пяти функциях:

# %% nbgrader={"grade": true, "grade_id": "test_lesson01_bad_input", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.bad_input', arithmetic_intensity, ridge_point, attainable_flops, roofline_time, bound_by)
### BEGIN HIDDEN TESTS
grade('lesson01.bad_input', arithmetic_intensity, ridge_point, attainable_flops, roofline_time, bound_by, cases=[{'function': 'arithmetic_intensity', 'args': [-5, 100], 'why': 'отрицательные FLOPs'}, {'function': 'ridge_point', 'args': [-1000000000000.0, 1000000000000.0], 'why': 'отрицательный пик'}, {'function': 'attainable_flops', 'args': [-1.0, 989000000000000.0, 3350000000000.0], 'why': 'отрицательная интенсивность'}, {'function': 'roofline_time', 'args': [1.0, 1.0, 0, 1000000000000.0], 'why': 'нулевой пик'}, {'function': 'bound_by', 'args': [1000000000.0, -1, 989000000000000.0, 3350000000000.0], 'why': 'отрицательные байты'}])
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Трафик: сколько байт гоняет оператор
#
# Интенсивность зависит от того, **сколько раз данные проходят через HBM**. Считаем проходы по памяти: каждое отдельное
# ядро читает свои входы из HBM и пишет выход обратно. Qwen3-0.6B: $d = 1024$, промежуточный размер MLP $I = 3072$,
# 28 слоёв; bf16 — 2 байта на элемент.
#
# **RMSNorm** на строку $x \in \mathbb{R}^d$. Наивно (отдельные ядра): прочитать $x$ и записать $x^2$; прочитать $x^2$
# для среднего; прочитать $x$ ещё раз для нормировки и записать $y$ — пять проходов по $d$ элементов. Это модель из трёх
# ядер, где `x / rms * w` — одно поэлементное ядро. Если и деление, и умножение на $w$ — свои ядра (так исполняет выражение
# CuPy или PyTorch без компиляции), добавляются запись и чтение $x / \text{rms}$: семь проходов (урок 02). Функция ниже
# считает модель из пяти.
# Слитое ядро (fused): прочитать $x$, записать $y$ — два прохода (на GPU строка целиком лежит в регистрах, повторного чтения из HBM нет).
#
# Напишите `rmsnorm_bytes_per_row(d, bytes_per_element=2) -> (naive, fused)` — байты на строку.

# %% nbgrader={"grade": false, "grade_id": "rmsnorm_bytes_per_row", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rmsnorm_bytes_per_row(d, bytes_per_element=2):
    ### BEGIN SOLUTION
    naive = 5 * d * bytes_per_element   # read x, write x², read x², read x, write y
    fused = 2 * d * bytes_per_element   # read x, write y
    return naive, fused
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_rmsnorm_bytes", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.rmsnorm_bytes', rmsnorm_bytes_per_row)
### BEGIN HIDDEN TESTS
grade('lesson01.rmsnorm_bytes', rmsnorm_bytes_per_row, cases=[{'d': 4096, 'bytes_per_element': 4}, {'d': 896, 'bytes_per_element': 1}, {'d': 7}])
### END HIDDEN TESTS

# %%
naive, fused = rmsnorm_bytes_per_row(1024)
print(f"RMSNorm, d=1024, bf16: {naive:,} против {fused:,} байт на строку ({naive / fused:.1f}x)")
norms, tokens = 2 * 28, 4096    # две RMSNorm на слой (перед attention и перед MLP), префилл 4096 токенов
print(f"префилл: {norms * tokens * naive / 1e9:.2f} ГБ против {norms * tokens * fused / 1e9:.2f} ГБ")


# %% [markdown]
# (q_norm и k_norm внутри attention Qwen3 и финальная норма здесь не учтены.)
#
# **SwiGLU** в MLP: $h = \operatorname{silu}(x W_\text{gate}) \odot (x W_\text{up})$, $g = x W_\text{gate}$ и $u = x W_\text{up}$
# длины $I$ на токен. Наивно: два GEMM пишут $g$ и $u$ в HBM, отдельное ядро epilogue читает оба и пишет $h$ —
# $5I$ элементов промежуточного трафика на токен. Слитое ядро (fused) на GPU: epilogue применяется к выходу GEMM прямо в регистрах,
# в HBM уходит только $h$ — $I$ элементов. (Чтение $x$ и весов одинаково в обоих вариантах, его не считаем.)
#
# Напишите `swiglu_bytes_per_token(I, bytes_per_element=2) -> (naive, fused)`.

# %% nbgrader={"grade": false, "grade_id": "swiglu_bytes_per_token", "locked": false, "schema_version": 3, "solution": true, "task": false}
def swiglu_bytes_per_token(I, bytes_per_element=2):
    ### BEGIN SOLUTION
    naive = 5 * I * bytes_per_element   # write g, write u, read g, read u, write h
    fused = I * bytes_per_element       # write h
    return naive, fused
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_swiglu_bytes", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.swiglu_bytes', swiglu_bytes_per_token)
### BEGIN HIDDEN TESTS
grade('lesson01.swiglu_bytes', swiglu_bytes_per_token, cases=[{'I': 11008, 'bytes_per_element': 4}, {'I': 768, 'bytes_per_element': 1}, {'I': 5}])
### END HIDDEN TESTS

# %%
naive, fused = swiglu_bytes_per_token(3072)
total = 28 * 4096   # слоёв × токенов префилла
print(f"SwiGLU, I=3072, bf16: {naive:,} против {fused:,} байт на токен на слой ({naive / fused:.0f}x)")
print(f"префилл 4096 токенов, 28 слоёв: {total * naive / 2**30:.2f} ГиБ ({total * naive / 1e9:.2f} ГБ) "
      f"против {total * fused / 2**30:.2f} ГиБ")


# %% [markdown]
# ## 3. Матрица внимания S
#
# Наивный attention для каждой головы считает $S = QK^\top / \sqrt{d}$ размера $n \times n$, $P = \operatorname{softmax}(S)$
# и $O = PV$. У Qwen3-0.6B 16 голов запросов, head_dim $d = 128$. Размер $S$ не зависит от $d$: $n^2$ элементов на голову.
#
# Напишите `attention_scores_bytes(n, heads=16, bytes_per_element=2)` — байты матриц $S$ всех голов одного слоя.
#
# **Прогноз** до того, как считать: сколько гигабайт занимают матрицы $S$ одного слоя при $n = 32768$ в bf16? Впишите число
# в ячейку после проверки (не оценивается).

# %% nbgrader={"grade": false, "grade_id": "attention_scores_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_scores_bytes(n, heads=16, bytes_per_element=2):
    ### BEGIN SOLUTION
    return heads * n * n * bytes_per_element
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_attention_scores_bytes", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.attention_scores_bytes', attention_scores_bytes)
### BEGIN HIDDEN TESTS
grade('lesson01.attention_scores_bytes', attention_scores_bytes, cases=[{'n': 2048, 'heads': 32, 'bytes_per_element': 4}, {'n': 131072, 'heads': 8}, {'n': 3, 'heads': 1, 'bytes_per_element': 1}])
### END HIDDEN TESTS

# %%
my_guess_scores_gb = None   # ваш прогноз: ГБ матриц S одного слоя при n = 32768

# %%
print(f"ответ: {16 * 32768**2 * 2 / 1e9:.1f} ГБ" + ("" if my_guess_scores_gb is None else f", ваш прогноз: {my_guess_scores_gb} ГБ"))
for n in (4096, 32768):
    layer = attention_scores_bytes(n)
    head = attention_scores_bytes(n, heads=1)
    print(f"n={n:6d}: на голову {head / 1e6:9.1f} МБ ({head / 2**20:7.0f} МиБ), "
          f"на слой {layer / 1e9:6.2f} ГБ ({layer / 2**20:6.0f} МиБ)")


# %% [markdown]
# При $n = 4096$ это 537 МБ (512 МиБ) на слой — терпимо по объёму, но каждый проход по ним стоит времени.
# При $n = 32768$ — 34 ГБ на слой: почти вся память A100 40GB, больше трети H100 (80 ГБ) и четверть H200 (141 ГБ),
# и это только один слой без весов и KV-кэша. Материализация $S$ здесь уже вопрос «запустится ли вообще», а не скорости.
#
# **Трафик наивного attention на голову.** Отдельные ядра ходят в HBM так:
# 1. `запись S` — GEMM $QK^\top$ пишет $S$ ($n^2$);
# 2. `чтение S для max` — максимум по строке ($n^2$);
# 3. `чтение S для exp` — $\exp(S - m)$, сумма строки считается в том же проходе ($n^2$);
# 4. `запись P` — результат exp ($n^2$);
# 5. `чтение P для PV` — GEMM $PV$ ($n^2$; деление на сумму строки делается на выходе $O$ размера $n \times d$);
#
# плюс чтение $Q$, $K$, $V$ и запись $O$ — по $n \cdot d$ элементов.
#
# Напишите `naive_attention_traffic(n, d, bytes_per_element=2) -> dict`: словарь {название прохода: байты},
# каждый из пяти проходов по $S$/$P$ отдельной записью (названия — любые понятные строки), и отдельно $Q$, $K$, $V$, $O$.

# %% nbgrader={"grade": false, "grade_id": "naive_attention_traffic", "locked": false, "schema_version": 3, "solution": true, "task": false}
def naive_attention_traffic(n, d, bytes_per_element=2):
    ### BEGIN SOLUTION
    square = n * n * bytes_per_element
    row = n * d * bytes_per_element
    return {
        "запись S": square,
        "чтение S для max": square,
        "чтение S для exp": square,
        "запись P": square,
        "чтение P для PV": square,
        "чтение Q": row,
        "чтение K": row,
        "чтение V": row,
        "запись O": row,
    }
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_naive_attention_traffic", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.naive_attention_traffic', naive_attention_traffic)
### BEGIN HIDDEN TESTS
grade('lesson01.naive_attention_traffic', naive_attention_traffic, cases=[{'n': 1024, 'd': 64, 'bytes_per_element': 4}, {'n': 32768, 'd': 128}])
### END HIDDEN TESTS

# %%
n, d = 4096, 128
passes = naive_attention_traffic(n, d)
for name, size in passes.items():
    print(f"{name:>18}: {size / 1e6:7.2f} МБ")
five = sum(size for size in passes.values() if size == n * n * 2)
total = sum(passes.values())
flops = 4 * n * n * d    # QKᵀ и PV: по 2·n²·d
intensity = arithmetic_intensity(flops, total)
print(f"пять проходов по S/P: {five / 1e6:.1f} МБ; всего {total / 1e6:.1f} МБ на голову; "
      f"{flops / 1e9:.2f} GFLOP; интенсивность {intensity:.1f} FLOP/байт")
for name, (peak, bandwidth) in GPUS.items():
    print(f"{name:>14}: ridge {ridge_point(peak, bandwidth):4.0f} — в {ridge_point(peak, bandwidth) / intensity:.1f} раза "
          f"выше; {bound_by(flops, total, peak, bandwidth)}")


# %% [markdown]
# Часто цитируют «около 134 МБ на голову» — это четыре прохода из пяти. Честный счёт: пять проходов по $S$/$P$ — 168 МБ,
# и ещё 4 МБ на $Q$, $K$, $V$, $O$. Интенсивность около 50 FLOP/байт — в 3–4 раза ниже ridge point A100 и в 6 раз ниже H100:
# наивный attention упирается в память. FlashAttention (урок 05) не пишет $S$ и $P$ в HBM совсем — остаются только 4 МБ.
#
# ## 4. GEMM
#
# Для сравнения — матричное умножение $C = AB$, $A$ размера $M \times K$, $B$ размера $K \times N$: каждый из $M N$ выходов —
# скалярное произведение длины $K$ ($K$ умножений и $K$ сложений); байты — прочитать $A$ и $B$, записать $C$.
#
# Напишите `gemm_traffic(M, N, K, bytes_per_element=2) -> (flops, bytes)`.

# %% nbgrader={"grade": false, "grade_id": "gemm_traffic", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gemm_traffic(M, N, K, bytes_per_element=2):
    ### BEGIN SOLUTION
    flops = 2 * M * N * K
    bytes_moved = (M * K + K * N + M * N) * bytes_per_element
    return flops, bytes_moved
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson01_gemm_traffic", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.gemm_traffic', gemm_traffic)
### BEGIN HIDDEN TESTS
grade('lesson01.gemm_traffic', gemm_traffic, cases=[{'M': 1, 'N': 3072, 'K': 1024}, {'M': 8192, 'N': 8192, 'K': 8192, 'bytes_per_element': 1}, {'M': 3, 'N': 5, 'K': 7, 'bytes_per_element': 4}])
### END HIDDEN TESTS

# %%
flops, bytes_moved = gemm_traffic(4096, 2 * 3072, 1024)   # gate и up одним GEMM на префилле 4096 токенов
print(f"GEMM gate_up: {flops / 1e9:.1f} GFLOP, {bytes_moved / 1e6:.1f} МБ, "
      f"интенсивность {arithmetic_intensity(flops, bytes_moved):.0f} FLOP/байт")
flops1, bytes1 = gemm_traffic(1, 2 * 3072, 1024)          # тот же GEMM на одном токене (декод)
print(f"на одном токене: интенсивность {arithmetic_intensity(flops1, bytes1):.2f} FLOP/байт — веса читаются ради одной строки")


# %% [markdown]
# ## 5. Roofline на графике
#
# Напишите `plot_roofline(gpu_name, ops)`: лог-лог график для GPU из таблицы `GPUS` и операторов
# `ops = {имя: (flops, bytes)}`; верните `Axes` (или `Figure`). Проверка читает координаты нарисованного, а не пиксели, поэтому
# контракт точный:
# - ось x — интенсивность (FLOP/байт), ось y — FLOP/s (не TFLOP/s); обе оси логарифмические;
# - крыша — **одна ломаная** (`ax.plot`), все вершины которой лежат на $\min(P, I \cdot B)$, среди вершин есть ridge point,
#   а по x она охватывает всех операторов (например, вершины `[x_min, ridge, x_max]`);
# - каждый оператор — точка $(I, \text{attainable}(I))$ (`ax.scatter` или `ax.plot(..., "o")`) с подписью-именем
#   (`label=name` и легенда или `ax.annotate`).

# %% nbgrader={"grade": false, "grade_id": "plot_roofline", "locked": false, "schema_version": 3, "solution": true, "task": false}
def plot_roofline(gpu_name, ops):
    ### BEGIN SOLUTION
    peak, bandwidth = GPUS[gpu_name]
    ridge = ridge_point(peak, bandwidth)
    points = {name: arithmetic_intensity(flops, size) for name, (flops, size) in ops.items()}
    x_min = min([ridge, *points.values()]) / 10
    x_max = max([ridge, *points.values()]) * 10
    xs = [x_min, ridge, x_max]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, [attainable_flops(x, peak, bandwidth) for x in xs], color="black", label=f"крыша {gpu_name}")
    for name, intensity in points.items():
        y = attainable_flops(intensity, peak, bandwidth)
        ax.scatter([intensity], [y], s=50, zorder=3, label=name)
        ax.annotate(name, (intensity, y), textcoords="offset points", xytext=(6, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("арифметическая интенсивность, FLOP/байт")
    ax.set_ylabel("достижимая производительность, FLOP/s")
    ax.set_title(f"Roofline {gpu_name}, bf16: ridge point {ridge:.0f} FLOP/байт")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax
    ### END SOLUTION


# %% [markdown]
# Выберите GPU и посмотрите, где оказываются операторы Qwen3-0.6B (bf16, префилл 4096 токенов):

# %%
MY_GPU = "H100 SXM"   # любой ключ из GPUS
d, I, n, head_dim, tokens = 1024, 3072, 4096, 128, 4096
ops = {
    "RMSNorm": (4 * d, rmsnorm_bytes_per_row(d)[1]),                  # fused, на строку
    "SwiGLU epilogue": (5 * I, 3 * I * 2),                            # отдельное ядро: прочитать g, u, записать h
    "naive attention": (4 * n * n * head_dim, sum(naive_attention_traffic(n, head_dim).values())),
    "GEMM gate_up": gemm_traffic(tokens, 2 * I, d),
}
for name, (flops, size) in ops.items():
    peak, bandwidth = GPUS[MY_GPU]
    print(f"{name:>16}: I = {arithmetic_intensity(flops, size):8.2f} FLOP/байт -> {bound_by(flops, size, peak, bandwidth)}")
ax = plot_roofline(MY_GPU, ops)

# %% [markdown]
# На вашем графике одна крыша — тензорных ядер. Но RMSNorm и epilogue SwiGLU на тензорных ядрах не идут: их крыша —
# fp32 CUDA-ядер, а `exp` (в silu и softmax) — ещё ниже, у SFU. Дорисуем обе на тех же осях и сравним каждый оператор
# с его собственной крышей.

# %%
peak, bandwidth = GPUS[MY_GPU]
peak32 = FP32_CUDA_CORES[MY_GPU]
xs = np.logspace(*np.log10(ax.get_xlim()), 200)      # в пределах осей графика
ax.plot(xs, np.minimum(peak32, xs * bandwidth), "--", color="tab:blue",
        label=f"CUDA-ядра fp32: {peak32 / 1e12:.1f} TFLOP/s")
if MY_GPU in SFU_EXP_PER_S:
    ax.axhline(SFU_EXP_PER_S[MY_GPU], ls=":", color="tab:red", label="SFU: exp в секунду")
ax.legend(fontsize=8, loc="lower right")
for name in ("RMSNorm", "SwiGLU epilogue"):
    intensity = arithmetic_intensity(*ops[name])
    print(f"{name:>16}: I = {intensity:.2f}; ridge fp32 {ridge_point(peak32, bandwidth):.1f}, ridge / I = "
          f"{ridge_point(peak32, bandwidth) / intensity:.0f} (по крыше тензорных ядер было бы "
          f"{ridge_point(peak, bandwidth) / intensity:.0f})")
if MY_GPU in SFU_EXP_PER_S:
    sfu = SFU_EXP_PER_S[MY_GPU]
    exp_per_byte = I / (3 * I * 2)          # epilogue SwiGLU: один exp (в silu) на элемент, 6 байт на элемент
    print(f"SwiGLU epilogue: SFU успевают при {sfu / exp_per_byte / 1e12:.0f} ТБ/с, а HBM даёт {bandwidth / 1e12:.2f} — "
          "упирается в память")
    t_matmul = 4 * n * n * head_dim / peak  # attention на голову: QKᵀ и PV на тензорных ядрах
    t_exp = n * n / sfu                     # exp на каждый элемент S на SFU
    print(f"attention, d = {head_dim}: exp на SFU {t_exp * 1e6:.0f} мкс против GEMM {t_matmul * 1e6:.0f} мкс на голову "
          f"({t_exp / t_matmul:.0%})")
ax.figure

# %% nbgrader={"grade": true, "grade_id": "test_lesson01_roofline_plot", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson01.roofline_plot', plot_roofline)
### BEGIN HIDDEN TESTS
grade('lesson01.roofline_plot', plot_roofline, cases=[{'gpu': 'A100 40GB', 'ops': {'elementwise': [10, 1000], 'big GEMM': [1099511627776, 402653184]}}, {'gpu': 'H200 SXM', 'ops': {'A': [1000000000.0, 1000000.0], 'B': [1000000.0, 1000000.0], 'C': [300000000.0, 1000000.0]}}])
### END HIDDEN TESTS

# %% [markdown]
# Итак, для поэлементных операций честный множитель — против излома fp32 (10–20 FLOP/байт), а не тензорных ядер
# (150–300): RMSNorm и epilogue SwiGLU всё равно упираются в память, с запасом в 10–20 раз. А в attention `exp` на SFU
# занимает около половины времени GEMM — к этому вернётся FlashAttention-3 (урок 10), статья которого приводит те же
# числа (989 TFLOPS матричных против 3.9 TFLOPS специальных функций у H100 SXM5, раздел 3).
#
# ## 6. Вся модель: когда attention перевешивает
#
# Сравним на префилле одного слоя Qwen3-0.6B две части: линейные слои (проекции q, k, v, o и три матрицы MLP — это GEMM
# с $2 \cdot T \cdot W$ FLOP, где $W$ — число весов слоя) и attention с causal-маской ($QK^\top$ и $PV$, половина от
# $4 n^2 d$ на каждую из 16 голов). Поэлементные операции (две нормы и epilogue SwiGLU; softmax — внутри слитого attention)
# упираются в память, их считаем отдельно по байтам.
#
# **Прогноз.** При какой длине контекста $n$ FLOPs attention слоя сравняются с FLOPs его линейных слоёв?

# %%
my_guess_crossover_n = None   # ваш прогноз: n, при котором attention = линейные слои по FLOPs

# %%
hidden, heads, kv_heads, head_dim, inter, layers = 1024, 16, 8, 128, 3072, 28
W_layer = (hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
           + 3 * hidden * inter)
crossover = W_layer / (heads * head_dim)      # 2·n·W = 2·n²·d·H (causal: половина от 4·n²·d·H)
print(f"весов на слой: {W_layer / 1e6:.2f} млн; attention = линейные слои при n = {crossover:,.0f}"
      + ("" if my_guess_crossover_n is None else f" (ваш прогноз: {my_guess_crossover_n:,})"))
peak, bandwidth = GPUS["H100 SXM"]
for n_ctx in (4096, 32768):
    linear = layers * 2 * n_ctx * W_layer
    attention = layers * 2 * n_ctx * n_ctx * head_dim * heads
    elementwise = layers * n_ctx * (2 * rmsnorm_bytes_per_row(hidden)[1] + 3 * inter * bf16)  # 2 нормы + epilogue
    t_lin, t_att = linear / peak, attention / peak
    t_el = elementwise / bandwidth
    total = t_lin + t_att + t_el
    print(f"n = {n_ctx:5d}: линейные {t_lin * 1e3:6.2f} мс ({t_lin / total:.0%}), attention {t_att * 1e3:6.2f} мс "
          f"({t_att / total:.0%}), поэлементные слитые {t_el * 1e3:5.2f} мс ({t_el / total:.0%}); H100 SXM, 28 слоёв")

# %% [markdown]
# Оценка по пику (идеальные ядра): при 4096 токенах линейные слои ещё больше attention, при 32768 attention занимает
# уже около трёх четвертей времени, потому что растёт как $n^2$. Даже слитые поэлементные операции — заметная доля
# при коротком контексте (их байты растут как $n$, как и FLOPs линейных слоёв); наивные версии с 2,5–5-кратным трафиком
# (раздел 2) сделали бы её в разы больше. LM head (151 936 × 1024) здесь не учтён: на префилле его считают только для
# последнего токена.
#
# ## Итог
#
# - Время оператора снизу — $\max(\text{FLOPs}/P, \text{bytes}/B)$, плюс около 5 мкс на запуск ядра; ridge point
#   тензорных ядер у A100/H100/H200 — 150–300 FLOP/байт, fp32 CUDA-ядер — 10–20.
# - RMSNorm (~1 FLOP/байт) и SwiGLU epilogue (<1) левее даже fp32-излома: их ускоряет только сокращение байт — слияние
#   (10d против 4d байт на строку RMSNorm, 5I против I на токен SwiGLU). На декоде их время — время запуска.
# - Наивный attention (~50 FLOP/байт) тоже memory-bound из-за пяти проходов по $S$/$P$; при $n = 32768$ одна только $S$
#   занимает 34 ГБ на слой.
# - Большой GEMM (сотни FLOP/байт) — compute-bound; тот же GEMM на одном токене — нет.
# - На префилле Qwen3-0.6B attention догоняет линейные слои по FLOPs при $n \approx 7700$ и дальше растёт как $n^2$.
#
# Дальше: слитая (fused) RMSNorm (урок 02), SwiGLU (урок 03), online softmax (урок 04) и FlashAttention (урок 05).

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. Выражение `x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w`: сколько проходов по памяти оно сделает,
#    если каждая операция — отдельное ядро? А если `x / rms * w` — одно ядро?
# 2. Сколько временных массивов размера (T, D) NumPy держит одновременно, пока считает это выражение?
# 3. Сумма 4096 квадратов копится в float32. Насколько она может разойтись с точной, и нужно ли для RMSNorm что-то
#    вроде алгоритма Уэлфорда (Welford), как для дисперсии?
