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
# # Урок 03. Слитый (fused) SwiGLU: один GEMM и epilogue на месте
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# В этом уроке вы:
# 1. посчитаете байты на токен для наивного SwiGLU, для варианта с одним GEMM на CPU и для слитого epilogue на GPU — честно;
# 2. разберётесь, почему наивная формула silu переполняется, и запишете устойчивую;
# 3. напишете `fused_swiglu(x, W_gate_up)`: один GEMM по склеенным весам, epilogue на представлениях (views) его выхода, без копий g и u;
# 4. измерите пик памяти наивной и вашей версии.
#
# Проверки запускаются ячейками «Проверка» или кнопкой **Validate** (баллы — в строке ✓/✗ каждой проверки и в `make test`: окно Validate их не показывает); каждая выполняется в отдельном процессе.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
import matplotlib.pyplot as plt

from autograder import grade
from autograder.lessons.plots import measure_peaks, plot_peaks, MiB


def swiglu_ref(x, W_gate, W_up):
    # Наивный SwiGLU: два GEMM и поэлементные операции, каждая — новый массив (T, I).
    g = x @ W_gate
    u = x @ W_up
    return g / (1 + np.exp(-g)) * u


# %% [markdown]
# ## 1. MLP Qwen3-0.6B и его трафик
#
# MLP в каждом из 28 слоёв Qwen3-0.6B ($d = 1024$, промежуточный размер $I = 3072$):
#
# $$h = \operatorname{silu}(x W_\text{gate}) \odot (x W_\text{up}), \qquad y = h W_\text{down}, \qquad
# \operatorname{silu}(z) = z \cdot \sigma(z) = \frac{z}{1 + e^{-z}} .$$
#
# Обозначим $g = x W_\text{gate}$ и $u = x W_\text{up}$ — по $I$ элементов на токен. Промежуточный трафик на токен
# (чтение $x$ и весов одинаково во всех вариантах, его не считаем):
#
# - **naive** (GPU, отдельные ядра): два GEMM пишут $g$ и $u$ в HBM ($2I$), epilogue читает оба ($2I$) и пишет $h$ ($I$) — $5I$;
# - **merged** (то, что доступно нам в NumPy на CPU): веса склеены по столбцам, $W_\text{gate\_up} = [W_\text{gate} \mid W_\text{up}]$,
#   и один GEMM пишет $[g, u]$ ($2I$); epilogue читает его ($2I$) и пишет $h$ ($I$) — те же $5I$. Экономия здесь — один
#   запуск GEMM вместо двух (и $x$ читается один раз), а не байты промежуточных тензоров;
# - **fused** (GPU, своё GEMM-ядро): $g$ и $u$ рождаются в регистрах, epilogue $\operatorname{silu}(g) \odot u$ применяется до
#   записи, в HBM уходит только $h$ — $I$.
#
# В уроке 01 вы уже посчитали naive и fused функцией `swiglu_bytes_per_token`. Напишите
# `swiglu_traffic_per_token(I, bytes_per_element=2)` — словарь с ключами `"naive"`, `"merged"`, `"fused"` (байты на токен на слой).

# %% nbgrader={"grade": false, "grade_id": "swiglu_traffic_per_token", "locked": false, "schema_version": 3, "solution": true, "task": false}
def swiglu_traffic_per_token(I, bytes_per_element=2):
    ### BEGIN SOLUTION
    naive = (2 * I + 2 * I + I) * bytes_per_element    # write g, u; read g, u; write h
    merged = (2 * I + 2 * I + I) * bytes_per_element   # write [g, u]; read [g, u]; write h
    fused = I * bytes_per_element                      # write h
    return {"naive": naive, "merged": merged, "fused": fused}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson03_traffic", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson03.traffic', swiglu_traffic_per_token)
### BEGIN HIDDEN TESTS
grade('lesson03.traffic', swiglu_traffic_per_token, cases=[{'I': 11008, 'bytes_per_element': 4}, {'I': 768, 'bytes_per_element': 1}, {'I': 9}])
### END HIDDEN TESTS

# %% [markdown]
# **Прогноз.** Во сколько раз вариант merged (один GEMM по склеенным весам) уменьшает промежуточный трафик по сравнению
# с naive? Впишите число (не оценивается).

# %%
my_guess_merged_saving = None   # ваш прогноз: байты naive / байты merged

# %%
traffic = swiglu_traffic_per_token(3072)
tokens, layers = 4096, 28
for name, size in traffic.items():
    total = size * tokens * layers
    print(f"{name:>6}: {size:6,} байт на токен на слой; префилл {tokens} токенов × {layers} слоёв: "
          f"{total / 2**30:.2f} ГиБ ({total / 1e9:.2f} ГБ)")
print(f"naive / fused = {traffic['naive'] / traffic['fused']:.0f}x, naive / merged = {traffic['naive'] / traffic['merged']:.0f}x"
      + ("" if my_guess_merged_saving is None else f" (ваш прогноз для merged: {my_guess_merged_saving}x)"))

