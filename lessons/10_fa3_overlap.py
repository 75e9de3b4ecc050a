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
# # Урок 10. FlashAttention-3: перекрытие копирования и вычислений, FP8
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# FlashAttention-3 (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao; arXiv 2407.08608, июль 2024, NeurIPS 2024) — это
# FlashAttention-2 с той же математикой (тайлы + online softmax), переписанный под асинхронное железо Hopper (sm90:
# H100/H800/H200; для Blackwell есть уже FlashAttention-4). Три приёма:
#
# 1. **warp specialization**: отдельный producer-варп грузит тайлы K и V через TMA в разделяемую память по **двум отдельным
#    конвейерам — для K и для V** (в выпущенном коде у каждого две стадии: `kStages = 2` в
#    `hopper/flash_fwd_launch_template.h`; V идёт на итерацию позже K) и сообщает о готовности через mbarrier,
#    а consumer-варп-группы в это время считают (варп-группа — четыре соседних варпа, 128 потоков; тайлы K и V в разделяемой памяти
#    общие для всех consumer-варп-групп блока);
# 2. **ping-pong** двух варп-групп: пока одна считает softmax, другая занимает тензорные ядра своими GEMM; плюс
#    **двухстадийное перекрытие softmax и GEMM внутри одной варп-группы**;
# 3. **FP8**: Q, K, V в e4m3 с **поблочным масштабом** и **incoherent processing** (поворот Q и K случайной матрицей Адамара).
#
# Результат на H100 SXM (из статьи): в 1.5–2.0 раза быстрее FA2, до 740 TFLOPS в FP16 (75 % от пиковых 989), в FP8 около
# 1.2 PFLOPS (пик H100 SXM в FP8 без разреженности — 1979 TFLOPS); на hdim 128 без causal-маски 638/646/648 TFLOPS против 368/370/370 у FA2 при длине 4k/8k/16k.
#
# Осторожно с пересказами FA3, в них часто встречается неправда: ping-pong — это не двойная буферизация K/V, а расписание двух
# варп-групп; WGMMA — асинхронная инструкция форм m64nNk16 (в FP8 m64nNk32), она идёт много тактов, а не «64×64×16 за такт»;
# операнд A берётся из регистров или разделяемой памяти, B — из разделяемой памяти; в FP8 все три тензора Q, K, V в e4m3, аккумуляторы
# FP32 (формата «BF32» нет); выигрыш над FA2 — 1.5–2.0x.
#
# GPU у нас нет, поэтому расписание мы изучаем на **модели**: дискретно-событийном симуляторе с виртуальными часами
# (`autograder.lessons.lesson10.fa3sim`). Всё, что оценивается, считается по этим часам и не зависит от скорости вашего компьютера.
#
# В этом уроке вы:
# 1. выведете makespan последовательного цикла и конвейера с кольцом из S ячеек, и поймёте, когда цикл упирается в копирование;
# 2. посчитаете загрузку тензорных ядер по записанным событиям и выведете, что даёт ping-pong;
# 3. напишете программу варп-группы с двухстадийным перекрытием softmax и GEMM и исполните её численно: расписание не меняет O;
# 4. посмотрите на настоящую многопоточную версию на потоках Python (поток загрузки, главный поток счёта, очередь) — показ, без оценки;
# 5. квантуете Q, K, V в FP8 e4m3 поблочно и повернёте Q, K матрицей Адамара; измерите ошибку внимания на данных с выбросами.
#
# Проверки запускаются ячейками «Проверка» или кнопкой **Validate** (баллы — в строке ✓/✗ каждой проверки и в `make test`: окно Validate их не показывает). Каждая проверка выполняется в отдельном процессе.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import queue
import threading
import time

import ml_dtypes
import numpy as np
import matplotlib.pyplot as plt

from autograder import grade
from autograder.lessons.lesson10.fa3sim import (Event, Params, ScheduleError, plot_gantt, plot_traces, run_pingpong,
                               run_sequential, sequential_program, pingpong_programs, simulate)

F8 = ml_dtypes.float8_e4m3fn   # FP8 e4m3 (раздел 7)

# %% [markdown]
# ## 1. Модель: producer, кольцо, варп-группа, тензорные ядра
#
# Один блок потоков (thread block) FA3 обрабатывает тайл строк $Q_i$ и проходит по тайлам $K_j, V_j$, $j = 0..n-1$. В модели:
#
# * **producer (TMA)** грузит тайл $j$ (K и V вместе) за `t_load` в очередную ячейку кольца из `stages` ячеек. Ячейка
#   освобождается, когда закончился GEMM $P_j V_j$, читающий её;
# * **варп-группа** исполняет программу из операций `(op, j)`: `gemm_qk` выпускает $S_j = Q K_j^\top$ на тензорные ядра
#   (асинхронно, как `wgmma`), `wait_qk` ждёт результат, `softmax` считает $P_j$ (занимает варп-группу на `t_softmax`:
#   exp выполняется на медленных special function units), `gemm_pv` выпускает $O \mathrel{+}= P_j V_j$, `wait_pv` ждёт его;
# * **тензорные ядра** — одно устройство: GEMM выполняются по одному, в порядке выпуска, каждый за `t_gemm`.
#
# Упрощения модели: K и V тайла лежат в одной ячейке кольца (в коде FA3 у них отдельные конвейеры, раздел 2);
# перемасштабирование O бесплатно; у каждой варп-группы свой тайл Q и
# своя очередь тайлов. Симулятор записывает каждое событие (`Event`: устройство, вид, тайл, начало, конец) — из них строятся
# диаграммы Ганта. Запустим последовательный цикл: кольцо из одной ячейки, в варп-группе всё по очереди.

# %%
params = Params(n_tiles=5, t_load=2.0, t_gemm=1.0, t_softmax=1.0, stages=1)
trace = run_sequential(params)
for event in trace.events[:6]:
    print(event)
