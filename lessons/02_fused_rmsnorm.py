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
# # Урок 02. Слитая (fused) RMSNorm: байты, а не FLOPы
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# В этом уроке вы:
# 1. посчитаете арифметическую интенсивность RMSNorm и увидите, что этот оператор упирается в память, а не в вычисления;
# 2. посчитаете трафик наивной и слитой (fused) версии на строку и на весь префилл Qwen3-0.6B;
# 3. измерите пик памяти наивной версии в NumPy и напишете `fused_rms_norm` без временных массивов размера (T, D);
# 4. (бонус) сольёте в тот же проход прибавление residual.
#
# Проверки запускаются ячейками «Проверка» или кнопкой **Validate** (баллы — в строке ✓/✗ каждой проверки и в `make test`: окно Validate их не показывает). Каждая проверка выполняется в отдельном процессе: зависшая или упавшая функция стоит только своей ячейки.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
import matplotlib.pyplot as plt
import tracemalloc

from autograder import grade
from autograder.lessons.plots import measure_peaks, plot_peaks, MiB

# %% [markdown]
# ## 1. Почему RMSNorm упирается в память
#
# RMSNorm для строки $x \in \mathbb{R}^d$ с весом $w$:
#
# $$y = \frac{x}{\sqrt{\frac{1}{d}\sum_j x_j^2 + \varepsilon}} \odot w .$$
#
# Любой оператор на GPU читает входы из HBM, считает и пишет выход. Время оценивается снизу как
# $\max(\text{FLOPs}/\text{peak}, \text{bytes}/\text{bandwidth})$. Отношение FLOPs/bytes — **арифметическая интенсивность** $I$.
# Если $I$ меньше **ridge point** $P/B$ (пиковая производительность, делённая на пропускную способность памяти), оператор упирается в память.
#
# На строку RMSNorm приходится около $4d$ FLOP (квадрат, сумма, умножение на $1/\text{rms}$, умножение на вес), а байт минимум $4d$ в bf16: прочитать $x$ ($2d$) и записать $y$ ($2d$). Посчитаем и сравним с ridge point реальных GPU (спецификации NVIDIA: A100, H100 SXM, H200 SXM).
#
# С каким ridge point сравнивать? RMSNorm — поэлементная операция и редукция: она идёт не на тензорных ядрах (они только
# умножают матрицы), а на обычных CUDA-ядрах в fp32. Её крыша — пик fp32 (19,5 TFLOPS у A100, 67 у H100 SXM и H200),
# а не bf16 тензорных ядер (312 и 989). Напечатаем оба излома.

# %%
d = 1024                      # d_model Qwen3-0.6B
bf16 = 2                      # байт на элемент
flops_per_row = 4 * d         # x², сумма, умножение на 1/rms, умножение на w
bytes_per_row_fused = 2 * d * bf16   # прочитать x, записать y
intensity = flops_per_row / bytes_per_row_fused
print(f"интенсивность RMSNorm: {intensity:.2f} FLOP/байт")

gpus = {  # (пик bf16 dense на тензорных ядрах, пик fp32 на CUDA-ядрах, FLOP/s; HBM, байт/с) — NVIDIA datasheets
    "A100 40GB": (312e12, 19.5e12, 1.555e12),
    "A100 80GB SXM": (312e12, 19.5e12, 2.039e12),
    "H100 SXM": (989e12, 67e12, 3.35e12),
    "H200 SXM": (989e12, 67e12, 4.8e12),
}
for name, (peak, peak32, bandwidth) in gpus.items():
    ridge, ridge32 = peak / bandwidth, peak32 / bandwidth
    print(f"{name:>14}: ridge fp32 {ridge32:4.1f} FLOP/байт, ridge / I = {ridge32 / intensity:3.0f} "
          f"(по крыше тензорных ядер было бы {ridge / intensity:3.0f})")

