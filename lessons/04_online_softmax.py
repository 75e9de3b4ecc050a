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
# # Урок 04. Online softmax: softmax по кускам
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# FlashAttention (урок 05) не хранит матрицу скоров $S$ целиком: строка скоров приходит блоками по $B_c$ чисел,
# и после каждого блока от неё остаются только три величины. Этот урок — про эти три величины. В нём вы:
# 1. выведете, почему softmax можно считать по частям (сдвиг на любую константу не меняет результат);
# 2. напишете состояние $(m, \ell, acc)$, шаг обновления и финализацию;
# 3. проверите себя на разобранном примере (8 скоров, блоки по 4, ответ 4.8055);
# 4. убедитесь, что результат не зависит от размера и порядка блоков, от полностью замаскированных блоков и логитов порядка $10^4$;
# 5. научитесь склеивать два частичных состояния (`merge_states`) — основа split-KV и flash-decoding.
#
# Проверки запускаются ячейками «Проверка» или кнопкой **Validate** (баллы — в строке ✓/✗ каждой проверки и в `make test`: окно Validate их не показывает). Каждая проверка выполняется в отдельном процессе.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
import matplotlib.pyplot as plt

from autograder import grade

# %% [markdown]
# ## 1. Что нужно посчитать
#
# Для одной строки запроса со скорами $s_1, \dots, s_n$ и векторами значений $v_1, \dots, v_n \in \mathbb{R}^d$ результат внимания —
# взвешенное среднее
#
# $$o = \sum_j \operatorname{softmax}(s)_j \, v_j = \frac{\sum_j e^{s_j - c}\, v_j}{\sum_j e^{s_j - c}} .$$
#
# Вторая запись верна для **любого** конечного $c$: множитель $e^{-c}$ стоит и в числителе, и в знаменателе и сокращается.
# Обычно берут $c = \max_j s_j$, чтобы все экспоненты были $\le 1$ и ничего не переполнялось. Проверим оба утверждения.

# %%
s = np.array([2.0, 4.0, 1.0, 3.0, 0.0, 5.0, 2.0, 1.0])
v = np.arange(1.0, 9.0)

def weighted_average(s, v, c):
    w = np.exp(s - c)
    return (w @ v) / w.sum()

for c in (0.0, 5.0, -3.0, 100.0):
    print(f"c = {c:6.1f}: o = {weighted_average(s, v, c):.6f}")

with np.errstate(over="ignore", invalid="ignore"):
    big = s + 1000.0                       # те же скоры, сдвинутые на 1000: softmax не изменился
    print("без вычитания максимума:", weighted_average(big, v, 0.0))   # exp(1000) = inf, inf/inf = nan
    print("с вычитанием максимума: ", weighted_average(big, v, big.max()))