print("makespan:", trace.makespan)
fig = plot_gantt(trace.events, title="последовательный цикл (stages=1)")


# %% [markdown]
# Серые полосы — загрузки, синие и зелёные — два GEMM, оранжевые — softmax. Пока идёт загрузка, тензорные ядра простаивают:
# это «пузыри».
#
# ### Задание 1. `makespan_sequential`
#
# Напишите `makespan_sequential(n_tiles, t_load, t_gemm, t_softmax)` — makespan последовательного цикла
# (загрузка тайла, затем $QK^\top$, softmax и $PV$, потом следующий тайл). Проверка сравнивает ответ с симулятором на
# случайных (но фиксированных seed) наборах параметров.

# %% nbgrader={"grade": false, "grade_id": "makespan_sequential", "locked": false, "schema_version": 3, "solution": true, "task": false}
def makespan_sequential(n_tiles, t_load, t_gemm, t_softmax):
    ### BEGIN SOLUTION
    return n_tiles * (t_load + 2 * t_gemm + t_softmax)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_makespan_sequential", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.makespan_sequential', makespan_sequential)
### BEGIN HIDDEN TESTS
grade('lesson10.makespan_sequential', makespan_sequential, cases=[{'seed': 100, 'count': 40}])
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Кольцо из S ячеек: копирование под вычислениями
#
# С двумя и более ячейками producer грузит тайл $j+1$, пока варп-группа считает тайл $j$. Сравним 1 и 2 ячейки в двух
# режимах: вычисления дольше загрузки и наоборот.

# %%
cases = {
    "stages=1, t_load=2": Params(6, 2.0, 1.0, 1.0, stages=1),
    "stages=2, t_load=2 (упор в вычисления)": Params(6, 2.0, 1.0, 1.0, stages=2),
    "stages=2, t_load=5 (упор в копирование)": Params(6, 5.0, 1.0, 1.0, stages=2),
}
fig = plot_traces({name: run_sequential(p) for name, p in cases.items()})


# %% [markdown]
# ### Задание 2. `makespan_pipelined` и `is_copy_bound`
#
# Обозначим $c = 2\,t_{gemm} + t_{softmax}$ — работа варп-группы над одним тайлом. По диаграммам выведите формулу и напишите:
#
# * `makespan_pipelined(n_tiles, t_load, t_gemm, t_softmax, stages)` — makespan цикла с кольцом из `stages` ячеек
#   (при `stages=1` — то же, что последовательный цикл: ячейку нельзя перезаписать, пока её тайл не досчитан);
# * `is_copy_bound(t_load, t_gemm, t_softmax)` — `True`, если цикл упирается в копирование (каждый лишний тайл удлиняет
#   makespan на `t_load`), `False`, если в вычисления.
#
# Подсказка: первая загрузка и последнее вычисление ни с чем не перекрыты; посередине каждый тайл стоит $\max(t_{load}, c)$.

# %% nbgrader={"grade": false, "grade_id": "makespan_pipelined", "locked": false, "schema_version": 3, "solution": true, "task": false}
def makespan_pipelined(n_tiles, t_load, t_gemm, t_softmax, stages):
    ### BEGIN SOLUTION
    if stages == 1:
        return makespan_sequential(n_tiles, t_load, t_gemm, t_softmax)
    compute = 2 * t_gemm + t_softmax
    return t_load + compute + (n_tiles - 1) * max(t_load, compute)
    ### END SOLUTION