# %% [markdown]
# Вывод: у RMSNorm интенсивность около 1 FLOP/байт, а ridge point её настоящей, fp32-крыши — от 10 до 20 (у тензорных
# ядер было бы 150–300, но RMSNorm на них не идёт). Даже против fp32 запас в 10–20 раз: вычислительные блоки почти всё время
# ждут память, поэтому ускорить такой оператор можно только одним способом: **прочитать и записать меньше байт**.
#
# ## 2. Сколько байт гоняет наивная версия
#
# Наивная запись `x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w` на GPU — это несколько отдельных ядер, и каждое
# ходит в HBM. Сколько проходов, зависит от того, как операции разложены по ядрам; назовём обе модели.
#
# - **Каждая операция — своё ядро** (так выражение исполняют CuPy и PyTorch без компиляции): `x * x` читает $x$ и пишет
#   $x^2$; `mean` читает $x^2$; `x / rms` читает $x$ и пишет частное; `* w` читает частное и пишет $y$ — **семь** проходов
#   (массивы длины $T$ и вектор $w$ не считаем: они в $d$ или $T$ раз меньше).
# - **`x / rms * w` — одно поэлементное ядро** (так его слил бы компилятор, например `torch.compile`): частное не выходит
#   в HBM — **пять** проходов. Эту модель считает урок 01.
#
# Слитая версия — два прохода (прочитать $x$, записать $y$).
#
# **Прогноз.** Во сколько раз больше байт гоняет модель «каждая операция — своё ядро», чем слитое ядро?

# %%
my_guess_naive_ratio = None   # ваш прогноз: байты «каждая операция — своё ядро» / байты слитого ядра

# %%
passes_per_op = {"read x (x*x)": d, "write x²": d, "read x² (mean)": d, "read x (x/rms)": d, "write x/rms": d,
                 "read x/rms (*w)": d, "write y": d}
passes_naive = {"read x": d, "write x²": d, "read x² (mean)": d, "read x (normalise)": d, "write y": d}
passes_fused = {"read x": d, "write y": d}
per_op_bytes = sum(passes_per_op.values()) * bf16
naive_bytes = sum(passes_naive.values()) * bf16
fused_bytes = sum(passes_fused.values()) * bf16
print(f"на строку, d={d}, bf16: каждая операция — ядро {per_op_bytes:,} байт ({per_op_bytes / fused_bytes:.1f}x), "
      f"x/rms*w одним ядром {naive_bytes:,} байт ({naive_bytes / fused_bytes:.1f}x), слитое ядро {fused_bytes:,} байт"
      + ("" if my_guess_naive_ratio is None else f"; ваш прогноз: {my_guess_naive_ratio}x"))

layers, norms_per_layer, tokens = 28, 2, 4096   # Qwen3-0.6B: 28 слоёв, RMSNorm перед attention и перед MLP
norms = layers * norms_per_layer
print(f"префилл {tokens} токенов, {norms} норм: наивно {norms * tokens * naive_bytes / 1e9:.2f} ГБ, "
      f"слитое ядро {norms * tokens * fused_bytes / 1e9:.2f} ГБ")


# %% [markdown]
# (q_norm и k_norm внутри attention Qwen3 и финальную норму мы здесь не считаем. Префилл посчитан по модели из пяти
# проходов, как в уроке 01; по модели из семи — в 7/5 раза больше.) В уроке 07 наивная композиция CuPy — это модель из
# семи проходов, и там мы сравним её измеренное время с этими 3.5x.
#
# ## 3. Наивная версия в NumPy и её память
#
# На CPU тот же эффект виден как память: каждая промежуточная операция NumPy создаёт новый массив (T, D).
# Измерим пик через `tracemalloc` (NumPy сообщает ему о своих буферах данных) при T = 8192, D = 4096 в float32.
#
# **Прогноз.** Выход занимает 128 МиБ. Каков пик памяти наивной версии в МиБ (сверх входа)?

# %%
my_guess_peak_mib = None   # ваш прогноз: пик tracemalloc наивной версии, МиБ