# %% [markdown]
# Значит, вычитать можно любое $m$, лишь бы числитель и знаменатель были посчитаны **относительно одного и того же** $m$.
# Если по ходу дела $m$ меняется, уже накопленные суммы надо пересчитать — домножить на константу.
#
# ## 2. Инвариант $(m, \ell, acc)$
#
# Разобьём скоры на блоки $B_1, B_2, \dots$. После обработки первых $t$ блоков храним три величины:
#
# $$m_t = \max_{j \in B_1 \cup \dots \cup B_t} s_j, \qquad
# \ell_t = \sum_{j \in B_1 \cup \dots \cup B_t} e^{s_j - m_t}, \qquad
# acc_t = \sum_{j \in B_1 \cup \dots \cup B_t} e^{s_j - m_t}\, v_j .$$
#
# **Инвариант:** $acc_t / \ell_t$ — это в точности softmax-среднее по первым $t$ блокам.
#
# **База** ($t = 0$, пустая сумма): $m = -\infty$, $\ell = 0$, $acc = 0$. Именно $-\infty$, а не 0: максимум пустого множества
# меньше любого скора. С $m = 0$ строка, у которой все скоры порядка $-10^4$, даст $e^{s - 0} = 0$ для всех $s$, $\ell = 0$ и $0/0$.
#
# **Шаг** (пришёл блок $B$ со скорами $s_B$ и значениями $v_B$):
#
# $$m_{new} = \max(m, \max s_B), \qquad c = e^{\,m - m_{new}} \le 1,$$
# $$\ell_{new} = \ell \cdot c + \sum_{j \in B} e^{s_j - m_{new}}, \qquad
# acc_{new} = acc \cdot c + \sum_{j \in B} e^{s_j - m_{new}}\, v_j .$$
#
# Почему $c$ именно такой: старые слагаемые были посчитаны относительно $m$, а нужны относительно $m_{new}$, и
# $e^{s - m_{new}} = e^{s - m} \cdot e^{m - m_{new}}$. На первом блоке $c = e^{-\infty} = 0$ — пустые суммы просто обнуляются.
# И $\ell$, и $acc$ домножаются **одним и тем же** $c$.
#
# **Финализация:** $o = acc / \ell$ — одно деление в самом конце.
#
# ### Две эквивалентные формы шага для $\ell$
#
# Сумму блока можно считать и от его собственного максимума $m_B = \max s_B$: $r_B = \sum_{j \in B} e^{s_j - m_B}$. Тогда
#
# $$\ell_{new} = \ell \cdot e^{\,m - m_{new}} + r_B \cdot e^{\,m_B - m_{new}},$$
#
# потому что $e^{s - m_{new}} = e^{s - m_B}\, e^{m_B - m_{new}}$. Обе формы считают одну экспоненту на элемент; вторая добавляет
# по одной на строку и блок ($e^{m_B - m_{new}}$) и умножение суммы блока, зато удобна, когда блоки считают независимо, а
# склеивают потом (раздел 6). Убедимся, что они совпадают:

# %%
m_old, l_old = 4.0, np.exp(s[:4] - 4.0).sum()        # состояние после первого блока
block = s[4:]
m_new = max(m_old, block.max())
form_1 = l_old * np.exp(m_old - m_new) + np.exp(block - m_new).sum()
m_block = block.max()
form_2 = l_old * np.exp(m_old - m_new) + np.exp(block - m_block).sum() * np.exp(m_block - m_new)
print(f"форма 1: {form_1:.10f}\nформа 2: {form_2:.10f}")


# %% [markdown]
# ## 3. Разобранный пример: 8 скоров, блоки по 4
#
# $n = 8$, $d = 1$, $v = [1, 2, \dots, 8]$. Строка 0: $s = [2, 4, 1, 3 \mid 0, 5, 2, 1]$; строка 1: $s = [7, 1, 2, 0 \mid 3, 2, 1, 0]$.
# Посчитаем шаги «вручную» (прямо по формулам, без ваших функций) и сверим с обычным softmax.
#
# **Прогноз.** В строке 0 максимум первого блока — 4, второго — 5. На какой множитель $c$ умножатся старые $\ell$ и $acc$
# во втором блоке?

# %%
my_guess_c = None   # ваш прогноз: множитель c во втором блоке строки 0

# %%
def by_hand(s, v, size=4):
    m, l, acc = -np.inf, 0.0, 0.0
    for start in range(0, len(s), size):
        sb, vb = s[start:start + size], v[start:start + size]
        m_new = max(m, sb.max())
        c = np.exp(m - m_new)
        p = np.exp(sb - m_new)
        print(f"  блок {start // size + 1}: m {m:>4} -> {m_new:g}, c = {c:.6f}, "
              f"l·c = {l * c:.5f}, acc·c = {acc * c:.5f}, "
              f"Σp = {p.sum():.5f}, Σp·v = {p @ vb:.5f}")
        l, acc, m = l * c + p.sum(), acc * c + p @ vb, m_new
        print(f"           l = {l:.5f}, acc = {acc:.5f}")
    return acc / l

