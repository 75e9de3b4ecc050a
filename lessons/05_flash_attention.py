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
# # Урок 05. FlashAttention: attention без матрицы n×n
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# В уроке 04 вы научились считать softmax-среднее по блокам, храня после каждого блока только $(m, \ell, acc)$.
# Здесь тот же шаг применяется к блокам матрицы $S = QK^\top/\sqrt{d}$ — и матрица $n \times n$ перестаёт существовать. В этом уроке вы:
# 1. посчитаете, сколько стоит $S$ в памяти и трафике для реальной модели;
# 2. измерите пик памяти наивного attention в NumPy (и увидите ловушку NumPy 2 с `np.sqrt(d)`);
# 3. напишете `flash_attention` — блочный алгоритм FlashAttention (порядок циклов FA-1 из статьи или любой другой);
# 4. напишете `flash_attention_v2` — порядок FA-2: внешний цикл по блокам $Q$, одно деление в конце;
# 5. увидите, какие блоки посчитал ваш causal-запуск, и почему их $(N+1)/2N$, а не половина;
# 6. построите пик памяти от $n$ для наивной и блочной версий;
# 7. засечёте время на CPU и увидите, что здесь решает интерпретатор, а не память;
# 8. проверите два приёма настоящих ядер: перемасштабирование по требованию (FA-4) и обратный проход без $S$
#    (хранится только $\mathrm{lse} = m + \log \ell$).
#
# Проверки запускаются ячейками «Проверка» или кнопкой **Validate** (баллы — в строке ✓/✗ каждой проверки и в `make test`: окно Validate их не показывает). Каждая проверка выполняется в отдельном процессе.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
import matplotlib.pyplot as plt
import tracemalloc

from autograder import grade
from autograder.lessons.plots import measure_peaks, plot_peaks, MiB
from autograder.lessons.lesson05.tracing import observe_tiles, plot_tiles

# %% [markdown]
# ## 1. Сколько стоит $S$
#
# Qwen3-0.6B: 16 голов запросов, размер головы $d = 128$. Для одной головы при $n = 4096$ токенах матрица скоров
# $S \in \mathbb{R}^{n \times n}$ в bf16 занимает $n^2 \cdot 2$ байта. Наивный attention гоняет её через HBM несколько раз:
# записать $S$, прочитать для максимума по строке, прочитать и записать $P = \exp(S - m)$, прочитать $P$ для $PV$.

# %%
n, d, heads, bf16 = 4096, 128, 16, 2
S_bytes = n * n * bf16
print(f"S на голову: {S_bytes / 1e6:.1f} МБ = {S_bytes / MiB:.0f} МиБ; на {heads} голов слоя: "
      f"{heads * S_bytes / 1e6:.0f} МБ = {heads * S_bytes / MiB:.0f} МиБ")

passes = {"записать S": 1, "прочитать S (max)": 1, "прочитать S, записать P (exp)": 2, "прочитать P (P·V)": 1}
traffic = sum(passes.values()) * S_bytes
flops = 4 * n * n * d                          # Q·Kᵀ и P·V: по 2n²d
print(f"трафик по S и P: проходов {sum(passes.values())}, каждый по {S_bytes / 1e6:.1f} МБ, всего {traffic / 1e6:.0f} МБ на голову "
      f"(без последнего чтения P было бы {4 * S_bytes / 1e6:.0f} МБ)")
print(f"FLOP на голову: {flops / 1e9:.1f} ГФЛОП; интенсивность {flops / traffic:.0f} FLOP/байт "
      f"({flops / (4 * S_bytes):.0f}, если считать 4 прохода)")
for gpu, (peak, bandwidth) in {"A100 80GB": (312e12, 2.039e12), "A100 40GB": (312e12, 1.555e12),
                                "H100 SXM": (989e12, 3.35e12), "H200": (989e12, 4.8e12)}.items():
    print(f"  {gpu:>9}: ridge point {peak / bandwidth:4.0f} FLOP/байт — в {peak / bandwidth / (flops / traffic):.1f} раза выше")

n_long = 32768
print(f"n = {n_long}: S на голову {n_long**2 * bf16 / 2**30:.0f} ГиБ, на {heads} голов {heads * n_long**2 * bf16 / 2**30:.0f} ГиБ")


# %% [markdown]
# Даже на A100 наивный attention лежит в 3–4 раза ниже ridge point, а при длинном контексте $S$ просто не помещается
# в память рядом с весами и KV-кэшем. FlashAttention не хранит $S$ вовсе: в каждый момент живёт один блок $B_r \times B_c$.
#
# ## 2. Наивный attention в NumPy и его память

# %%
def attention_naive(Q, K, V, causal=False):
    # Эталон «в лоб»: S и P размера (n, n) создаются целиком. Скаляр float32, чтобы S осталась float32.
    d = Q.shape[1]
    S = (Q @ K.T) * np.float32(1 / np.sqrt(d))
    if causal:
        S = np.where(np.triu(np.ones(S.shape, dtype=bool), k=1), np.float32(-np.inf), S)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)) @ V


def attention_naive_numpy2_trap(Q, K, V):
    # То же, но со скаляром np.sqrt(d): это np.float64, и NumPy 2 (NEP 50) повышает S до float64.
    d = Q.shape[1]
    S = Q @ K.T / np.sqrt(d)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)) @ V