# %%
def rms_norm_naive(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

T, D = 8192, 4096
x = np.random.default_rng(0).standard_normal((T, D), dtype=np.float32)
w = np.ones(D, dtype=np.float32)

tracemalloc.start()
y = rms_norm_naive(x, w)
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
print(f"выход: {y.nbytes / MiB:.0f} МиБ, пик наивной версии: {peak / MiB:.0f} МиБ ({peak / y.nbytes:.1f} выхода)"
      + ("" if my_guess_peak_mib is None else f"; ваш прогноз: {my_guess_peak_mib} МиБ"))
del x, y


# %% [markdown]
# Пик — два массива (T, D), а не четыре: `x * x` освобождается, как только посчитано среднее, и одновременно живут только
# `x / rms` и результат умножения на `w`.
#
# ## 4. Задание: `fused_rms_norm`
#
# Напишите `fused_rms_norm(x, w, eps=1e-6)`:
# - `x` — (T, D) float32, `w` — (D,) float32; вернуть новый массив (T, D) float32;
# - никаких временных массивов размера (T, D), кроме выхода: пик памяти ≈ размер выхода;
# - `x` и `w` не изменять; `eps` — под корнем.
#
# Подсказки: сумма квадратов строки — это скалярное произведение строки на саму себя, и у NumPy есть функции, которые
# считают его, не создавая $x^2$ целиком (или считайте по блокам строк); у поэлементных функций NumPy есть параметр,
# который велит писать результат в уже выделенный массив; следите, чтобы не появился float64 (NumPy 2: скаляр
# `np.float64` повышает массив float32).

# %% nbgrader={"grade": false, "grade_id": "fused_rms_norm", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fused_rms_norm(x, w, eps=1e-6):
    ### BEGIN SOLUTION
    T, D = x.shape
    sum_sq = np.einsum("td,td->t", x, x)                      # (T,) без x² целиком
    inv_rms = (1.0 / np.sqrt(sum_sq / D + eps)).astype(np.float32)
    out = np.empty_like(x)
    np.multiply(x, inv_rms[:, None], out=out)
    out *= w
    return out
    ### END SOLUTION


# %% [markdown]
# Быстрая самопроверка на маленьком примере (не оценивается):

# %%
x_small = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
print(fused_rms_norm(x_small, np.ones(4, dtype=np.float32)))

# %% [markdown]
# ### Проверки
# Каждая ячейка ниже — отдельная проверка со своими баллами.

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.equivalence', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.equivalence', fused_rms_norm, cases=[{'T': 333, 'D': 1000, 'seed': 101}, {'T': 1, 'D': 4096, 'seed': 102}, {'T': 77, 'D': 5, 'seed': 103, 'eps': 0.001}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_zeros", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.zeros', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.zeros', fused_rms_norm, cases=[{'T': 3, 'D': 17, 'seed': 104}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_large_values", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.large_values', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.large_values', fused_rms_norm, cases=[{'T': 5, 'D': 4096, 'seed': 105, 'big': 30000.0}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_unit_rms", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.unit_rms', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.unit_rms', fused_rms_norm, cases=[{'T': 9, 'D': 777, 'seed': 106}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_eps_placement", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.eps_placement', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.eps_placement', fused_rms_norm, cases=[{'T': 11, 'D': 64, 'seed': 107, 'scale': 0.05, 'eps': 0.1}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_mean_axis", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.mean_axis', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.mean_axis', fused_rms_norm, cases=[{'T': 13, 'D': 13, 'seed': 108}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_not_mutated", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.not_mutated', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.not_mutated', fused_rms_norm, cases=[{'T': 7, 'D': 300, 'seed': 109}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_dtype", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.dtype', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.dtype', fused_rms_norm, cases=[{'T': 2, 'D': 3, 'seed': 110}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.memory', fused_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.memory', fused_rms_norm, cases=[{'T': 1024, 'D': 3000, 'seed': 111}])
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Измеряем: пик памяти от T
#
# Сравним пик `tracemalloc` наивной и вашей версии при D = 1024 и растущем T. Пунктир — размер выхода.

# %%
sizes = [256, 512, 1024, 2048, 4096, 8192]
D = 1024

def make_args(T):
    rng = np.random.default_rng(T)
    return rng.standard_normal((T, D), dtype=np.float32), np.ones(D, dtype=np.float32)

peaks = measure_peaks({"наивная": rms_norm_naive, "fused_rms_norm": fused_rms_norm}, sizes, make_args)
fig = plot_peaks(sizes, peaks, xlabel="T (токенов)", title=f"RMSNorm, D={D}, float32",
                 reference={"размер выхода": [T * D * 4 for T in sizes]})
for T, naive, fused in zip(sizes, peaks["наивная"], peaks["fused_rms_norm"]):
    print(f"T={T:5d}: наивная {naive / MiB:7.1f} МиБ, слитая {fused / MiB:7.1f} МиБ, выход {T * D * 4 / MiB:6.1f} МиБ")


# %% [markdown]
# Наивная версия держит около двух выходов, слитая — один. На GPU та же разница превращается во время:
# каждый лишний проход по (T, D) — это лишние байты через HBM.
#
# **Выделение памяти — не трафик.** Слитая версия NumPy не создаёт временных (T, D), но каждый вызов NumPy — отдельный
# проход по всему массиву: `einsum` читает $x$, нормировка читает $x$ ещё раз и пишет выход, умножение на $w$ (если оно
# отдельным вызовом) читает и пишет выход снова. Когда массив больше кэша процессора, каждый такой проход идёт через
# DRAM. GPU-ядро урока 07 держит строку в регистрах и читает $x$ из HBM один раз. Засечём проходы эталонного решения
# по отдельности (T = 4096, D = 4096, float32 — 64 МиБ; времена зависят от машины и её загрузки):

# %%
import time

def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)

x = np.random.default_rng(1).standard_normal((4096, 4096), dtype=np.float32)
w = np.ones(4096, dtype=np.float32)
out = np.empty_like(x)
inv_rms = np.ones(4096, dtype=np.float32)
steps = {
    "einsum: читает x": (lambda: np.einsum("td,td->t", x, x), 1),
    "multiply(x, inv_rms, out=out): читает x, пишет out": (lambda: np.multiply(x, inv_rms[:, None], out=out), 2),
    "out *= w: читает и пишет out": (lambda: np.multiply(out, w, out=out), 2),
}
total = 0.0
for name, (fn, passes) in steps.items():
    t = best_of(fn)
    total += t
    print(f"{name:>52}: {t * 1e3:6.1f} мс, {passes * x.nbytes / t / 1e9:5.1f} ГБ/с")
try:
    whole = f"{best_of(lambda: fused_rms_norm(x, w)) * 1e3:.1f} мс"
except NotImplementedError:
    whole = "ещё не написана"
print(f"{'сумма шагов':>52}: {total * 1e3:6.1f} мс; ваша fused_rms_norm целиком: {whole}")
print(f"массив x: {x.nbytes / MiB:.0f} МиБ; проходов по (T, D) у эталонного решения: 5 (у GPU-ядра: 2)")
del x, out

# %% [markdown]
# Время решения — примерно сумма его проходов: NumPy не умеет держать строку между вызовами. Меньше проходов на CPU
# дала бы обработка блоками строк, помещающимися в кэш (тогда второе чтение $x$ приходит из кэша), — если кэш меньше
# массива. На этой задаче мы честно получаем только меньший пик памяти; меньший трафик — дело GPU-ядра.
#
# ## 6. Точность суммы квадратов в float32
#
# Ядро копит $\sum_j x_j^2$ в float32 (урок 07). Не нужен ли здесь алгоритм Уэлфорда (Welford), как для дисперсии?
# Нет: у RMSNorm все слагаемые неотрицательны, и вычитания, в котором пропадают значащие цифры, нет. Ошибка суммы $n$
# положительных чисел в float32 не больше $n \cdot u$ относительной ($u = 2^{-24}$), а на практике — порядка
# $\sqrt{n} \cdot u$ при последовательном сложении и ещё меньше при попарном (так складывает NumPy и, деревом, блок
# потоков на GPU). Для дисперсии $E[x^2] - E[x]^2$ всё иначе: при среднем 1000 и разбросе 1 вычитаются два почти равных
# числа. Измерим обе вещи на строках длины 4096.
#
# **Прогноз.** Какая наибольшая относительная ошибка суммы 4096 квадратов в float32 при последовательном сложении
# (по 1000 строкам)? Порядок величины: 1e-3, 1e-5, 1e-7?

# %%
my_guess_sumsq_error = None   # ваш прогноз: наибольшая относительная ошибка, например 1e-5

# %%
rows = np.random.default_rng(2).standard_normal((1000, 4096), dtype=np.float32)
exact = np.einsum("td,td->t", rows.astype(np.float64), rows.astype(np.float64))
squares = rows * rows
variants = {
    "последовательно (np.cumsum)": np.cumsum(squares, axis=-1, dtype=np.float32)[:, -1],
    "попарно (np.sum)": np.sum(squares, axis=-1, dtype=np.float32),
    "256 частичных сумм по 16, затем попарно (как блок GPU)":
        np.sum(squares.reshape(1000, 16, 256).sum(axis=1, dtype=np.float32), axis=-1, dtype=np.float32),
}
u = 2.0**-24
for name, got in variants.items():
    error = np.max(np.abs(got.astype(np.float64) - exact) / exact)
    print(f"{name:>55}: {error:.1e} (n·u = {4096 * u:.1e}, шаг bf16 у 1.0 = {2.0**-8:.1e})")
if my_guess_sumsq_error is not None:
    print(f"ваш прогноз: {my_guess_sumsq_error}")
shifted = rows + np.float32(1000.0)   # среднее 1000, разброс 1
mean_sq = np.sum(shifted * shifted, axis=-1, dtype=np.float32) / np.float32(4096)
var_naive = mean_sq - (np.sum(shifted, axis=-1, dtype=np.float32) / np.float32(4096)) ** 2
var_exact = shifted.astype(np.float64).var(axis=-1)
print(f"дисперсия E[x²] − E[x]² в float32 при среднем 1000: относительная ошибка до "
      f"{np.max(np.abs(var_naive - var_exact) / var_exact):.1e}")

# %% [markdown]
# Сумма квадратов в float32 теряет меньше, чем один шаг bf16 в выходе, на несколько порядков, — поэтому RMSNorm в
# float32 с попарной или блочной суммой точна и без Уэлфорда. Дисперсия через $E[x^2] - E[x]^2$ при большом среднем
# ошибается на десятки процентов: LayerNorm (вычитает среднее) считают в два прохода по строке в регистрах или алгоритмом
# Уэлфорда.
#
# ## 7. Бонус: `fused_add_rms_norm`
#
# Бонус необязателен: его 3 балла идут сверх максимума урока. Пока функция не начата (в ней `raise NotImplementedError()`), его проверки пишут «○ … не выполнен», и ни Validate, ни оценка не считают это ошибкой.
#
# В pre-norm блоке трансформера перед нормой прибавляется residual: `h = x + residual`, затем `out = rms_norm(h)`, и `h` идёт дальше
# как новый residual. Слитая версия (как в vLLM) делает это за один проход.
#
# Напишите `fused_add_rms_norm(x, residual, w, eps=1e-6) -> (out, new_residual)`: `new_residual = x + residual`,
# `out = rms_norm(new_residual)`. `x` не изменять; `residual` можно обновить на месте. Никаких (T, D) буферов, кроме двух выходов.

# %% nbgrader={"grade": false, "grade_id": "fused_add_rms_norm", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    ### BEGIN SOLUTION
    residual += x                                   # новый residual, на месте
    sum_sq = np.einsum("td,td->t", residual, residual)
    inv_rms = (1.0 / np.sqrt(sum_sq / residual.shape[1] + eps)).astype(np.float32)
    out = residual * inv_rms[:, None]
    out *= w
    return out, residual
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson02_add_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.add_equivalence', fused_add_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.add_equivalence', fused_add_rms_norm, cases=[{'T': 31, 'D': 257, 'seed': 112}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson02_add_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson02.add_memory', fused_add_rms_norm)
### BEGIN HIDDEN TESTS
grade('lesson02.add_memory', fused_add_rms_norm, cases=[{'T': 512, 'D': 2048, 'seed': 113}])
### END HIDDEN TESTS

# %% [markdown]
# ## Итог
#
# - RMSNorm: ~1 FLOP/байт против fp32-ridge 10–20 FLOP/байт у A100/H100/H200 (тензорного — 150–300, но RMSNorm на
#   тензорных ядрах не идёт) — оператор ограничен памятью.
# - Слияние убирает проходы по памяти: 10d против 4d байт на строку в bf16, если `x / rms * w` — одно ядро (5 проходов
#   против 2), и 14d против 4d (3.5x), если каждая операция — своё ядро.
# - В NumPy это видно по пику памяти: наивная версия держит два (T, D) массива, слитая — только выход. Но проходов по
#   памяти у слитой NumPy-версии всё равно несколько: выделение памяти — не трафик.
# - Сумма квадратов в float32 точна с запасом: Уэлфорд нужен дисперсии, а не RMSNorm.
#
# Дальше — SwiGLU (урок 03), online softmax (урок 04) и FlashAttention (урок 05), где тот же принцип убирает матрицу n×n.

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. В SwiGLU два GEMM ($x W_\text{gate}$ и $x W_\text{up}$) можно заменить одним с матрицей $[W_\text{gate}, W_\text{up}]$.
#    Экономит ли это байты промежуточного результата, если GEMM всё равно пишет $[g, u]$ в память?
# 2. Сколько временных массивов размера (T, I) создаёт `silu(g) * u`, записанное в NumPy «как в формуле»?
# 3. Что из RMSNorm переносится на SwiGLU: где здесь «строка в регистрах» на GPU?