rows = {0: np.array([2, 4, 1, 3, 0, 5, 2, 1.0]), 1: np.array([7, 1, 2, 0, 3, 2, 1, 0.0])}
for row, scores in rows.items():
    print(f"строка {row}:")
    o = by_hand(scores, v)
    exact = np.exp(scores - scores.max()) @ v / np.exp(scores - scores.max()).sum()
    print(f"  o = acc / l = {o:.5f}; обычный softmax: {exact:.5f}\n")
print(f"c во втором блоке строки 0: e^(4 − 5) = {np.exp(-1.0):.6f}"
      + ("" if my_guess_c is None else f" (ваш прогноз: {my_guess_c})"))


# %% [markdown]
# Строка 0: после первого блока $m = 4$, $\ell = 1.55300$, $acc = 3.75621$. Во втором блоке максимум вырос до 5, $c = e^{-1} = 0.367879$,
# старые суммы становятся $0.57132$ и $1.38183$, к ним прибавляются $1.07484$ и $6.52872$: $\ell = 1.64616$, $acc = 7.91056$, и
# $o = 7.91056 / 1.64616 = 4.80547$. В строке 1 максимум 7 найден в первом же блоке, во втором блоке $c = 1$, ответ $1.14144$.
#
# ## 4. Задание: состояние, шаг, финализация
#
# Состояние — кортеж `(m, l, acc)` для **одной** строки запроса: `m` и `l` — числа (float), `acc` — массив формы `(d,)`.
# Входы — float64.
# - `online_softmax_init(d)` — пустое состояние $(-\infty, 0, \text{нули}(d))$;
# - `online_softmax_update(state, s_block, v_block)` — `s_block` формы `(B,)`, `v_block` формы `(B, d)`; вернуть **новое** состояние;
# - `online_softmax_finalize(state)` — массив `(d,)`: $acc / \ell$.
#
# Ловушка: блок, в котором **все** скоры $-\infty$ (полностью замаскированный), пока $m = -\infty$. Тогда $m_{new} = -\infty$ и
# $e^{m - m_{new}} = e^{-\infty + \infty} = e^{\text{nan}}$. Пока максимум равен $-\infty$, прибавлять нечего: верните состояние без изменений.
#
# В уроке 05 то же самое делается сразу для $B_r$ строк: `m` и `l` станут векторами длины $B_r$, `acc` — матрицей $(B_r, d)$.

# %% nbgrader={"grade": false, "grade_id": "online_softmax_init", "locked": false, "schema_version": 3, "solution": true, "task": false}
def online_softmax_init(d):
    ### BEGIN SOLUTION
    return -np.inf, 0.0, np.zeros(d)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "online_softmax_update", "locked": false, "schema_version": 3, "solution": true, "task": false}
def online_softmax_update(state, s_block, v_block):
    ### BEGIN SOLUTION
    m, l, acc = state
    m_new = max(m, float(np.max(s_block)))
    if m_new == -np.inf:            # пока все скоры −inf, прибавлять нечего
        return m, l, acc
    c = np.exp(m - m_new)           # на первом блоке exp(−inf) = 0
    p = np.exp(s_block - m_new)     # замаскированные скоры дают exp(−inf) = 0
    return m_new, l * c + p.sum(), acc * c + p @ v_block
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "online_softmax_finalize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def online_softmax_finalize(state):
    ### BEGIN SOLUTION
    m, l, acc = state
    return acc / l
    ### END SOLUTION


# %% [markdown]
# Самопроверка на строке 0 разобранного примера (не оценивается): должно получиться 4.80547.

# %%
state = online_softmax_init(1)
values = np.arange(1.0, 9.0).reshape(8, 1)
for start in (0, 4):
    state = online_softmax_update(state, rows[0][start:start + 4], values[start:start + 4])
    print(f"после блока {start // 4 + 1}: m = {state[0]:g}, l = {state[1]:.5f}, acc = {state[2]}")
print("o =", online_softmax_finalize(state))