# %% [markdown]
# Вывод: 5× по байтам даёт только настоящее слитое ядро на GPU, где промежуточный тензор не покидает регистры.
# На CPU без своего GEMM-ядра мы не можем помешать BLAS записать $[g, u]$ в память. Зато можем не делать хуже:
# не копировать $g$ и $u$ и не плодить временные массивы в epilogue — это и увидит `tracemalloc`.
#
# ## 2. silu без переполнения
#
# В float32 $e^{z}$ переполняется до `inf` уже при $z > 88.7$. Наивные формулы ломаются на больших $|g|$:

# %%
g = np.array([-100.0, -1.0, 0.0, 1.0, 100.0], dtype=np.float32)
with np.errstate(over="raise", invalid="raise"):
    for name, silu in [("g / (1 + exp(-g))", lambda z: z / (1 + np.exp(-z))),
                       ("g * exp(g) / (1 + exp(g))", lambda z: z * np.exp(z) / (1 + np.exp(z)))]:
        try:
            print(f"{name:>26}: {silu(g)}")
        except FloatingPointError as error:
            print(f"{name:>26}: FloatingPointError: {error}")
with np.errstate(all="ignore"):
    print("без errstate вторая формула даёт:", g * np.exp(g) / (1 + np.exp(g)))


# %% [markdown]
# Первая формула при $g = -100$ считает $e^{100} = \infty$ (с предупреждением о переполнении) и возвращает $-0.0$;
# верное значение — $-3.78 \cdot 10^{-42}$ (субнормальное число float32, его печатает последняя строка вывода), так что
# $-0.0$ близко, но не верно. Вторая при $g = 100$ даёт $\infty/\infty = \text{NaN}$. `np.where(g >= 0, формула1, формула2)` не спасает:
# NumPy вычисляет **обе** ветви на всех элементах.
#
# Устойчивая запись сигмоиды — показатели всех экспонент неположительны:
#
# $$\sigma(z) = \frac{e^{\min(z, 0)}}{1 + e^{-|z|}} .$$
#
# ## 3. Задание: `fused_swiglu`
#
# Напишите `fused_swiglu(x, W_gate_up)`:
# - `x` — (T, D) float32, `W_gate_up` — (D, 2I) float32, gate — первые I столбцов, up — последние I;
# - вернуть $\operatorname{silu}(x W_\text{gate}) \odot (x W_\text{up})$, (T, I) float32;
# - **один** GEMM `x @ W_gate_up`; $g$ и $u$ — срезы-виды его выхода (`gu[:, :I]`, `gu[:, I:]`), без `.copy()` и `np.concatenate`;
# - silu без переполнения при больших $|g|$ (проверка включает `np.errstate(over="raise", invalid="raise")`);
# - входы не изменять.
#
# **Граница памяти**: пик `tracemalloc` не больше выхода GEMM (T × 2I float32) плюс результат (T × I float32) — с запасом
# 15 % и 256 КиБ. То есть кроме `gu` жить может только один массив (T, I).
#
# Подсказки: `np.minimum(g, 0, out=...)`, `np.exp(a, out=a)`, `a *= b`. Выход GEMM — ваш собственный массив: когда $g$ больше
# не нужен, его половину можно использовать как рабочий буфер (например, сначала `u *= g`).

# %% nbgrader={"grade": false, "grade_id": "fused_swiglu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fused_swiglu(x, W_gate_up):
    ### BEGIN SOLUTION
    I = W_gate_up.shape[1] // 2
    gu = x @ W_gate_up                 # the one GEMM: (T, 2I), our own buffer
    g, u = gu[:, :I], gu[:, I:]        # views, no copies
    out = np.minimum(g, 0)             # the result buffer: exp(min(g, 0)), the sigmoid's numerator
    np.exp(out, out=out)
    u *= g                             # u <- g * u; g itself is no longer needed ...
    np.abs(g, out=g)                   # ... so its half becomes scratch: 1 + exp(-|g|)
    np.negative(g, out=g)
    np.exp(g, out=g)
    g += 1
    out *= u                           # exp(min(g, 0)) * g * u
    out /= g                           # / (1 + exp(-|g|)) = silu(g) * u
    return out
    ### END SOLUTION


# %% [markdown]
# Самопроверка на маленьком примере против `swiglu_ref` (не оценивается):

# %%
rng = np.random.default_rng(0)
x_small = rng.standard_normal((4, 16), dtype=np.float32)
W_gate, W_up = rng.standard_normal((16, 8), dtype=np.float32), rng.standard_normal((16, 8), dtype=np.float32)
W_gate_up = np.concatenate([W_gate, W_up], axis=1)    # (D, 2I): gate слева, up справа
print("макс. расхождение со swiglu_ref:", np.abs(fused_swiglu(x_small, W_gate_up) - swiglu_ref(x_small, W_gate, W_up)).max())
with np.errstate(over="raise", invalid="raise"):
    print("g = ±1000:", fused_swiglu(np.array([[1.0]], np.float32), np.array([[-1000.0, 1000.0]], np.float32)))

# %% [markdown]
# ### Проверки
# Каждая ячейка ниже — отдельная проверка со своими баллами.