def peak_mib(fn, *args, **kwargs):
    tracemalloc.start()
    result = fn(*args, **kwargs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / MiB, result


rng = np.random.default_rng(0)
n, d = 1024, 64
Q, K, V = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
for fn in (attention_naive, attention_naive_numpy2_trap):
    peak, out = peak_mib(fn, Q, K, V)
    print(f"{fn.__name__:>28}: пик {peak:5.1f} МиБ, выход {out.dtype}; одна матрица (n, n) float32 = {n * n * 4 / MiB:.0f} МиБ")


# %% [markdown]
# Float32-версия держит около трёх матриц $n \times n$ (12 МиБ при $n = 1024$). С `/ np.sqrt(d)` в NumPy 2 всё считается во float64:
# пик вдвое больше, и выход тоже float64 — частая причина ошибки «dtype float64» в проверках. Пишите масштаб как
# `np.float32(1 / np.sqrt(d))`.
#
# ## 3. Блочный алгоритм
#
# Разобьём строки $Q$ на блоки по $B_r$, строки $K$ и $V$ — на блоки по $B_c$: всего $T_r = \lceil n / B_r \rceil$ и
# $T_c = \lceil n / B_c \rceil$ блоков. Для блока строк $i$ и блока ключей $j$:
#
# $$S_{ij} = Q_i K_j^\top / \sqrt{d} \in \mathbb{R}^{B_r \times B_c}, \qquad
# m_{new} = \max(m, \operatorname{rowmax} S_{ij}), \qquad c = e^{m - m_{new}}, \qquad P = e^{S_{ij} - m_{new}},$$
# $$\ell \leftarrow \ell \cdot c + \operatorname{rowsum} P, \qquad acc \leftarrow \operatorname{diag}(c)\, acc + P V_j .$$
#
# Это шаг урока 04, только $m$ и $\ell$ — векторы длины $B_r$, а $acc$ — матрица $B_r \times d$. После всех блоков ключей
# $O_i = \operatorname{diag}(\ell)^{-1} acc$.
#
# **FA-1** (статья 2022 г., алгоритм 1): внешний цикл — по блокам $K_j, V_j$, внутренний — по блокам $Q_i$. Массивы $O$, $m$, $\ell$
# для всех строк лежат в HBM; на каждом шаге блок $O_i, m_i, \ell_i$ читается, обновляется и пишется обратно. $O_i$ хранится
# **нормированным**, поэтому обновление такое:
# $$O_i \leftarrow \operatorname{diag}(\ell_{new})^{-1}\big(\operatorname{diag}(\ell \cdot c)\, O_i + P V_j\big),$$
# то есть сначала старое $O_i$ умножается обратно на $\ell$, а после — снова делится на $\ell_{new}$.
#
# **Causal.** Запрос $i$ видит ключи $j \le i$. Блок ключей, начинающийся со столбца $j_0$, целиком над диагональю для строк
# $i_0 .. i_1 - 1$, если $j_0 > i_1 - 1$: такой блок не нужно даже умножать. В диагональных блоках маску $j > i$ (по **глобальным**
# индексам) накладывают на $S_{ij}$ **до** максимума.
#
# ### Ловушки
# - $m$ стартует с $-\infty$, а не с 0: строка, у которой все видимые логиты $\ll 0$, иначе даст $\ell = 0$ и $0/0$.
# - Маска — до `max`: иначе $m$ учитывает будущие скоры, и при больших логитах все видимые $e^{s - m}$ обнуляются.
# - $\ell$ и $acc$ домножаются **одним и тем же** $c = e^{m_{old} - m_{new}}$, а $P$ считается от $m_{new}$.
# - Если $acc$ не нормирован (как в уроке 04), делить на $\ell$ можно только один раз, в конце. Деление внутри цикла
#   допустимо только в форме FA-1 — с обратным умножением на $\ell$.
# - $n$ может не делиться на $B_r$ и $B_c$: последний блок короче (срезы NumPy сами обрезаются по краю).
# - Срез `Q[i0:i1]` — это view: `Qi *= scale` изменит сам `Q`. Масштабируйте копию или $S$.
#
# ### Как проверяются блоки
# Проверка «causal пропускает блоки» вызывает вашу функцию с $Q$ и $K$ особого типа — подкласса `numpy.ndarray`, который помнит,
# из каких строк $Q$ и $K$ получен каждый массив, и отмечает каждое произведение куска $Q$ на кусок $K$ (`@`, `np.dot`, `np.einsum`, ...).
# Так проверка **сама видит**, какие блоки $(i, j)$ вы посчитали — сообщать счётчик не нужно. Чтобы это работало,
# **режьте `Q`, `K`, `V` напрямую** (`Q[i0:i1]`, `K[j0:j1]`) и не превращайте их целиком в обычный массив
# (`np.asarray(Q)`, `np.array(Q)`, `np.ascontiguousarray(Q)`, копирование в заранее созданный буфер): тогда проверка не увидит ни одного блока.
#
# ## 4. Задание 1: `flash_attention`
#
# `flash_attention(Q, K, V, Br=64, Bc=64, causal=False)`: `Q, K, V` — `(n, d)` float32; вернуть `(n, d)` float32
# $= \operatorname{softmax}(QK^\top/\sqrt{d})\,V$ (при `causal=True` запрос $i$ видит ключи $j \le i$).
# - никаких массивов размера $(n, n)$ (и $(B_r, n)$ тоже не нужно): только блоки $B_r \times B_c$;
# - блоки над диагональю при `causal=True` не умножать;
# - входы не изменять.
#
# Порядок циклов — любой; предлагаем порядок FA-1 из раздела 3 (внешний цикл по $K, V$), чтобы потом сравнить его с FA-2.

# %% nbgrader={"grade": false, "grade_id": "flash_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_attention(Q, K, V, Br=64, Bc=64, causal=False):
    ### BEGIN SOLUTION
    n, d = Q.shape
    scale = np.float32(1 / np.sqrt(d))
    O = np.zeros((n, d), dtype=np.float32)        # «HBM»: O, m, l для всех строк
    m = np.full(n, -np.inf, dtype=np.float32)
    l = np.zeros(n, dtype=np.float32)
    for j0 in range(0, n, Bc):                    # внешний цикл: блоки K, V
        Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
        for i0 in range(0, n, Br):                # внутренний: блоки Q
            i1 = min(i0 + Br, n)
            if causal and j0 > i1 - 1:
                continue                          # блок целиком над диагональю
            S = (Q[i0:i1] @ Kj.T) * scale         # (Br, Bc)
            if causal:
                hidden = np.arange(j0, j0 + len(Kj))[None, :] > np.arange(i0, i1)[:, None]
                S[hidden] = -np.inf               # маска — до max
            m_old, l_old = m[i0:i1], l[i0:i1]
            m_new = np.maximum(m_old, S.max(axis=1))
            c = np.exp(m_old - m_new)             # на первом блоке exp(−inf) = 0
            P = np.exp(S - m_new[:, None])
            l_new = l_old * c + P.sum(axis=1)
            # FA-1 хранит O нормированным: умножить обратно на l, пересчитать, снова поделить
            O[i0:i1] = ((l_old * c)[:, None] * O[i0:i1] + P @ Vj) / l_new[:, None]
            m[i0:i1], l[i0:i1] = m_new, l_new
    return O
    ### END SOLUTION


# %% [markdown]
# Самопроверка (не оценивается): расхождение с наивной версией должно быть порядка 1e-7.

# %%
Qs, Ks, Vs = (rng.standard_normal((100, 32), dtype=np.float32) for _ in range(3))
for causal in (False, True):
    diff = np.abs(flash_attention(Qs, Ks, Vs, Br=7, Bc=13, causal=causal) - attention_naive(Qs, Ks, Vs, causal=causal)).max()
    print(f"causal={causal}: max|flash − naive| = {diff:.1e}")

# %% [markdown]
# ### Проверки `flash_attention`
# Каждая ячейка ниже — отдельная проверка со своими баллами.

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa1_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa1_equivalence', flash_attention)
### BEGIN HIDDEN TESTS
grade('lesson05.fa1_equivalence', flash_attention, cases=[{'n': 257, 'd': 48, 'Br': 16, 'Bc': 64, 'causal': True, 'seed': 100}, {'n': 99, 'd': 16, 'Br': 13, 'Bc': 7, 'causal': True, 'seed': 101}, {'n': 5, 'd': 8, 'Br': 64, 'Bc': 64, 'causal': False, 'seed': 102}, {'n': 1, 'd': 4, 'Br': 3, 'Bc': 2, 'causal': True, 'seed': 103}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa1_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa1_memory', flash_attention)
### BEGIN HIDDEN TESTS
grade('lesson05.fa1_memory', flash_attention, cases=[{'n': 2048, 'd': 64, 'Br': 64, 'Bc': 64, 'seed': 104}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa1_causal_work", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa1_causal_work', flash_attention)
### BEGIN HIDDEN TESTS
grade('lesson05.fa1_causal_work', flash_attention, cases=[{'n': 200, 'd': 16, 'Br': 16, 'Bc': 32, 'seed': 105}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa1_stability", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa1_stability', flash_attention)
### BEGIN HIDDEN TESTS
grade('lesson05.fa1_stability', flash_attention, cases=[{'n': 200, 'd': 32, 'Br': 24, 'Bc': 40, 'causal': True, 'seed': 106, 'inputs': 'Q*100'}, {'n': 150, 'd': 64, 'Br': 16, 'Bc': 16, 'causal': True, 'seed': 107, 'inputs': 'K=-100Q'}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa1_contract", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa1_contract', flash_attention)
### BEGIN HIDDEN TESTS
grade('lesson05.fa1_contract', flash_attention, cases=[{'n': 33, 'd': 8, 'Br': 8, 'Bc': 16, 'seed': 108}])
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Сколько блоков считает causal-запуск
#
# При $T_r = T_c = N$ блоков на сторону нужны блоки на диагонали и под ней: $N(N+1)/2$ из $N^2$, то есть доля $(N+1)/2N$ —
# чуть больше половины, потому что диагональные блоки считаются целиком (и маскируются внутри).
#
# **Прогноз.** Сколько блоков из 64 посчитает causal-запуск при $N = 8$ блоках на сторону?

# %%
my_guess_causal_tiles = None   # ваш прогноз: блоков из 64 при N = 8

# %%
print(f"N = 8: {8 * 9 // 2} из 64" + ("" if my_guess_causal_tiles is None else f" (ваш прогноз: {my_guess_causal_tiles})"))
for N in (2, 4, 8, 32, 128):
    print(f"N = {N:3d}: {N * (N + 1) // 2:5d} из {N * N:5d} блоков, доля {(N + 1) / (2 * N):.4f}")

# %% [markdown]
# Посмотрим, какие блоки на самом деле посчитала ваша функция: `observe_tiles` вызывает её с отслеживающими $Q$ и $K$
# (как проверка) и рисует сетку. Синие клетки — посчитанные произведения $Q_i K_j^\top$.

# %%
Qg, Kg, Vg = (rng.standard_normal((256, 64), dtype=np.float32) for _ in range(3))
for causal in (False, True):
    seen = observe_tiles(flash_attention, Qg, Kg, Vg, Br=32, Bc=32, causal=causal)
    print(f"flash_attention, n=256, Br=Bc=32, causal={causal}: посчитано блоков {seen.count} из {seen.tiles.size}")
fig = plot_tiles(seen, title=f"flash_attention, causal: {seen.count} из {seen.tiles.size} блоков")

# %% [markdown]
# ## 6. FlashAttention-2: тот же алгоритм, другой порядок
#
# FA-2 (Dao, 2023) — не новая математика, а перестановка того же цикла под железо:
#
# 1. **Порядок циклов.** Внешний цикл — по блокам $Q_i$, внутренний — по блокам $K_j, V_j$. Аккумулятор $acc$ блока $Q_i$ живёт в
#    регистрах до конца, и $O_i$ пишется в HBM **один раз**. В FA-1 весь $O$ читался и писался заново на каждой внешней итерации.
# 2. **Параллелизм по строкам.** Блоки $Q_i$ независимы, поэтому каждый — отдельная единица работы (thread block):
#    сетка $T_r \times$ головы $\times$ батч. Реализация FA-1 параллелилась только по батчу и головам.
# 3. **Меньше не-матричных операций.** $acc$ не нормирован, деление на $\ell$ — одно, в конце. Деления и экспоненты идут не на
#    тензорных ядрах: на A100 не-матричный FLOP в 16 раз дороже матричного (19.5 TFLOP/s fp32 против 312 TFLOP/s bf16 на
#    тензорных ядрах; статья FA-2, раздел 3.1).
# 4. **Работа варпов внутри блока («split-Q»).** В FA-1 четыре варпа блока делили между собой $K_j, V_j$ (схема «split-K») и
#    складывали частичные результаты через разделяемую память с синхронизацией; в FA-2 варпы делят строки $Q_i$, а $K_j, V_j$
#    читают все — обмена между варпами нет (статья FA-2, раздел 3.3). Так устроено и быстрое ядро урока 08.

# %%
n, d, B, heads, bf16 = 4096, 128, 128, 16, 2   # Qwen3-0.6B: 16 голов Q
Tc = Tr = n // B
matrix = n * d * bf16                                  # одна из Q, K, V, O одной головы, байт
fa1 = (2 + Tc * (1 + 2)) * matrix   # K, V один раз; на каждом из Tc блоков K/V: весь Q и чтение + запись O
fa2 = (2 + Tr * 2) * matrix         # Q и O один раз; на каждом из Tr блоков Q: все K и V
print(f"трафик HBM одной головы (Q, K, V, O): FA-1 {fa1 / 1e6:.0f} МБ, FA-2 {fa2 / 1e6:.0f} МБ — в {fa1 / fa2:.1f} раза; "
      f"только по O было бы {2 * Tc * matrix / 1e6:.0f} против {matrix / 1e6:.0f} МБ, но K и V FA-2 перечитывает")
print(f"единиц параллельной работы при батче 1, {heads} головах: FA-1 {heads}, FA-2 {Tr * heads} (на A100 108 SM)")
print(f"делений на l: FA-1 {n * d * Tc:,} (на каждом шаге), FA-2 {n * d:,} (одно на элемент O)")


# %% [markdown]
# **Замеры на GPU.** Запомните правильные числа (графики бенчмарков репозитория FlashAttention): на A100 80GB, $d = 128$,
# длина 2k, causal, forward + backward — FA-1 около 69 TFLOP/s, FA-2 около 155 TFLOP/s, то есть выигрыш около 2×. Встречающиеся
# пары «168 против 335 TFLOP/s на A100» невозможны: пик A100 в bf16 — 312 TFLOP/s; 168 и 335 — значения с графиков для H100.
# FA-2 forward на H100 ($d = 128$, 4k/8k/16k): 368/370/370 TFLOP/s без маски, 319/333/335 с causal-маской.
#
# По порядку величины трафика (статья FlashAttention, теорема 2): стандартный attention делает $\Theta(nd + n^2)$ обращений к HBM,
# FlashAttention — $\Theta(n^2 d^2 / M)$, где $M$ — размер SRAM; при $d^2 \ll M$ это в разы меньше.
#
# ## 7. Задание 2: `flash_attention_v2`
#
# Тот же контракт, что у `flash_attention`, но в порядке FA-2: внешний цикл по блокам $Q$; для каждого блока — свои $m$, $\ell$,
# $acc$ (как в уроке 04, только векторами), проход по нужным блокам $K, V$ и одно деление $acc / \ell$ в конце.
# При `causal=True` внутренний цикл можно прервать (`break`): все следующие блоки ключей тоже над диагональью.
# Проверка смотрит и на порядок: блоки $Q$ должны обрабатываться по одному, от начала до конца.

# %% nbgrader={"grade": false, "grade_id": "flash_attention_v2", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_attention_v2(Q, K, V, Br=64, Bc=64, causal=False):
    ### BEGIN SOLUTION
    n, d = Q.shape
    scale = np.float32(1 / np.sqrt(d))
    O = np.empty((n, d), dtype=np.float32)
    for i0 in range(0, n, Br):                    # внешний цикл: блоки Q
        i1 = min(i0 + Br, n)
        Qi = Q[i0:i1]
        m = np.full(i1 - i0, -np.inf, dtype=np.float32)
        l = np.zeros(i1 - i0, dtype=np.float32)
        acc = np.zeros((i1 - i0, d), dtype=np.float32)
        for j0 in range(0, n, Bc):                # внутренний: блоки K, V
            if causal and j0 > i1 - 1:
                break                             # этот и все следующие блоки над диагональю
            Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
            S = (Qi @ Kj.T) * scale
            if causal:
                hidden = np.arange(j0, j0 + len(Kj))[None, :] > np.arange(i0, i1)[:, None]
                S[hidden] = -np.inf
            m_new = np.maximum(m, S.max(axis=1))
            c = np.exp(m - m_new)
            P = np.exp(S - m_new[:, None])
            l = l * c + P.sum(axis=1)
            acc = acc * c[:, None] + P @ Vj       # acc не нормирован
            m = m_new
        O[i0:i1] = acc / l[:, None]               # одно деление на строку
    return O
    ### END SOLUTION


# %% [markdown]
# ### Проверки `flash_attention_v2`

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa2_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa2_equivalence', flash_attention_v2)
### BEGIN HIDDEN TESTS
grade('lesson05.fa2_equivalence', flash_attention_v2, cases=[{'n': 257, 'd': 48, 'Br': 16, 'Bc': 64, 'causal': True, 'seed': 110}, {'n': 99, 'd': 16, 'Br': 13, 'Bc': 7, 'causal': True, 'seed': 111}, {'n': 5, 'd': 8, 'Br': 64, 'Bc': 64, 'causal': False, 'seed': 112}, {'n': 1, 'd': 4, 'Br': 3, 'Bc': 2, 'causal': True, 'seed': 113}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa2_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa2_memory', flash_attention_v2)
### BEGIN HIDDEN TESTS
grade('lesson05.fa2_memory', flash_attention_v2, cases=[{'n': 2048, 'd': 64, 'Br': 64, 'Bc': 64, 'seed': 114}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa2_causal_work", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa2_causal_work', flash_attention_v2)
### BEGIN HIDDEN TESTS
grade('lesson05.fa2_causal_work', flash_attention_v2, cases=[{'n': 200, 'd': 16, 'Br': 16, 'Bc': 32, 'seed': 115}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa2_stability", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa2_stability', flash_attention_v2)
### BEGIN HIDDEN TESTS
grade('lesson05.fa2_stability', flash_attention_v2, cases=[{'n': 200, 'd': 32, 'Br': 24, 'Bc': 40, 'causal': True, 'seed': 116, 'inputs': 'Q*100'}, {'n': 150, 'd': 64, 'Br': 16, 'Bc': 16, 'causal': True, 'seed': 117, 'inputs': 'K=-100Q'}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa2_contract", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa2_contract', flash_attention_v2)
### BEGIN HIDDEN TESTS
grade('lesson05.fa2_contract', flash_attention_v2, cases=[{'n': 33, 'd': 8, 'Br': 8, 'Bc': 16, 'seed': 118}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson05_fa2_loop_order", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson05.fa2_loop_order', flash_attention_v2)
### BEGIN HIDDEN TESTS
grade('lesson05.fa2_loop_order', flash_attention_v2, cases=[{'n': 100, 'd': 8, 'Br': 16, 'Bc': 8, 'seed': 119}])
### END HIDDEN TESTS

# %% [markdown]
# Сетка блоков `flash_attention_v2` в causal-запуске и порядок, в котором блоки $Q$ встречались в произведениях:

# %%
seen_v2 = observe_tiles(flash_attention_v2, Qg, Kg, Vg, Br=32, Bc=32, causal=True)
order = [int(np.unique(q // 32)[0]) for q, _ in seen_v2.products]
seen_v1 = observe_tiles(flash_attention, Qg, Kg, Vg, Br=32, Bc=32, causal=True)
order_v1 = [int(np.unique(q // 32)[0]) for q, _ in seen_v1.products]
print("блоки Q по порядку произведений, FA-2:", order)
print("блоки Q по порядку произведений, FA-1:", order_v1)
fig = plot_tiles(seen_v2, title=f"flash_attention_v2, causal: {seen_v2.count} из {seen_v2.tiles.size} блоков")

# %% [markdown]
# ## 8. Большие логиты
#
# При $Q \cdot 100$ логиты порядка сотен. Без вычитания максимума $e^{s}$ во float32 переполняется уже при $s > 88.7$,
# и $\infty / \infty$ даёт NaN. Во float64 (например, после невольного повышения через `np.sqrt(d)`) переполнение начинается
# только после 709 — поэтому «наивная версия даёт NaN» верно лишь для честного float32. Блочная версия вычитает бегущий максимум
# и остаётся конечной; от эталона float64 она отличается на величину порядка $\varepsilon_{32} \cdot |s|_{max}$ — ошибку округления
# самих логитов во float32 (поэтому допуск проверки растёт с логитами).

# %%
Qb, Kb, Vb = (rng.standard_normal((128, 64), dtype=np.float32) for _ in range(3))
Qb = Qb * np.float32(100)
with np.errstate(all="ignore"):
    S32 = (Qb @ Kb.T) * np.float32(1 / np.sqrt(64))
    E32 = np.exp(S32)                                          # без вычитания максимума
    print(f"float32 без max: max|s| = {np.abs(S32).max():.0f}, NaN в результате: {np.isnan((E32 / E32.sum(1, keepdims=True)) @ Vb).any()}")
    S64 = Qb @ Kb.T / np.sqrt(64)                              # NumPy 2: float64
    E64 = np.exp(S64)
    print(f"float64 без max ({S64.dtype}): NaN в результате: {np.isnan((E64 / E64.sum(1, keepdims=True)) @ Vb).any()}")
S_exact = Qb.astype(np.float64) @ Kb.T.astype(np.float64) / np.sqrt(64)
P_exact = np.exp(S_exact - S_exact.max(axis=1, keepdims=True))
exact = (P_exact / P_exact.sum(axis=1, keepdims=True)) @ Vb.astype(np.float64)   # эталон float64
out = flash_attention_v2(Qb, Kb, Vb, Br=32, Bc=32)
print(f"flash_attention_v2: всё конечно: {np.isfinite(out).all()}, max|flash − эталон float64| = {np.abs(out - exact).max():.1e}, "
      f"ε32·max|s|·max|v| = {np.finfo(np.float32).eps * np.abs(S_exact).max() * np.abs(Vb).max():.1e}")

# %% [markdown]
# ## 9. Пик памяти от $n$
#
# Измерим пик `tracemalloc` наивной и блочной версий при $d = 64$. Наивная растёт как $n^2$, блочная — как размер выхода $n \cdot d$
# плюс блоки. Пунктир — одна матрица $(n, n)$ float32, точки — выход $(n, d)$.

# %%
sizes = [256, 512, 1024, 2048]
d = 64

def make_args(n):
    r = np.random.default_rng(n)
    return tuple(r.standard_normal((n, d), dtype=np.float32) for _ in range(3))

peaks = measure_peaks({"наивная": attention_naive, "flash_attention_v2 (Br=Bc=64)": flash_attention_v2}, sizes, make_args)
fig = plot_peaks(sizes, peaks, xlabel="n (токенов)", title=f"attention, d={d}, float32",
                 reference={"одна (n, n) float32": [n * n * 4 for n in sizes]})
ax = fig.axes[0]
ax.plot(sizes, [n * d * 4 / MiB for n in sizes], linestyle=":", color="black", label="выход (n, d) float32")
ax.legend()
for n, naive, flash in zip(sizes, peaks["наивная"], peaks["flash_attention_v2 (Br=Bc=64)"]):
    print(f"n={n:5d}: наивная {naive / MiB:6.2f} МиБ, flash {flash / MiB:5.2f} МиБ, в {naive / flash:4.0f} раз меньше")

# %% [markdown]
# ## 10. Время на CPU: решает интерпретатор
#
# Блочные версии экономят память. Быстрее ли они на CPU? **Прогноз:** во сколько раз `flash_attention_v2` (Br = Bc = 64)
# медленнее или быстрее наивной версии при $n = 2048$, $d = 64$? (Больше 1 — flash медленнее.)

# %%
my_guess_cpu_ratio = None   # ваш прогноз: время flash_attention_v2 / время наивной версии

# %%
import time

def median_seconds(fn, *args, repeats=3, **kwargs):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return float(np.median(times))

cpu_times = {}
for n in (1024, 2048):
    Qt, Kt, Vt = (np.random.default_rng(n).standard_normal((n, 64), dtype=np.float32) for _ in range(3))
    for name, fn, kwargs in (("наивная", attention_naive, {}),
                             ("flash_attention (порядок FA-1)", flash_attention, {"Br": 64, "Bc": 64}),
                             ("flash_attention_v2 (порядок FA-2)", flash_attention_v2, {"Br": 64, "Bc": 64})):
        try:
            cpu_times[n, name] = median_seconds(fn, Qt, Kt, Vt, **kwargs)
            print(f"n = {n}: {name:>34}: {cpu_times[n, name] * 1e3:7.1f} мс")
        except NotImplementedError:
            print(f"n = {n}: {name:>34}: ещё не написана")
Qs, Ks, Vs = (a[:1024] for a in (Qt, Kt, Vt))
for B in (16, 32, 64):
    try:
        t = median_seconds(flash_attention_v2, Qs, Ks, Vs, Br=B, Bc=B)
        print(f"n = 1024, flash_attention_v2, Br = Bc = {B:2d}: {t * 1e3:6.1f} мс, {(1024 // B) ** 2:5d} итераций "
              f"цикла Python, {t / (1024 // B) ** 2 * 1e6:5.1f} мкс на итерацию")
    except NotImplementedError:
        pass
if (2048, "наивная") in cpu_times and (2048, "flash_attention_v2 (порядок FA-2)") in cpu_times:
    ratio = cpu_times[2048, "flash_attention_v2 (порядок FA-2)"] / cpu_times[2048, "наивная"]
    print(f"flash_attention_v2 / наивная при n = 2048: {ratio:.1f}"
          + ("" if my_guess_cpu_ratio is None else f" (ваш прогноз: {my_guess_cpu_ratio})"))

# %% [markdown]
# Блочная версия держит в памяти в десятки раз меньше, а по времени с наивной одного порядка (точное отношение зависит
# от машины и её загрузки): наивная — два больших вызова BLAS и несколько проходов по $S$, которая в памяти процессора
# ещё помещается, а блочная — тысячи итераций цикла Python, каждая с десятком маленьких вызовов NumPy. При мелких
# блоках время растёт пропорционально числу итераций — десятки микросекунд на итерацию, хотя FLOPs и байт столько же:
# это цена интерпретатора, а не памяти. Порядок FA-1 против FA-2 на CPU меняет немногое: FA-1 обычно немного
# медленнее, потому что на каждом шаге делает больше вызовов NumPy (перенормировка и перезапись блока $O$). То, что решает на GPU (байты через HBM), здесь скрыто за накладными
# расходами Python; время GPU-ядер — в уроках 07 и 08. Тот же замер для других $n$ — допишите их в `for n in (1024,
# 2048)` ячейки выше (у авторов курса это делает скрипт `benchmarks/flash_attention_cpu.py` их репозитория, с
# пиком памяти tracemalloc; в ваш репозиторий он не входит: он запускает эталонные решения).
#
# ## 11. Перемасштабирование по требованию
#
# На каждом блоке FA-2 умножает $\ell$ и $acc$ на $e^{m_{old} - m_{new}}$. Но опорное значение $m$ не обязано быть
# точным максимумом: в $O = acc / \ell$ множитель $e^{-m}$ сокращается при любом $m$, лишь бы $e^{s - m}$ не
# переполнялся. Поэтому можно **не пересчитывать** $acc$, пока максимум вырос не больше чем на порог $\tau$: тогда
# $p = e^{s - m_{old}} \le e^{\tau}$, при $\tau = 8$ это меньше 3000 — далеко от предела float32 ($3.4 \cdot 10^{38}$).
# Так делает FlashAttention-4 (conditional softmax rescaling; Zadouri, Hoehnerbach, Shah, Liu, Thakkar, Dao,
# статья `assets/fa4_paper.pdf` в репозитории Dao-AILab/flash-attention): на GPU пересчёт $acc$ — это не-матричные
# операции над целым тайлом, которые на Blackwell стоят дорого. Ниже решение принимается один раз на блок (на GPU — одна
# ветка на тайл, а не на строку): пересчитать, если хоть у одной строки максимум вырос больше чем на $\tau$.

# %%
def flash_attention_lazy(Q, K, V, Br=64, Bc=64, tau=8.0):
    """FA-2 order; rescale acc and l only when the running max of some row grew by more than tau."""
    n, d = Q.shape
    scale = np.float32(1 / np.sqrt(d))
    O = np.empty((n, d), dtype=np.float32)
    rescaled = steps = 0
    for i0 in range(0, n, Br):
        Qi = Q[i0:i0 + Br]
        m = np.full(len(Qi), -np.inf, dtype=np.float32)
        l = np.zeros(len(Qi), dtype=np.float32)
        acc = np.zeros((len(Qi), d), dtype=np.float32)
        for j0 in range(0, n, Bc):
            S = (Qi @ K[j0:j0 + Bc].T) * scale
            m_block = S.max(axis=1)
            steps += 1
            if j0 == 0 or np.any(m_block - m > tau):      # первый блок или максимум вырос заметно
                m_new = np.maximum(m, m_block)
                c = np.exp(m - m_new)
                l, acc, m = l * c, acc * c[:, None], m_new
                rescaled += j0 > 0
            P = np.exp(S - m[:, None])                      # m может отставать от максимума не больше чем на tau
            l = l + P.sum(axis=1)
            acc = acc + P @ V[j0:j0 + Bc]
        O[i0:i0 + Br] = acc / l[:, None]
    return O, rescaled, steps

Ql, Kl, Vl = (np.random.default_rng(5).standard_normal((1024, 64), dtype=np.float32) for _ in range(3))
Ql = Ql * np.float32(3)                                    # логиты порядка десятков: максимум растёт чаще
Sl = Ql.astype(np.float64) @ Kl.T.astype(np.float64) / 8
Pl = np.exp(Sl - Sl.max(axis=1, keepdims=True))
exact_l = (Pl / Pl.sum(axis=1, keepdims=True)) @ Vl.astype(np.float64)
for tau in (0.0, 8.0):
    O_lazy, rescaled, steps = flash_attention_lazy(Ql, Kl, Vl, tau=tau)
    print(f"tau = {tau:3.0f}: пересчётов acc {rescaled:3d} из {steps - 1024 // 64} шагов после первого блока, "
          f"max|O − эталон float64| = {np.abs(O_lazy - exact_l).max():.1e}")

# %% [markdown]
# С $\tau = 0$ (обычный FA-2) $acc$ пересчитывается на каждом шаге, где вырос хоть один максимум строки блока; с
# $\tau = 8$ — в разы реже, а ошибка та же: приём точный, а не приближённый.
#
# ## 12. Обратный проход без $S$: хватает $m$ и $\ell$
#
# Для градиентов нужна $P$: $dV = P^\top dO$, $dS = P \odot (dP - \mathrm{rowsum}(dO \odot O))$. Хранить $P$ ($n^2$)
# FlashAttention не станет. Прямой проход сохраняет на строку одно число $\mathrm{lse}_i = m_i + \log \ell_i$
# (log-sum-exp строки), а обратный проход пересчитывает блоки: $P_{ij} = \exp(S_{ij} - \mathrm{lse}_i)$ — и это
# ровно softmax, без второго прохода по строке (статья FlashAttention, раздел 3.1, «recomputation»; FA-2, алгоритм 1,
# хранит именно $L = m + \log \ell$). Проверим: прямой проход FA-2 с сохранением lse, затем $P$ и $dV$ по блокам.

# %%
def flash_forward_lse(Q, K, V, B=64):
    """FA-2 forward that also returns lse = m + log(l) per row (n numbers instead of the n x n matrix P)."""
    n, d = Q.shape
    scale = np.float32(1 / np.sqrt(d))
    O, lse = np.empty((n, d), dtype=np.float32), np.empty(n, dtype=np.float32)
    for i0 in range(0, n, B):
        Qi = Q[i0:i0 + B]
        m = np.full(len(Qi), -np.inf, dtype=np.float32)
        l = np.zeros(len(Qi), dtype=np.float32)
        acc = np.zeros((len(Qi), d), dtype=np.float32)
        for j0 in range(0, n, B):
            S = (Qi @ K[j0:j0 + B].T) * scale
            m_new = np.maximum(m, S.max(axis=1))
            c = np.exp(m - m_new)
            P = np.exp(S - m_new[:, None])
            l, acc, m = l * c + P.sum(axis=1), acc * c[:, None] + P @ V[j0:j0 + B], m_new
        O[i0:i0 + B] = acc / l[:, None]
        lse[i0:i0 + B] = m + np.log(l)
    return O, lse

n_bw, d_bw, B_bw = 512, 64, 64
Qw, Kw, Vw, dO = (np.random.default_rng(6).standard_normal((n_bw, d_bw), dtype=np.float32) for _ in range(4))
O_fw, lse = flash_forward_lse(Qw, Kw, Vw, B_bw)
S_full = (Qw @ Kw.T) * np.float32(1 / np.sqrt(d_bw))
P_full = np.exp(S_full - S_full.max(axis=1, keepdims=True))
P_full /= P_full.sum(axis=1, keepdims=True)                 # softmax целиком — только для сравнения
worst_P, dV = 0.0, np.zeros_like(Vw)
for i0 in range(0, n_bw, B_bw):
    for j0 in range(0, n_bw, B_bw):
        S_ij = (Qw[i0:i0 + B_bw] @ Kw[j0:j0 + B_bw].T) * np.float32(1 / np.sqrt(d_bw))
        P_ij = np.exp(S_ij - lse[i0:i0 + B_bw, None])      # блок P из одного сохранённого числа на строку
        worst_P = max(worst_P, float(np.abs(P_ij - P_full[i0:i0 + B_bw, j0:j0 + B_bw]).max()))
        dV[j0:j0 + B_bw] += P_ij.T @ dO[i0:i0 + B_bw]
print(f"сохранено для обратного прохода: lse {lse.nbytes:,} байт вместо P {P_full.nbytes:,} байт")
print(f"max|P из lse − softmax| = {worst_P:.1e} (max P = {P_full.max():.2f}); "
      f"max|dV по блокам − Pᵀ dO| = {np.abs(dV - P_full.T @ dO).max():.1e}")

# %% [markdown]
# Блоки $P$, восстановленные из lse, совпадают с softmax до округления float32, и $dV$ собирается по блокам без
# матрицы $n \times n$. Цена — повторное умножение $QK^\top$ в обратном проходе (пересчёт дешевле, чем чтение $P$ из
# HBM). Так устроен обратный проход всех версий FlashAttention.
#
# ## Итог
#
# - $S$ одной головы Qwen3-0.6B при $n = 4096$ — 32 МиБ в bf16 (512 МиБ на 16 голов слоя), и наивный путь гоняет её через HBM
#   несколько раз; интенсивность в 3–4 раза ниже ridge point A100.
# - FlashAttention — это шаг online softmax из урока 04 над блоками $S_{ij}$: $m$ с $-\infty$, маска до max, общий множитель
#   $e^{m_{old} - m_{new}}$ для $\ell$ и $acc$. Матрица $n \times n$ не нужна: пик памяти ≈ выход.
# - Causal-маска позволяет не считать блоки над диагональю: $(N+1)/2N$ блоков, а не половина.
# - FA-2 переставляет циклы (внешний по $Q$), делит один раз и параллелится по блокам строк; на A100 это около 2× к FA-1.
#
# - На CPU время блочной версии решает интерпретатор (число итераций цикла), а не память: по времени она с наивной
#   одного порядка, хотя памяти держит в десятки раз меньше.
# - Пересчёт $acc$ можно пропускать, пока максимум вырос меньше порога (FA-4), а обратному проходу хватает
#   $\mathrm{lse} = m + \log \ell$ на строку.
#
# Дальше: урок 06 — основы CUDA через CuPy; уроки 07–08 — то же ядро на CUDA через CuPy.

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. На CPU мешал интерпретатор: тысячи маленьких вызовов. Что на GPU стоит каждый отдельный вызов (запуск ядра)
#    и сколько таких запусков делает наивная композиция операций CuPy?
# 2. Блок $K_j$ в FA-2 читают все строки блока $Q_i$. Где на GPU держать его, чтобы не читать из HBM много раз?
# 3. Если соседние потоки читают элементы через шаг, а не подряд, что произойдёт с пропускной способностью памяти?