# %% [markdown]
# ### Проверки
# Каждая ячейка ниже — отдельная проверка со своими баллами.

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_init", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.init', online_softmax_init)
### BEGIN HIDDEN TESTS
grade('lesson04.init', online_softmax_init, cases=[{'d': 1}, {'d': 17}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_worked_example", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.worked_example', online_softmax_init, online_softmax_update, online_softmax_finalize)

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_update_step", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.update_step', online_softmax_update)
### BEGIN HIDDEN TESTS
grade('lesson04.update_step', online_softmax_update, cases=[{'seed': 100, 'd': 7}, {'seed': 101, 'd': 1}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_block_sizes", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.block_sizes', online_softmax_init, online_softmax_update, online_softmax_finalize)
### BEGIN HIDDEN TESTS
grade('lesson04.block_sizes', online_softmax_init, online_softmax_update, online_softmax_finalize, cases=[{'seed': 102, 'trials': 40}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_block_order", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.block_order', online_softmax_init, online_softmax_update, online_softmax_finalize)
### BEGIN HIDDEN TESTS
grade('lesson04.block_order', online_softmax_init, online_softmax_update, online_softmax_finalize, cases=[{'seed': 103, 'trials': 30}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_masked_blocks", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.masked_blocks', online_softmax_init, online_softmax_update, online_softmax_finalize)
### BEGIN HIDDEN TESTS
grade('lesson04.masked_blocks', online_softmax_init, online_softmax_update, online_softmax_finalize, cases=[{'seed': 104, 'd': 5}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_huge_logits", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.huge_logits', online_softmax_init, online_softmax_update, online_softmax_finalize)
### BEGIN HIDDEN TESTS
grade('lesson04.huge_logits', online_softmax_init, online_softmax_update, online_softmax_finalize, cases=[{'seed': 105, 'd': 2, 'n': 17, 'block': 5}])
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Как меняется состояние: график
#
# Возьмём строку из 64 скоров и подадим её вашим функциям блоками по 8. После каждого блока нарисуем $m$, $\ell$ и
# текущий ответ $acc / \ell$ (softmax-среднее по увиденным блокам). Пунктир — ответ обычного softmax по всей строке.
#
# **Прогноз.** Скоры растут к концу строки (плюс шум). На скольких из 8 блоков максимум $m$ вырастет (считая первый)?

# %%
my_guess_max_updates = None   # ваш прогноз: число блоков, на которых m растёт

# %%
rng = np.random.default_rng(7)
n, size = 64, 8
row_scores = np.linspace(-2.0, 3.0, n) + rng.standard_normal(n)   # максимум чаще растёт ближе к концу
row_values = rng.standard_normal((n, 1))

state = online_softmax_init(1)
history = []
for start in range(0, n, size):
    state = online_softmax_update(state, row_scores[start:start + size], row_values[start:start + size])
    history.append((state[0], state[1], online_softmax_finalize(state)[0]))
m_hist, l_hist, o_hist = map(np.array, zip(*history))
exact = (np.exp(row_scores - row_scores.max()) @ row_values[:, 0]) / np.exp(row_scores - row_scores.max()).sum()

blocks = np.arange(1, len(history) + 1)
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
axes[0].step(blocks, m_hist, where="mid", marker="o"); axes[0].set_title("m: максимум увиденных скоров")
axes[1].plot(blocks, l_hist, marker="o"); axes[1].set_title("ℓ: сумма exp(s − m)")
axes[2].plot(blocks, o_hist, marker="o", label="acc / ℓ после блока")
axes[2].axhline(exact, color="gray", linestyle="--", label="softmax по всей строке")
axes[2].set_title("текущий ответ"); axes[2].legend(fontsize=8)
for ax in axes:
    ax.set_xlabel("обработано блоков"); ax.grid(alpha=0.3)
fig.tight_layout()


# %%
updates = int(np.sum(np.diff(np.concatenate([[-np.inf], m_hist])) > 0))
print(f"m вырос на {updates} блоках из {len(m_hist)}" + ("" if my_guess_max_updates is None else f" (ваш прогноз: {my_guess_max_updates})"))

# %% [markdown]
# Когда максимум растёт, $\ell$ может **уменьшиться**: старые слагаемые домножаются на $e^{m_{old} - m_{new}} < 1$.
# После последнего блока текущий ответ совпадает с обычным softmax.
#
# ## 6. Склейка двух частичных состояний: `merge_states`
#
# Инвариант не говорит, в каком порядке и кем обработаны блоки. Значит, строку можно разрезать на части, посчитать
# состояние каждой части **независимо** (на разных SM GPU, в разных потоках) и склеить. Так устроены split-KV и
# flash-decoding: при декодировании один запрос и длинный KV-кэш, и параллелить приходится по длине кэша.
#
# Для частей $a$ и $b$: $m = \max(m_a, m_b)$, и обе приводятся к общему максимуму:
# $$\ell = \ell_a e^{m_a - m} + \ell_b e^{m_b - m}, \qquad acc = acc_a e^{m_a - m} + acc_b e^{m_b - m} .$$
# Это та же вторая форма шага из раздела 2, только «блок» — целая часть. Часть может быть пустой (все её скоры замаскированы):
# её состояние $(-\infty, 0, 0)$, и склейка двух пустых частей должна дать пустое состояние, а не NaN.
#
# Напишите `merge_states(a, b)`.

# %% nbgrader={"grade": false, "grade_id": "merge_states", "locked": false, "schema_version": 3, "solution": true, "task": false}
def merge_states(a, b):
    ### BEGIN SOLUTION
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    m = max(m_a, m_b)
    if m == -np.inf:                # обе части пустые
        return m, 0.0, np.zeros_like(acc_a)
    c_a, c_b = np.exp(m_a - m), np.exp(m_b - m)
    return m, l_a * c_a + l_b * c_b, acc_a * c_a + acc_b * c_b
    ### END SOLUTION


# %%
# строка 0 примера: левая половина и правая половина по отдельности, потом склейка
left = online_softmax_update(online_softmax_init(1), rows[0][:4], values[:4])
right = online_softmax_update(online_softmax_init(1), rows[0][4:], values[4:])
print("merge:", online_softmax_finalize(merge_states(left, right)), "— должно быть 4.80547")

# %% nbgrader={"grade": true, "grade_id": "test_lesson04_merge", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson04.merge', online_softmax_init, online_softmax_update, merge_states)
### BEGIN HIDDEN TESTS
grade('lesson04.merge', online_softmax_init, online_softmax_update, merge_states, cases=[{'seed': 106, 'trials': 20}])
### END HIDDEN TESTS

# %% [markdown]
# ## Итог
#
# - softmax-среднее не зависит от вычитаемой константы, поэтому максимум можно уточнять по ходу, пересчитывая суммы
#   множителем $e^{m_{old} - m_{new}} \le 1$.
# - Состояние $(m, \ell, acc)$ после любого набора блоков — это максимум, сумма экспонент и ненормированный числитель;
#   старт $(-\infty, 0, 0)$, одно деление $acc / \ell$ в конце.
# - Размер и порядок блоков не важны, замаскированные блоки ничего не меняют, логиты $\pm 10^4$ не переполняются.
# - Частичные состояния склеиваются — на этом держатся split-KV и flash-decoding.
#
# В уроке 05 вы примените этот шаг к блокам $S = Q K^\top / \sqrt{d}$ сразу для $B_r$ строк — это и есть FlashAttention.

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. Матрица $S = Q K^\top / \sqrt{d}$ одной головы при $n = 4096$: сколько МиБ она займёт в float32, и какую её часть
#    нужно держать одновременно, если строки обрабатываются шагом этого урока по блокам?
# 2. Два вложенных цикла — по блокам $Q$ и по блокам $K, V$. Какой из них сделать внешним, чтобы каждая строка $O$
#    записывалась один раз?
# 3. Блок $K_j$ целиком над диагональю causal-маски: что он изменит в $(m, \ell, acc)$, и нужно ли его считать?