def is_copy_bound(t_load, t_gemm, t_softmax):
    ### BEGIN SOLUTION
    return t_load > 2 * t_gemm + t_softmax
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_makespan_pipelined", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.makespan_pipelined', makespan_pipelined)
### BEGIN HIDDEN TESTS
grade('lesson10.makespan_pipelined', makespan_pipelined, cases=[{'seed': 101, 'count': 60}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_single_stage", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.single_stage', makespan_pipelined)
### BEGIN HIDDEN TESTS
grade('lesson10.single_stage', makespan_pipelined, cases=[{'seed': 102, 'count': 20}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_copy_bound", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.copy_bound', is_copy_bound)
### BEGIN HIDDEN TESTS
grade('lesson10.copy_bound', is_copy_bound, cases=[{'seed': 103, 'count': 40, 'strict': True}])
### END HIDDEN TESTS

# %% [markdown]
# Makespan как функция `t_load` при $c = 3$: до $t_{load} = c$ копирование спрятано, дальше цикл упирается в копирование.
# Точки — симулятор, линия — ваша формула.

# %%
loads = np.linspace(0.25, 8, 32)
simulated = [run_sequential(Params(10, float(t), 1.0, 1.0, stages=2)).makespan for t in loads]
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(loads, [makespan_pipelined(10, t, 1.0, 1.0, 2) for t in loads], label="makespan_pipelined")
ax.plot(loads, simulated, "o", ms=3, label="симулятор")
ax.plot(loads, [makespan_sequential(10, t, 1.0, 1.0) for t in loads], "--", label="без перекрытия")
ax.axvline(3.0, color="gray", lw=0.8)
ax.text(3.1, ax.get_ylim()[1] * 0.9, "t_load = c", fontsize=8)
ax.set_xlabel("t_load"); ax.set_ylabel("makespan, 10 тайлов"); ax.legend(); ax.grid(alpha=0.3)

# %% [markdown]
# Зачем кольцу больше двух ячеек, если при постоянных временах хватает двух? Настоящие загрузки из HBM то быстрее, то
# медленнее. Дадим каждому тайлу своё время загрузки (в среднем вдвое короче вычислений, но с редкими задержками) и
# сравним глубину кольца.

# %%
rng = np.random.default_rng(6)
jittery = tuple(float(t) for t in rng.choice([0.5, 1.0, 1.5, 9.0], size=40, p=[0.3, 0.3, 0.3, 0.1]))
for stages in (1, 2, 3, 4, 6):
    span = run_sequential(Params(40, jittery, 1.0, 1.0, stages)).makespan
    print(f"stages={stages}: makespan {span:6.1f}   (предел по вычислениям {jittery[0] + 40 * 3.0:.1f})")

# %% [markdown]
# В модели чем глубже кольцо, тем больше тайлов producer успевает загрузить впрок, и редкая долгая загрузка прячется за
# уже загруженными тайлами. Но в выпущенном коде FA3 для Hopper стадий две (`kStages = 2`). Почему не больше — посчитаем
# разделяемую память блока на hdim 128 (тайл 128 × 176 без causal-маски, bf16; на H100 блоку доступно до 227 КиБ).

# %%
kib = 1024
q_tile = 128 * 128 * 2 / kib                       # Q_i: 128 строк × d = 128, bf16
kv_stage = 176 * 128 * 2 / kib                     # один тайл K (или V): 176 строк × 128
for stages in (2, 3):
    total = q_tile + 2 * stages * kv_stage         # отдельные конвейеры K и V, по stages стадий
    print(f"stages = {stages}: Q {q_tile:.0f} + K и V {2 * stages * kv_stage:.0f} = {total:.0f} КиБ "
          f"({'помещается' if total <= 227 else 'не помещается'} в 227 КиБ)")

# %% [markdown]
# Третья стадия не помещается. Глубина не единственный способ спрятать загрузку: от простой двойной буферизации FA3
# отличается тем, что K и V идут **отдельными** конвейерами (V нужен только для $P_j V_j$, поэтому его загрузка отстаёт
# от K на итерацию и не задерживает $Q K_j^\top$), а грузит их отдельный producer-варп через TMA и mbarrier: consumer
# не тратит ни инструкций, ни регистров на копирование и только ждёт барьер готовности.
#
# ## 3. Загрузка тензорных ядер и ping-pong
#
# Даже когда копирование спрятано, одна варп-группа не загружает тензорные ядра полностью: пока она считает softmax, ядра
# ждут. Насколько долог softmax? У H100 SXM 989 TFLOPS на матричных умножениях FP16/BF16 и всего 3.9 TFLOPS на special
# functions (exp) — цифры из статьи FA3 (Shah et al., 2024, arXiv:2407.08608, раздел 3). На один элемент $S$ при $d = 128$ приходится $4d = 512$ FLOP в двух GEMM и одна
# экспонента.
#
# **Прогноз.** Какую долю времени двух GEMM занимает softmax (только экспоненты) при $d = 128$? Впишите до расчёта.

# %%
my_guess_softmax_share = None   # ваш прогноз: время exp / время обоих GEMM, например 0.1

# %%
d = 128
gemm_time = 4 * d / 989e12          # два GEMM на один элемент S: 2d + 2d FLOP
exp_time = 1 / 3.9e12               # одна экспонента
print(f"softmax / (оба GEMM) = {exp_time / gemm_time:.2f}")
print(f"значит, t_softmax ≈ {2 * exp_time / gemm_time:.2f} · t_gemm"
      + ("" if my_guess_softmax_share is None else f" (ваш прогноз доли: {my_guess_softmax_share})"))

# %% [markdown]
# То есть $t_{softmax} \approx t_{gemm}$: треть времени итерации одна варп-группа не даёт тензорным ядрам работы.
#
# **Ping-pong**: две варп-группы с разными тайлами Q. Барьер (`sync`/`arrive`, в коде FA3 — именованный барьер блока:
# `bar.sync` с номером барьера) заставляет их выпускать свои GEMM по очереди: пока первая считает softmax, вторая занимает тензорные ядра, и
# наоборот. Сравним одну варп-группу и две.

# %%
p = Params(n_tiles=8, t_load=0.25, t_gemm=1.0, t_softmax=1.0, stages=6)
one = run_pingpong(p, warpgroups=1)
two = run_pingpong(p, warpgroups=2)
fig = plot_traces({"1 варп-группа": one, "2 варп-группы, ping-pong": two})
print(pingpong_programs(2, warpgroups=2)[0])


# %% [markdown]
# ### Задание 3. `tensor_utilisation` и `pingpong_utilisation`
#
# * `tensor_utilisation(events)` — доля makespan, когда тензорные ядра заняты: сумма длительностей событий с
#   `unit == "tensor"`, делённая на makespan = (конец последнего события) − (начало первого события), по **всем** событиям.
# * `pingpong_utilisation(t_gemm, t_softmax, warpgroups)` — та же доля **в установившемся режиме** (длинный цикл, загрузки
#   мгновенные), для `warpgroups` варп-групп в ping-pong. Подсказка: за одну итерацию каждая варп-группа даёт ядрам
#   $2\,t_{gemm}$ работы, а сама не может начать следующую итерацию раньше, чем через $2\,t_{gemm} + t_{softmax}$.

# %% nbgrader={"grade": false, "grade_id": "tensor_utilisation", "locked": false, "schema_version": 3, "solution": true, "task": false}
def tensor_utilisation(events):
    ### BEGIN SOLUTION
    makespan = max(e.end for e in events) - min(e.start for e in events)
    busy = sum(e.end - e.start for e in events if e.unit == "tensor")
    return busy / makespan
    ### END SOLUTION


def pingpong_utilisation(t_gemm, t_softmax, warpgroups):
    ### BEGIN SOLUTION
    return min(1.0, warpgroups * 2 * t_gemm / (2 * t_gemm + t_softmax))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_tensor_utilisation", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.tensor_utilisation', tensor_utilisation)
### BEGIN HIDDEN TESTS
grade('lesson10.tensor_utilisation', tensor_utilisation, cases=[{'schedule': 'pingpong', 'n_tiles': 5, 't_load': 0.5, 't_gemm': 1.5, 't_softmax': 2.0, 'stages': 8, 'warpgroups': 3}, {'schedule': 'sequential', 'n_tiles': 1, 't_load': 1.0, 't_gemm': 1.0, 't_softmax': 0.5, 'stages': 2, 'shift': 3.0}, {'schedule': 'overlap', 'n_tiles': 9, 't_load': 0.25, 't_gemm': 2.0, 't_softmax': 1.0, 'stages': 2}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_pingpong_utilisation", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.pingpong_utilisation', pingpong_utilisation)
### BEGIN HIDDEN TESTS
grade('lesson10.pingpong_utilisation', pingpong_utilisation, cases=[{'t_gemm': 1.0, 't_softmax': 5.0, 'warpgroups': 3}, {'t_gemm': 1.5, 't_softmax': 1.0, 'warpgroups': 3}, {'t_gemm': 1.0, 't_softmax': 0.5, 'warpgroups': 1}, {'t_gemm': 0.5, 't_softmax': 3.0, 'warpgroups': 2}])
### END HIDDEN TESTS

# %%
print(f"1 варп-группа: по событиям {tensor_utilisation(one.events):.0%}, "
      f"в установившемся режиме {pingpong_utilisation(1.0, 1.0, 1):.0%}")
print(f"2 варп-группы: по событиям {tensor_utilisation(two.events):.0%}, "
      f"в установившемся режиме {pingpong_utilisation(1.0, 1.0, 2):.0%}")

# %% [markdown]
# По событиям загрузка чуть ниже установившейся: в начале и в конце цикла ядрам нечего делать. В нашей идеальной модели
# (строгий порядок выпуска, точные времена) две варп-группы чередуются и без барьера — проверьте:
# `run_pingpong(p, 2, barriers=False)`. На настоящем GPU порядок выпуска не гарантирован, поэтому FA3 задаёт его барьером.
#
# ## 4. Двухстадийный конвейер внутри одной варп-группы
#
# Вторая идея FA3: даже одна варп-группа может прятать softmax. GEMM асинхронны: можно выпустить $S_{j} = Q K_{j}^\top$ и
# $O \mathrel{+}= P_{j-1} V_{j-1}$ вместе и считать softmax тайла $j$, пока тензорные ядра заняты $P_{j-1} V_{j-1}$.
# Правила, которые проверяет симулятор (`validate_program`):
#
# 1. у каждого тайла ровно по одной операции `gemm_qk`, `wait_qk`, `softmax`, `gemm_pv`, `wait_pv`; тайлы по порядку;
# 2. `wait_*` — после своего `gemm_*`; результат асинхронного GEMM читают только после `wait`:
#    `softmax j` — после `wait_qk j`, а `gemm_pv j` — после `softmax j`;
# 3. в регистрах помещаются $S/P$ только **двух** тайлов: `gemm_qk` тайла $j+2$ — только после `wait_pv j`.
#
# Последовательная программа (`sequential_program(n)`) этим правилам удовлетворяет:

# %%
print(sequential_program(2))


# %% [markdown]
# ### Задание 4. `overlap_program`
#
# Напишите `overlap_program(n_tiles)` — список операций `(op, j)` одной варп-группы, в котором softmax тайла $j$
# перекрывается с GEMM $P_{j-1} V_{j-1}$. Проверки: программа допустима и её makespan (симулятор, кольцо из 3 ячеек)
# не больше, чем у двухстадийного конвейера FA3.

# %% nbgrader={"grade": false, "grade_id": "overlap_program", "locked": false, "schema_version": 3, "solution": true, "task": false}
def overlap_program(n_tiles):
    ### BEGIN SOLUTION
    program = [("gemm_qk", 0), ("wait_qk", 0), ("softmax", 0)]
    for j in range(1, n_tiles):
        program += [("gemm_qk", j), ("gemm_pv", j - 1), ("wait_qk", j), ("softmax", j), ("wait_pv", j - 1)]
    return program + [("gemm_pv", n_tiles - 1), ("wait_pv", n_tiles - 1)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_overlap_program_valid", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.overlap_program_valid', overlap_program)
### BEGIN HIDDEN TESTS
grade('lesson10.overlap_program_valid', overlap_program, cases=[{'n_tiles': 3}, {'n_tiles': 17}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_overlap_program_makespan", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.overlap_program_makespan', overlap_program)
### BEGIN HIDDEN TESTS
grade('lesson10.overlap_program_makespan', overlap_program, cases=[{'seed': 104, 'count': 20}])
### END HIDDEN TESTS

# %%
p = Params(n_tiles=8, t_load=0.25, t_gemm=1.0, t_softmax=1.0, stages=3)
fig = plot_traces({"последовательно": run_sequential(p), "перекрытие softmax и GEMM": simulate(overlap_program(8), p)})
for stages in (2, 3):
    q = Params(8, 1.0, 1.0, 1.0, stages)
    print(f"t_load=1, stages={stages}: последовательно {run_sequential(q).makespan:g}, "
          f"с перекрытием {simulate(overlap_program(8), q).makespan:g}")


# %% [markdown]
# Последняя строка — наблюдение о модели: с перекрытием варп-группа держит сразу три тайла (у одного идёт $PV$, у другого
# softmax, третий уже нужен для $QK^\top$), поэтому при двух ячейках кольца загрузка снова оказывается на критическом пути.
#
# ## 5. Расписание не меняет математику
#
# Переставляя операции, мы не имеем права изменить результат. Тонкость — в online softmax: в программе с перекрытием
# softmax тайла $j$ (новый максимум $m_j$) может выполниться **раньше**, чем к $O$ добавлен отложенный $P_{j-1} V_{j-1}$,
# посчитанный с максимумом $m_{j-1}$. Поэтому удобно помнить, относительно какого максимума посчитан каждый $P_j$ и сам $O$:
#
# * `softmax j`: $m_j = \max(m, \operatorname{rowmax} S_j)$, $P_j = e^{S_j - m_j}$, $\ell \leftarrow \ell\,e^{m - m_j} + \operatorname{rowsum} P_j$;
# * `gemm_pv j`: $O \leftarrow O\,e^{m_O - m_j} + P_j V_j$, затем $m_O = m_j$;
# * в конце $O / \ell$.
#
# ### Задание 5. `run_program`
#
# Напишите `run_program(Q, K, V, program, Bc=64)`: исполните программу численно в float32 для всех строк `Q` сразу
# (тайл $j$ — строки `K[j*Bc:(j+1)*Bc]` и `V[j*Bc:(j+1)*Bc]`, последний может быть короче). Обрабатываются ровно те тайлы,
# что есть в программе (так FA3 пропускает тайлы, например под causal-маской); `wait_*`, `sync`, `arrive` численно ничего
# не делают. Верните $O$ формы `(n_q, d)` float32. Проверка сравнивает $O$ с эталоном float64 для разных программ: последовательной,
# FA3-перекрытия, порядка «softmax раньше отложенного $PV$», ping-pong и программ по части тайлов.

# %% nbgrader={"grade": false, "grade_id": "run_program", "locked": false, "schema_version": 3, "solution": true, "task": false}
def run_program(Q, K, V, program, Bc=64):
    ### BEGIN SOLUTION
    n, d = Q.shape
    scale = np.float32(1 / np.sqrt(d))
    m = np.full(n, -np.inf, np.float32)           # текущий максимум строк
    l = np.zeros(n, np.float32)                    # сумма экспонент относительно m
    O = np.zeros((n, V.shape[1]), np.float32)
    m_O = np.full(n, -np.inf, np.float32)          # максимум, относительно которого посчитан O
    S, P = {}, {}
    for op, j in program:
        rows = slice(j * Bc, (j + 1) * Bc)
        if op == "gemm_qk":
            S[j] = (Q @ K[rows].T) * scale
        elif op == "softmax":
            s = S.pop(j)
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, None])
            l = l * np.exp(m - m_new) + p.sum(axis=1)
            P[j] = (p, m_new)
            m = m_new
        elif op == "gemm_pv":
            p, m_p = P.pop(j)
            O = O * np.exp(m_O - m_p)[:, None] + p @ V[rows]
            m_O = m_p
    return O / l[:, None]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_program_math", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.program_math', run_program)
### BEGIN HIDDEN TESTS
grade('lesson10.program_math', run_program, cases=[{'program': 'overlap', 'n_q': 33, 'n_k': 300, 'd': 24, 'Bc': 64, 'seed': 105}, {'program': 'sequential', 'n_q': 8, 'n_k': 64, 'd': 16, 'Bc': 64, 'seed': 106}, {'program': 'overlap', 'n_q': 16, 'n_k': 256, 'd': 32, 'Bc': 32, 'seed': 107, 'scale': 30.0}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_program_math_any_order", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.program_math_any_order', run_program)
### BEGIN HIDDEN TESTS
grade('lesson10.program_math_any_order', run_program, cases=[{'program': 'softmax_first', 'n_q': 20, 'n_k': 250, 'd': 16, 'Bc': 40, 'seed': 108}, {'program': 'softmax_first', 'n_q': 12, 'n_k': 512, 'd': 32, 'Bc': 64, 'seed': 109, 'tiles': [1, 2, 5, 7]}, {'program': 'pingpong', 'n_q': 16, 'n_k': 256, 'd': 64, 'Bc': 64, 'seed': 110, 'tiles': [3]}])
### END HIDDEN TESTS

# %%
rng = np.random.default_rng(0)
Q, K, V = (rng.standard_normal((n, 64), dtype=np.float32) for n in (32, 512, 512))
S = Q.astype(np.float64) @ K.T.astype(np.float64) / 8.0
reference = np.exp(S - S.max(1, keepdims=True)) @ V / np.exp(S - S.max(1, keepdims=True)).sum(1, keepdims=True)
for name, program in {"последовательно": sequential_program(8), "с перекрытием": overlap_program(8),
                      "ping-pong (WG0)": pingpong_programs(8)[0]}.items():
    print(f"{name:>16}: макс. отличие от float64 {np.abs(run_program(Q, K, V, program) - reference).max():.1e}")


# %% [markdown]
# ## 6. Настоящие потоки Python: загрузка и вычисления параллельно (показ, без оценки)
#
# Тот же конвейер можно собрать из **потоков Python** (`threading.Thread`, потоки операционной системы; с потоками CUDA
# из уроков 06–09 у них общее только слово): поток Python загрузки кладёт тайлы в ограниченную очередь
# (`queue.Queue(maxsize=2)` играет роль кольца), главный поток Python их считает. Задержку копирования изображает `time.sleep` (он, как и матричные
# операции NumPy, отпускает GIL). Время здесь настенное, поэтому цифры зависят от загрузки машины и **не оцениваются**.

# %%
def threaded_attention(Q, K, V, Bc, copy_latency, compute_latency, overlap):
    t0 = time.perf_counter()
    events = []
    n_tiles = K.shape[0] // Bc

    def load(j):
        start = time.perf_counter() - t0
        time.sleep(copy_latency)                                    # «HBM -> shared memory»
        tile = K[j * Bc:(j + 1) * Bc].copy(), V[j * Bc:(j + 1) * Bc].copy()
        events.append(Event("поток Python: загрузка", "load", j, 0, start, time.perf_counter() - t0))
        return tile

    m = np.full(Q.shape[0], -np.inf, np.float32); l = np.zeros(Q.shape[0], np.float32)
    O = np.zeros_like(Q)
    tiles = queue.Queue(maxsize=2)
    if overlap:
        loader = threading.Thread(target=lambda: [tiles.put((j, *load(j))) for j in range(n_tiles)])
        loader.start()
    for j in range(n_tiles):
        _, Kj, Vj = tiles.get() if overlap else (j, *load(j))
        start = time.perf_counter() - t0
        s = Q @ Kj.T / np.float32(np.sqrt(Q.shape[1]))
        m_new = np.maximum(m, s.max(1)); p = np.exp(s - m_new[:, None]); alpha = np.exp(m - m_new)
        l = l * alpha + p.sum(1); O = O * alpha[:, None] + p @ Vj; m = m_new
        time.sleep(compute_latency)                                 # «WGMMA»
        events.append(Event("поток Python: счёт", "compute", j, 0, start, time.perf_counter() - t0))
    if overlap:
        loader.join()
    return O / l[:, None], events


rng = np.random.default_rng(1)
Q, K, V = (rng.standard_normal((n, 64), dtype=np.float32) for n in (64, 8 * 64, 8 * 64))
S = Q.astype(np.float64) @ K.T.astype(np.float64) / 8.0
expected = np.exp(S - S.max(1, keepdims=True)) @ V / np.exp(S - S.max(1, keepdims=True)).sum(1, keepdims=True)
runs = {}
for overlap in (False, True):
    O, events = threaded_attention(Q, K, V, 64, copy_latency=0.02, compute_latency=0.015, overlap=overlap)
    runs["с потоком Python для загрузки" if overlap else "последовательно"] = events
    print(f"overlap={overlap}: {max(e.end for e in events) * 1e3:.0f} мс, "
          f"макс. отличие O от float64 {np.abs(O - expected).max():.1e}")
print(f"модель: последовательно {makespan_sequential(8, 20, 7.5, 0) :.0f} мс, "
      f"конвейер {makespan_pipelined(8, 20, 7.5, 0, 2):.0f} мс")
fig, axes = plt.subplots(2, 1, figsize=(10, 3.6), sharex=True)
for ax, (name, events) in zip(axes, runs.items()):
    plot_gantt(events, ax=ax, title=name, xlabel="секунды (настенные часы)")

# %% [markdown]
# Измеренные времена близки к предсказанию вашей формулы (вычисление блока здесь $c = 15$ мс: `t_gemm=7.5`, `t_softmax=0`),
# но каждый запуск даёт немного другие числа — именно поэтому оценивается только виртуальное время симулятора.
#
# ## 7. FP8: e4m3, поблочный масштаб и incoherent processing
#
# В FP8-режиме FA3 Q, K и V хранятся в формате **e4m3** (4 бита порядка, 3 бита мантиссы; `float8_e4m3fn` в `ml_dtypes`),
# GEMM накапливают в FP32, выход — BF16. Посмотрим на формат:

# %%
info = ml_dtypes.finfo(F8)
print(f"максимум {float(info.max):g}, наименьшее нормальное {float(info.smallest_normal):g}, "
      f"наименьшее субнормальное {float(info.smallest_subnormal):g}, шаг у 1: {float(info.eps):g}")
print(np.array([0.1, 1.0, 1.07, 300.0, 448.0, 470.0], np.float32).astype(F8))


# %% [markdown]
# При приведении через ml_dtypes значения больше ~464 превращаются в NaN (бесконечности у `e4m3fn` нет); аппаратное
# приведение Hopper (`cvt.rn.satfinite.e4m3x2.f32`) насыщает их до ±448 — без NaN, но с ошибкой. Поэтому перед приведением тензор делят на масштаб
# $s = \operatorname{amax}/448$. Один масштаб на весь тензор (per-tensor) выглядит так:

# %%
def quantize_per_tensor(x):
    amax = float(np.abs(x).max())
    scale = np.float32(amax / 448) if amax > 0 else np.float32(1.0)
    return (x / scale).astype(F8), scale


def dequantize(xq, scales, block=None):
    # scales: число (per-tensor) или массив по одному на блок из block строк
    scales = np.asarray(scales, np.float32).reshape(-1)
    rows = np.repeat(scales, block)[:xq.shape[0], None] if block else scales
    return xq.astype(np.float32) * rows


# %% [markdown]
# ### Задание 6. `quantize_per_block`
#
# FA3 масштабирует поблочно: свой масштаб для каждого тайла строк (блока $Q_i$ или $K_j$, $V_j$). Напишите
# `quantize_per_block(x, block)`: `x` — (n, d) float32; блок $b$ — строки `[b*block, (b+1)*block)` (последний может быть короче).
# Верните `(x_q, scales)`: `x_q` — (n, d) `float8_e4m3fn`, `scales` — массив из `ceil(n / block)` чисел,
# `scales[b] = amax_b / 448` (для блока из одних нулей — 1.0), `x_q` блока $b$ = `(x_b / scales[b]).astype(F8)`.

# %% nbgrader={"grade": false, "grade_id": "quantize_per_block", "locked": false, "schema_version": 3, "solution": true, "task": false}
def quantize_per_block(x, block):
    ### BEGIN SOLUTION
    n_blocks = -(-x.shape[0] // block)
    scales = np.ones(n_blocks, np.float32)
    xq = np.empty(x.shape, F8)
    for b in range(n_blocks):
        rows = slice(b * block, (b + 1) * block)
        amax = np.abs(x[rows]).max()
        if amax > 0:
            scales[b] = amax / 448
        xq[rows] = (x[rows] / scales[b]).astype(F8)
    return xq, scales
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_quantize_per_block", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.quantize_per_block', quantize_per_block)
### BEGIN HIDDEN TESTS
grade('lesson10.quantize_per_block', quantize_per_block, cases=[{'n': 333, 'd': 48, 'block': 128, 'seed': 111}, {'n': 64, 'd': 16, 'block': 16, 'seed': 112, 'zero_block': 3, 'low': 0.0001, 'high': 10000.0}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_block_beats_tensor", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.block_beats_tensor', quantize_per_block)
### BEGIN HIDDEN TESTS
grade('lesson10.block_beats_tensor', quantize_per_block, cases=[{'n': 300, 'd': 32, 'block': 50, 'seed': 113, 'low': 0.5, 'high': 2.0, 'outlier_block': 4, 'outlier': 50000.0}])
### END HIDDEN TESTS

# %% [markdown]
# Когда поблочный масштаб важен? У e4m3 около 15 двоичных порядков нормальных чисел, поэтому разброс «в 100 раз» ему не
# страшен. Но если один блок строк (например, токен с «массивными активациями») в десятки тысяч раз больше остальных, при
# одном масштабе обычные строки уходят в субнормальные числа и теряют точность:

# %%
rng = np.random.default_rng(2)
x = rng.standard_normal((512, 128), dtype=np.float32)
x[128:256] *= 3e4                                  # один блок-выброс
xq, s = quantize_per_tensor(x)
tensor_err = np.linalg.norm(dequantize(xq, s)[:128] - x[:128]) / np.linalg.norm(x[:128])
xq, s = quantize_per_block(x, 128)
block_err = np.linalg.norm(dequantize(xq, s, 128)[:128] - x[:128]) / np.linalg.norm(x[:128])
print(f"относительная ошибка обычного блока: один масштаб {tensor_err:.3f}, масштаб на блок {block_err:.3f}")


# %% [markdown]
# ### Задание 7. `random_hadamard` и `incoherent_qk`
#
# Другой источник ошибки — **выбросы внутри векторов**: если у $q$ и $k$ большой элемент в одной координате, скалярное
# произведение почти целиком состоит из одного слагаемого, и относительная ошибка FP8 (~$2^{-4}$) этого слагаемого целиком
# переходит в $S$. **Incoherent processing** поворачивает Q и K одной ортогональной матрицей $H$: $(QH)(KH)^\top = Q H H^\top K^\top
# = QK^\top$, а выброс «размазывается» по всем $d$ координатам, и ошибки слагаемых частично гасят друг друга.
# FA3 берёт случайную матрицу Адамара: её умножение стоит $O(d \log d)$.
#
# * `random_hadamard(d, seed)` — матрица $\frac{1}{\sqrt d} H_d \operatorname{diag}(\pm 1)$: $H_1 = [1]$,
#   $H_{2k} = \begin{bmatrix} H_k & H_k \\ H_k & -H_k \end{bmatrix}$ (Сильвестр, $d$ — степень двойки), знаки столбцов — из
#   `np.random.default_rng(seed)`. Она ортогональна: $H H^\top = I$.
# * `incoherent_qk(Q, K, seed)` — пара $(QH, KH)$ с одной и той же $H$.

# %% nbgrader={"grade": false, "grade_id": "random_hadamard", "locked": false, "schema_version": 3, "solution": true, "task": false}
def random_hadamard(d, seed):
    ### BEGIN SOLUTION
    H = np.ones((1, 1))
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=d)
    return H * signs / np.sqrt(d)
    ### END SOLUTION


def incoherent_qk(Q, K, seed):
    ### BEGIN SOLUTION
    H = random_hadamard(Q.shape[1], seed)
    return Q @ H, K @ H
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_lesson10_hadamard", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.hadamard', random_hadamard)
### BEGIN HIDDEN TESTS
grade('lesson10.hadamard', random_hadamard, cases=[{'d': 2, 'seed': 114}, {'d': 64, 'seed': 115}, {'d': 256, 'seed': 116}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson10_qk_unchanged", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson10.qk_unchanged', incoherent_qk)
### BEGIN HIDDEN TESTS
grade('lesson10.qk_unchanged', incoherent_qk, cases=[{'n': 100, 'd': 64, 'seed': 117}, {'n': 32, 'd': 256, 'seed': 118, 'outlier': 100.0}])
### END HIDDEN TESTS

# %% [markdown]
# ## 8. Измеряем: ошибка FP8-внимания на данных с выбросами
#
# Повторим эксперимент статьи FA3 (arXiv:2407.08608, раздел 4.3 о численной ошибке): элементы Q, K, V берутся из $\mathcal N(0, 1)$, а у 0.1 %
# элементов добавляется $\mathcal N(0, 100)$ (выброс со стандартным отклонением 10). Сравниваем выход внимания с эталоном
# float64 по RMSE. FP8 моделируем так: Q, K, V квантуются в e4m3 и деквантуются, дальше всё в float32 (как FP32-аккумуляторы;
# $P$ оставляем в float32, чтобы видеть только ошибку Q, K, V). Статья сообщает RMSE 2.4e-2 для базового FP8 (один масштаб на
# тензор) и 9.1e-3 для FA3 (поблочно + Адамар): в 2.6 раза меньше.
#
# **Прогноз.** Во сколько раз ошибка базового FP8 (масштаб на тензор) больше ошибки варианта FA3 на наших данных
# ($n = 4096$)? Совпадёт ли со статьёй?

# %%
def outlier_inputs(n, d, seed):
    rng = np.random.default_rng(seed)
    def one():
        return rng.standard_normal((n, d)) + rng.standard_normal((n, d)) * 10 * (rng.random((n, d)) < 0.001)
    return one(), one(), one()


def attention32(Q, K, V):
    S = (Q @ K.T) / np.float32(np.sqrt(Q.shape[1]))
    P = np.exp(S - S.max(1, keepdims=True))
    return (P @ V) / P.sum(1, keepdims=True)


def fp8_error(Q, K, V, reference, per_block, hadamard_seed, block=128):
    Q, K, V = (a.astype(np.float32) for a in (Q, K, V))
    if hadamard_seed is not None:
        Q, K = incoherent_qk(Q, K, hadamard_seed)
        Q, K = Q.astype(np.float32), K.astype(np.float32)
    if per_block:
        Q, K, V = (dequantize(*quantize_per_block(a, block), block) for a in (Q, K, V))
    else:
        Q, K, V = (dequantize(*quantize_per_tensor(a)) for a in (Q, K, V))
    return float(np.sqrt(np.mean((attention32(Q, K, V) - reference) ** 2)))


my_guess_fp8_gain = None   # ваш прогноз: RMSE базового FP8 / RMSE варианта FA3

Q, K, V = outlier_inputs(4096, 128, seed=7)
reference = attention32(Q, K, V)             # float64: входы из outlier_inputs — float64
errors = {(block, had): fp8_error(Q, K, V, reference, block, 5 if had else None)
          for block in (False, True) for had in (False, True)}
for (block, had), error in errors.items():
    label = ("масштаб на блок" if block else "масштаб на тензор") + (" + Адамар" if had else "")
    print(f"{label:<24} RMSE {error:.2e}")
print(f"базовый FP8 / FA3: {errors[False, False] / errors[True, True]:.2f}x  (в статье 2.6x)"
      + ("" if my_guess_fp8_gain is None else f"; ваш прогноз: {my_guess_fp8_gain}x"))

# %% [markdown]
# Что мы измерили (n = 4096, d = 128, seed 7): направление то же, что в статье, RMSE FA3-варианта (~9e-3) почти
# совпадает со статьёй, а выигрыш меньше 2.6x. Выигрыш растёт с $n$: тот же код при $n = 4096$ (seed 0–3, d = 128)
# даёт 2.01–2.27x, а при $n = 8192$ — 2.53–2.87x, как в статье (`python benchmarks/fp8_error_cpu.py`, результаты —
# `benchmarks/results/fp8_error_cpu.json` в репозитории курса). Поставьте `outlier_inputs(8192, ...)` и проверьте сами
# (нужно несколько ГБ памяти и минута-другая). Почти весь выигрыш даёт поворот Адамара; поблочный масштаб поверх него
# здесь не помогает: с Адамаром масштаб на блок то чуть лучше, то чуть хуже масштаба на тензор (в строках выше
# 8.80e-3 против 8.24e-3) — выбросы редкие и по одному, а диапазона e4m3 хватает.
#
# ## Итог
#
# - Последовательный цикл стоит $n(t_{load} + c)$; кольцо из $S \ge 2$ ячеек — $t_{load} + c + (n-1)\max(t_{load}, c)$,
#   где $c = 2t_{gemm} + t_{softmax}$; одна ячейка ничего не перекрывает. Глубокое кольцо прячет неровные загрузки, но
#   код FA3 на Hopper обходится двумя стадиями (больше не помещается в разделяемую память) с отдельными конвейерами K и V.
# - Одна варп-группа загружает тензорные ядра на $2t_{gemm}/(2t_{gemm} + t_{softmax})$ (≈ 67 % при $t_{softmax} \approx t_{gemm}$
#   на H100); ping-pong двух варп-групп — до 100 %; двухстадийный конвейер прячет softmax и внутри одной варп-группы.
# - Порядок операций не меняет результат, если помнить, относительно какого максимума посчитаны $P_j$ и $O$.
# - FP8 e4m3: масштаб на блок защищает от блоков-выбросов, поворот Адамара (не меняющий $QK^\top$) — от выбросов в координатах.
#
#
# ## Что дальше в настоящих ядрах
#
# **FlashAttention-4** (Blackwell, B200/GB200; Zadouri, Hoehnerbach, Shah, Liu, Thakkar, Dao — статья
# «FlashAttention-4: Algorithm and Kernel Pipelining Co-Design for Asymmetric Hardware Scaling», PDF `assets/fa4_paper.pdf`
# в репозитории Dao-AILab/flash-attention, и пост Together AI). Тензорные ядра Blackwell вдвое быстрее, а SFU и разделяемая
# память — нет, поэтому узким местом прямого прохода становится `exp`, а обратного — трафик разделяемой памяти. Ответы статьи:
# новые конвейеры под полностью асинхронный MMA и большие тайлы; `exp`, частично вычисляемый многочленом на FMA-блоках
# вместо SFU; перемасштабирование $acc$ только при заметном росте максимума (урок 05, раздел 11); tensor memory и режим
# 2-CTA MMA в обратном проходе. По аннотации — до 1.3× быстрее cuDNN 9.13 и до 2.7× быстрее Triton на B200 в BF16.
#
# **Библиотеки ядер, где живут приёмы модуля** (по их README и статьям):
# - **Liger-Kernel** (LinkedIn; выпуск — август 2024, технический отчёт arXiv 2410.10989, октябрь 2024): ядра на Triton
#   для обучения — RMSNorm, RoPE, SwiGLU, CrossEntropy и FusedLinearCrossEntropy, то есть слияние из уроков 02–03.
# - **FlashInfer** (flashinfer-ai/flashinfer; Ye и др., «FlashInfer: Efficient and Customizable Attention Engine for LLM
#   Inference Serving», arXiv 2501.01005, январь 2025, MLSys 2025): ядра attention для сервинга — страничный и «рваный» KV-кэш, шаблоны FA2 и FA3, разбиение
#   работы на этапе plan, варианты attention через JIT; его используют SGLang и vLLM.
# - **FlashMLA** (DeepSeek, 2025; deepseek-ai/FlashMLA): сначала ядро декода для MLA (Multi-head Latent Attention) на
#   Hopper со страничным KV-кэшем (блок 64); README первой версии — до 3000 ГБ/с в memory-bound и 580 TFLOPS в
#   compute-bound конфигурации на H800 SXM5. Позже — разреженные ядра DeepSeek Sparse Attention и ядра для Blackwell.
#
# Дальше — урок 11: flash-decoding, то есть attention одного нового токена по длинному KV-кэшу (split-KV и страничный кэш).

# %% [markdown]
# ## Вопросы к следующему уроку
#
# 1. На декоде у запроса одна строка Q. Сколько тайлов $Q_i$ (а значит, блоков потоков) получит FA-2 и сколько из 132 SM H200 они займут при
#    16 головах и батче 1?
# 2. Если разрезать длинный KV-кэш на части и считать каждую на своём SM, что нужно сохранить от каждой части, чтобы
#    потом точно сложить результаты? (Подсказка: урок 05, раздел 12.)
# 3. Декод читает весь KV-кэш ради одной строки: где он на roofline урока 01 — слева или справа от излома?