# %% nbgrader={"grade": true, "grade_id": "test_lesson03_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson03.equivalence', fused_swiglu)
### BEGIN HIDDEN TESTS
grade('lesson03.equivalence', fused_swiglu, cases=[{'T': 77, 'D': 300, 'I': 500, 'seed': 101}, {'T': 1, 'D': 1024, 'I': 3072, 'seed': 102}, {'T': 33, 'D': 16, 'I': 1, 'seed': 103}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson03_large_inputs", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson03.large_inputs', fused_swiglu)
### BEGIN HIDDEN TESTS
grade('lesson03.large_inputs', fused_swiglu, cases=[{'T': 40, 'D': 256, 'I': 300, 'seed': 104, 'scale': 3000.0}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson03_not_mutated", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson03.not_mutated', fused_swiglu)
### BEGIN HIDDEN TESTS
grade('lesson03.not_mutated', fused_swiglu, cases=[{'T': 9, 'D': 100, 'I': 70, 'seed': 105}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson03_dtype", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson03.dtype', fused_swiglu)
### BEGIN HIDDEN TESTS
grade('lesson03.dtype', fused_swiglu, cases=[{'T': 3, 'D': 7, 'I': 11, 'seed': 106}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson03_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson03.memory', fused_swiglu)
### BEGIN HIDDEN TESTS
grade('lesson03.memory', fused_swiglu, cases=[{'T': 1000, 'D': 256, 'I': 1000, 'seed': 107}])
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Измеряем: пик памяти от T
#
# Пик `tracemalloc` наивной `swiglu_ref` (веса раздельно) и вашей `fused_swiglu` при $D = 1024$, $I = 3072$.
# Пунктир — граница из задания (выход GEMM + результат) и размер результата.
#
# **Прогноз.** Сколько массивов размера (T, I) одновременно держит наивная `swiglu_ref` на пике?

# %%
my_guess_naive_arrays = None   # ваш прогноз: пик swiglu_ref в единицах массива (T, I)

# %%
sizes = [32, 64, 128, 256, 512]
D, I = 1024, 3072
rng = np.random.default_rng(1)
W_gate_up = (rng.standard_normal((D, 2 * I), dtype=np.float32) / np.float32(np.sqrt(D)))
W_gate, W_up = np.ascontiguousarray(W_gate_up[:, :I]), np.ascontiguousarray(W_gate_up[:, I:])

def make_args(T):
    return (np.random.default_rng(T).standard_normal((T, D), dtype=np.float32),)

peaks = measure_peaks({"swiglu_ref": lambda x: swiglu_ref(x, W_gate, W_up),
                       "fused_swiglu": lambda x: fused_swiglu(x, W_gate_up)}, sizes, make_args)
fig = plot_peaks(sizes, peaks, xlabel="T (токенов)", title=f"SwiGLU, D={D}, I={I}, float32",
                 reference={"выход GEMM + результат": [3 * T * I * 4 for T in sizes],
                            "результат": [T * I * 4 for T in sizes]})
for T, naive, fused in zip(sizes, peaks["swiglu_ref"], peaks["fused_swiglu"]):
    print(f"T={T:4d}: swiglu_ref {naive / MiB:6.1f} МиБ ({naive / (T * I * 4):.1f} × (T, I)), "
          f"fused_swiglu {fused / MiB:6.1f} МиБ ({fused / (T * I * 4):.1f} × (T, I))")
if my_guess_naive_arrays is not None:
    print(f"ваш прогноз: {my_guess_naive_arrays} × (T, I)")

# %% [markdown]
# Наивная версия держит одновременно $g$, $u$ и два временных массива цепочки `g / (1 + np.exp(-g))` — четыре массива (T, I);
# `fused_swiglu` — выход GEMM (два) и результат — три. На CPU это вся доступная экономия: $[g, u]$ всё равно записан в память.
# На GPU слитое ядро не пишет ни $g$, ни $u$, и разница становится 5× по трафику HBM (раздел 1).
#
# ## Итог
#
# - SwiGLU Qwen3-0.6B: 30 720 байт промежуточного трафика на токен на слой наивно, 6 144 в слитом ядре на GPU (5×);
#   на префилле 4096 токенов × 28 слоёв — 3,28 ГиБ против 0,66 ГиБ.
# - Один GEMM по склеенным весам экономит запуск и повторное чтение $x$, но не байты $[g, u]$: они записаны и прочитаны.
# - silu считается устойчиво через $e^{\min(z,0)} / (1 + e^{-|z|})$; `np.where` по двум наивным формулам не спасает от переполнения.
# - Epilogue на представлениях (views) выхода GEMM и операции `out=` держат пик памяти на уровне «выход GEMM + результат».

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. Softmax строки требует её максимума и суммы экспонент. Если строка приходит блоками и прочитать её второй раз
#    нельзя, что хранить между блоками?
# 2. Максимум вырос на новом блоке. Как поправить уже накопленную сумму $\sum e^{s - m_{old}}$, не пересчитывая её?
# 3. Две половины строки обработаны независимо. Можно ли склеить их результаты в один точный softmax?
