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
# # Урок 11. Декод: flash-decoding над страничным KV-кэшем с GQA
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# {{COLAB_BADGE}}
#
# Часть 1–4 — NumPy, GPU не нужен. Часть 5 — ядро CUDA: без GPU оно компилируется (NVRTC) и проверяется на эмуляторе
# GPU (урок 06, раздел 7); только проверка скорости требует GPU — без него она пишет «нужен GPU» (0 баллов), запустить
# её можно в Colab по ссылке выше (*Среда выполнения → Сменить среду выполнения → GPU*). Баллы — в строке ✓/✗ каждой
# ячейки «Проверка» и в `make test` (там же — итог NumPy-части отдельно); окно Validate их не показывает.
#
# Все уроки внимания до сих пор были про префилл (prefill): n запросов против n ключей. В сервинге большинство вызовов
# внимания — **декод**: один новый токен каждой последовательности против длинного KV-кэша. Кэш лежит
# **страницами** (PagedAttention в vLLM), а голов K/V меньше, чем голов запроса (GQA: у Qwen3-0.6B 16 голов запроса
# и 8 голов K/V). Вы:
# 1. посчитаете байты и FLOP одного токена декода и увидите, что с GQA и своим KV-кэшем у каждой последовательности
#    он упирается в память при любом батче;
# 2. выведете частичное состояние softmax в форме (o, lse) из (m, l, acc) урока 04 и напишете `merge_partials`;
# 3. напишете `paged_decode` — декод по таблице страниц (block table) с GQA и разбиением контекста (split-KV);
# 4. посчитаете, сколько блоков CUDA запускает декод при разном батче, и увидите по замерам на H200, зачем делить контекст;
# 5. перенесёте `paged_decode` на GPU: ядро split и ядро combine.
#
# Здесь — ответы на три вопроса конца урока 10: где декод на roofline (раздел 1), что сохранить от каждой части
# KV-кэша, чтобы точно сложить результаты (раздел 2: пара (o, lse)), и сколько блоков получает декод при батче 1
# (раздел 4).

# %%
# {{COURSE_INSTALL}}

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import json
import math
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt
from autograder import grade
from autograder.gpu.runtime import choose_cupy, gpu_status
cp = choose_cupy()   # CuPy на GPU, без GPU — эмулятор GPU с тем же API; строка ниже говорит, что выбрано

# %% [markdown]
# ## 1. Roofline декода: сколько байт на один токен
#
# Шаг декода одной последовательности длины L в одном слое: новый токен даёт Hq векторов запроса q (длины d),
# и каждая голова запроса проходит по **всем** L ключам и значениям своей головы K/V:
# - FLOP: $q \cdot K^\top$ — $2Ld$ (умножение и сложение) на голову запроса, $p \cdot V$ — ещё $2Ld$; голов $H_q$;
# - байты: прочитать K и V всех $H_{kv}$ голов кэша — $2 \cdot L \cdot H_{kv} \cdot d$ элементов (q и выход — $H_q d$
#   элементов, на фоне $2 L H_{kv} d$ ими можно пренебречь).
#
# Напишите `decode_traffic(L, Hq, Hkv, d, bytes_per_element)` → `(kv_bytes, flops)` для одной последовательности,
# одного слоя, одного нового токена.

# %% nbgrader={"grade": false, "grade_id": "decode_traffic", "locked": false, "schema_version": 3, "solution": true, "task": false}
def decode_traffic(L, Hq, Hkv, d, bytes_per_element):
    ### BEGIN SOLUTION
    kv_bytes = 2 * L * Hkv * d * bytes_per_element
    flops = 4 * L * Hq * d
    return kv_bytes, flops
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_traffic", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.traffic', decode_traffic)
### BEGIN HIDDEN TESTS
grade('lesson11.traffic', decode_traffic, cases=[{'L': 8192, 'Hq': 64, 'Hkv': 8, 'd': 128, 'bytes_per_element': 2}, {'L': 77, 'Hq': 6, 'Hkv': 2, 'd': 96, 'bytes_per_element': 1}])
### END HIDDEN TESTS

# %% [markdown]
# **Предскажите, потом посчитайте.** Интенсивность декода (FLOP на байт) для Qwen3-0.6B (Hq = 16, Hkv = 8,
# d = 128) в bf16 при L = 4096. Во сколько раз она ниже ridge point H200 по bf16 (урок 01)? Запишите свой прогноз.

# %%
my_guess_intensity = None   # ваш прогноз, FLOP/байт (не оценивается)

# %%
kv_bytes, flops = decode_traffic(4096, 16, 8, 128, 2)
intensity = flops / kv_bytes
ridge_h200 = 989e12 / 4.8e12   # bf16 dense 989 TFLOP/s, HBM3e 4.8 TB/s (спецификации NVIDIA H100/H200)
print(f"по формуле {intensity:g} FLOP/Б = G = Hq / Hkv = {16 // 8}"
      + ("" if my_guess_intensity is None else f"; ваш прогноз {my_guess_intensity:g}"))
print(f"ridge point H200 (bf16): {ridge_h200:.0f} FLOP/Б; ridge point / интенсивность декода = {ridge_h200 / intensity:.0f}")
for G in (1, 2, 4, 8):
    kv, fl = decode_traffic(4096, 8 * G, 8, 128, 2)
    print(f"G = {G}: интенсивность {fl / kv:g} FLOP/Б")
print(f"KV, который читает один шаг декода одного слоя при L = 4096 (одна последовательность): "
      f"{kv_bytes / 2**20:.0f} МиБ; за 28 слоёв Qwen3-0.6B — "
      f"{28 * kv_bytes / 2**20:.0f} МиБ, т. е. не меньше {28 * kv_bytes / 4.8e12 * 1e6:.0f} мкс на токен при 4.8 ТБ/с")
kv_fp32, flops_fp32 = decode_traffic(4096, 16, 8, 128, 4)
print(f"тот же шаг в fp32 (ядро раздела 5 и проверки): {kv_fp32 / 2**20:.0f} МиБ KV, "
      f"интенсивность {flops_fp32 / kv_fp32:g} FLOP/Б = G / 2")

# %% [markdown]
# Интенсивность равна $\frac{4 L H_q d}{2 L H_{kv} d \cdot 2} = H_q / H_{kv} = G$ в bf16 — и **не зависит от L**.
#
# **Какие байты считаем.** В этом разделе KV-кэш — bf16, 2 байта на элемент, как в сервинге: интенсивность G.
# NumPy-версия раздела 3, ядро раздела 5 и проверка его скорости работают в **fp32**, 4 байта на элемент: байт KV
# вдвое больше, интенсивность — G/2 (последняя строка вывода). Сравнивая свои замеры с этим разделом, делите на 4
# байта, а не на 2.
#
# **Что меняет батч и чего не меняет.** В батче из B последовательностей у каждой свой кэш: байты KV растут в B раз,
# FLOP тоже в B раз, интенсивность внимания остаётся G. Батч помогает линейным слоям (веса читаются один раз на
# весь батч, их интенсивность растёт с B), но не вниманию декода, пока у каждой последовательности свой KV: его
# интенсивность остаётся около G FLOP/Б при любом батче, и оно ограничено памятью. Поднимает её только то, что делит
# один прочитанный KV между несколькими строками запроса:
# - **общий префикс**, прочитанный один раз на весь батч (cascade inference в FlashInfer: блог
#   flashinfer.ai/2024/02/02/cascade-inference.html и статья arXiv 2501.01005) — интенсивность на префиксе растёт в B раз;
# - **MLA** (DeepSeek): один латентный KV на все головы запроса, G порядка сотни — ядро декода FlashMLA в одной из
#   конфигураций упирается уже в вычисления (урок 10);
# - **несколько токенов запроса за шаг** (спекулятивный декод): интенсивность растёт во столько раз, сколько строк Q.
#
# В этом уроке — обычный декод с GQA, и его скорость меряют в байтах в секунду — долей пропускной способности памяти,
# как RMSNorm в уроке 07, а не в TFLOP/s.

# %% [markdown]
# ## 2. Частичный результат: (o, lse) вместо (m, l, acc)
#
# В уроке 04 состояние online softmax по части ключей — $(m, \ell, acc)$: $m = \max s_j$, $\ell = \sum e^{s_j - m}$,
# $acc = \sum e^{s_j - m} v_j$. Когда часть посчитана до конца, из него выходят два числа, которые и хранят ядра:
# - $o = acc / \ell$ — softmax-среднее V по этой части (нормированный ответ части);
# - $\mathrm{lse} = m + \log \ell = \log \sum_j e^{s_j}$ — log-sum-exp скоров части.
#
# Из $(o, \mathrm{lse})$ состояние восстанавливается с точностью до выбора опорного максимума: $\ell\, e^{m} = e^{\mathrm{lse}}$,
# $acc\, e^{m} = e^{\mathrm{lse}} o$. Поэтому слияние S частей одних и тех же запросов:
# $$\mathrm{lse} = \log \sum_s e^{\mathrm{lse}_s}, \qquad o = \sum_s e^{\mathrm{lse}_s - \mathrm{lse}}\, o_s.$$
# Веса $e^{\mathrm{lse}_s - \mathrm{lse}}$ в сумме дают 1 — это `merge_states` урока 04 после деления на $\ell$.
#
# Почему ядра пишут lse, а не (m, ℓ): одно число вместо двух на строку, выход части — уже готовый ответ (часть из
# одного куска не нужно сливать), а $\mathrm{lse}$ — ровно то, что нужно и для слияния, и для обратного прохода
# FlashAttention. Считать $e^{\mathrm{lse}_s}$ напрямую нельзя: в float32 оно переполняется при $\mathrm{lse}_s > 88.7$
# ($\ln(3.4 \cdot 10^{38})$), при $\mathrm{lse}_s < -87.3$ уходит в субнормальные числа (а `__expf` на GPU сбрасывает их
# в ноль) и ниже $-103.3$ становится нулём — вычтите $\max_s \mathrm{lse}_s$, как $m$ в уроке 04. Пустая часть (ни одного ключа)
# — $o = 0$, $\mathrm{lse} = -\infty$: её вес $e^{-\infty} = 0$. Если пусты все части, ответ $o = 0$, $\mathrm{lse} = -\infty$
# (а не NaN от $e^{-\infty - (-\infty)}$).
#
# Напишите `merge_partials(o_parts, lse_parts)`: `o_parts` (S, ..., d) float32, `lse_parts` (S, ...) float32;
# вернуть `(o, lse)` формы (..., d) и (...), float32.

# %% nbgrader={"grade": false, "grade_id": "merge_partials", "locked": false, "schema_version": 3, "solution": true, "task": false}
def merge_partials(o_parts, lse_parts):
    ### BEGIN SOLUTION
    m = lse_parts.max(axis=0)
    m_safe = np.where(np.isfinite(m), m, np.float32(0))     # all parts empty: any finite reference
    w = np.exp(lse_parts - m_safe)                           # exp(-inf) = 0 for empty parts
    total = w.sum(axis=0)
    o = (w[..., None] * o_parts).sum(axis=0) / np.where(total > 0, total, np.float32(1))[..., None]
    with np.errstate(divide="ignore"):
        lse = m_safe + np.log(total)                         # log 0 = -inf when every part is empty
    return o.astype(np.float32), lse.astype(np.float32)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_merge", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.merge', merge_partials)
### BEGIN HIDDEN TESTS
grade('lesson11.merge', merge_partials, cases=[{'S': 7, 'B': 2, 'H': 3, 'd': 5, 'seed': 100}, {'S': 1, 'B': 4, 'H': 2, 'd': 16, 'seed': 101}])
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Страничный KV-кэш: пул страниц и таблица страниц (block table)
#
# Выделять каждой последовательности непрерывный кусок памяти на максимальную длину расточительно: длина заранее
# неизвестна. vLLM (PagedAttention) хранит кэш **страницами** по `page_size` позиций:
# - `k_pages`, `v_pages` — общий **пул** страниц формы (P, page_size, Hkv, d) (так кэш лежит у бэкенда FlashAttention
#   в vLLM и у `flash_attn_with_kvcache`; собственное ядро PagedAttention в vLLM ставит в странице головы перед позициями);
# - **таблица страниц (block table)** `block_table` (B, max_pages): позиция t последовательности b лежит в странице
#   `block_table[b, t // page_size]`, в слоте `t % page_size`;
# - `lengths[b]` ≥ 1 — сколько позиций у последовательности b (вместе с K/V нового токена).
#
# Страницы выдаются из пула в любом порядке, поэтому соседние страницы последовательности в пуле не соседи. Одна
# страница может стоять в таблицах **двух** последовательностей — общий префикс промпта (системный промпт) хранится
# один раз. Слоты последней страницы после `lengths[b]` и записи таблицы после последней страницы содержат что угодно:
# освобождённые страницы с NaN и inf от прошлых запросов. Их читать нельзя — ни одно такое значение не должно
# попасть в результат (а `0 · NaN = NaN`, так что «умножить на маску» не спасает).

# %%
def plot_block_table(table, lengths, page_size, P):
    """One picture: the rows of a block table, the pool below, arrows from logical pages to pool pages."""
    B = len(lengths)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.9 * B))
    used = {}
    for b in range(B):
        n_pages = -(-lengths[b] // page_size)
        for j in range(table.shape[1]):
            live = j < n_pages
            fill = min(page_size, lengths[b] - j * page_size) if live else 0
            ax.add_patch(plt.Rectangle((j, B - b), 0.9, 0.8, color="tab:blue" if live else "0.85"))
            ax.text(j + 0.45, B - b + 0.4, f"{table[b, j]}" + (f"\n{fill}/{page_size}" if live and fill < page_size else ""),
                    ha="center", va="center", fontsize=8, color="white" if live else "0.4")
            if live:
                used.setdefault(int(table[b, j]), []).append(b)
                ax.annotate("", xy=(table[b, j] * 0.5 + 0.2, -0.2), xytext=(j + 0.45, B - b),
                            arrowprops=dict(arrowstyle="->", color="tab:blue", alpha=0.3))
        ax.text(-0.3, B - b + 0.4, f"посл. {b}, L={lengths[b]}", ha="right", va="center", fontsize=9)
    for p in range(P):
        shared = len(used.get(p, [])) > 1
        color = "tab:orange" if shared else ("tab:blue" if p in used else "0.85")
        ax.add_patch(plt.Rectangle((p * 0.5, -1.0), 0.45, 0.7, color=color))
    ax.text(-0.3, -0.65, "пул страниц", ha="right", va="center", fontsize=9)
    ax.set_xlim(-3.5, max(table.shape[1], P * 0.5) + 0.5)
    ax.set_ylim(-1.3, B + 1)
    ax.axis("off")
    ax.set_title("таблица страниц: номер страницы пула; серые — устаревшие записи; оранжевая — общая страница")
    return fig


demo_table = np.array([[7, 2, 11, 4], [7, 9, 0, 5]])
plot_block_table(demo_table, lengths=[37, 20], page_size=16, P=12)
plt.show()

# %% [markdown]
# На рисунке page_size = 16: последовательность 0 длины 37 занимает три страницы (последняя заполнена на 5 из 16),
# последовательность 1 длины 20 — две, и её первая страница 7 — та же, что у последовательности 0 (общий префикс
# из 16 токенов). Серые записи таблицы указывают на чужие или освобождённые страницы.
#
# ### Разбиение контекста (split-KV)
#
# Страницы последовательности b — это её `pages = ceil(lengths[b] / page_size)` страниц (а не вся ширина таблицы:
# записи после них устаревшие). Они режутся на `num_splits` **групп подряд** по `ceil(pages / num_splits)` страниц
# (последние группы могут оказаться пустыми). Каждая группа — отдельная часть: по её страницам online softmax
# (урок 04) даёт $(o_s, \mathrm{lse}_s)$ для каждой головы запроса, затем части сливаются `merge_partials`. Результат
# от `num_splits` не зависит. На GPU каждая группа — отдельный блок CUDA (раздел 4).
#
# ### Задание: `paged_decode`
#
# ```
# paged_decode(q, k_pages, v_pages, block_table, lengths, num_splits=1) -> out (B, Hq, d) float32
# ```
# - `q` (B, Hq, d) float32 — один новый запрос на последовательность; масштаб 1/√d;
# - голова запроса h читает голову K/V `h // (Hq // Hkv)` (GQA: G = Hq / Hkv соседних голов запроса делят голову K/V);
# - позиции 0 … `lengths[b] − 1` включительно (K/V нового токена уже записаны в кэш);
# - устаревшие слоты и записи таблицы не читаются; входы не меняются;
# - **память:** никогда не копируйте K или V последовательности целиком (`k_pages[block_table[b]]`, `np.concatenate`):
#   читайте страницу за страницей — `k_pages[p, :used, kv]` — это вид (view), а не копия, — и ведите online softmax
#   по страницам внутри группы.

# %% nbgrader={"grade": false, "grade_id": "paged_decode", "locked": false, "schema_version": 3, "solution": true, "task": false}
def paged_decode(q, k_pages, v_pages, block_table, lengths, num_splits=1):
    ### BEGIN SOLUTION
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    G = Hq // Hkv
    scale = np.float32(1 / math.sqrt(d))
    out = np.empty((B, Hq, d), dtype=np.float32)
    for b in range(B):
        n = int(lengths[b])
        n_pages = -(-n // page_size)
        per = -(-n_pages // num_splits)
        o_parts = np.zeros((num_splits, Hq, d), dtype=np.float32)
        lse_parts = np.full((num_splits, Hq), -np.inf, dtype=np.float32)
        for s in range(num_splits):
            for kv in range(Hkv):
                heads = slice(kv * G, (kv + 1) * G)          # the G query heads of this KV head
                qg = q[b, heads] * scale
                m = np.full(G, -np.inf, dtype=np.float32)
                l = np.zeros(G, dtype=np.float32)
                acc = np.zeros((G, d), dtype=np.float32)
                for j in range(s * per, min((s + 1) * per, n_pages)):
                    page = block_table[b, j]
                    used = min(page_size, n - j * page_size)   # slots past the end are stale
                    k = k_pages[page, :used, kv]                # (used, d): a view, not a copy
                    v = v_pages[page, :used, kv]
                    scores = qg @ k.T                           # (G, used)
                    m_new = np.maximum(m, scores.max(axis=1))
                    c = np.exp(m - m_new)
                    p = np.exp(scores - m_new[:, None])
                    l = l * c + p.sum(axis=1)
                    acc = acc * c[:, None] + p @ v
                    m = m_new
                if l[0] > 0:                                    # an empty group stays (0, -inf)
                    o_parts[s, heads] = acc / l[:, None]
                    lse_parts[s, heads] = m + np.log(l)
        out[b] = merge_partials(o_parts, lse_parts)[0]
    return out
    ### END SOLUTION

# %% [markdown]
# Быстрая самопроверка на рисунке выше (не оценивается): сравнение с прямым softmax по собранным позициям.

# %%
rng = np.random.default_rng(0)
P_demo, ps_demo, Hkv_demo, Hq_demo, d_demo = 12, 16, 2, 4, 8
k_demo = rng.standard_normal((P_demo, ps_demo, Hkv_demo, d_demo), dtype=np.float32)
v_demo = rng.standard_normal((P_demo, ps_demo, Hkv_demo, d_demo), dtype=np.float32)
q_demo = rng.standard_normal((2, Hq_demo, d_demo), dtype=np.float32)
lengths_demo = np.array([37, 20], dtype=np.int32)
k_demo[demo_table[0, 2], 5:] = np.nan                     # устаревшие слоты последней страницы
got = paged_decode(q_demo, k_demo, v_demo, demo_table, lengths_demo, num_splits=2)
for b in range(2):
    t = np.arange(lengths_demo[b])
    K = k_demo[demo_table[b, t // ps_demo], t % ps_demo]    # здесь копия допустима: это эталон
    V = v_demo[demo_table[b, t // ps_demo], t % ps_demo]
    for h in range(Hq_demo):
        s = K[:, h // 2] @ q_demo[b, h] / np.sqrt(d_demo)
        p = np.exp(s - s.max())
        print(f"b={b}, h={h}: отклонение {np.abs(got[b, h] - p @ V[:, h // 2] / p.sum()).max():.1e}")

# %% [markdown]
# ### Проверки `paged_decode`
#
# Эталон — float64. Случаи: B до 8; G = 1, 2, 8; страницы по 1, 16 и 5 позиций; длины 1, кратная размеру страницы
# и на одну больше; перемешанный пул; страница, общая для двух последовательностей; NaN и inf в устаревших слотах
# и страницах; `num_splits` = 1, 3 и больше числа страниц (пустые группы); большие логиты. Проверка памяти измеряет пик
# `tracemalloc` при длине 5000: он должен быть намного меньше K и V одной головы.

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.equivalence', paged_decode)
### BEGIN HIDDEN TESTS
grade('lesson11.equivalence', paged_decode, cases=[{'B': 8, 'Hq': 8, 'Hkv': 4, 'd': 16, 'page_size': 16, 'lengths': [1, 16, 17, 32, 33, 5, 48, 100], 'seed': 110, 'shared': True}, {'B': 2, 'Hq': 16, 'Hkv': 2, 'd': 8, 'page_size': 7, 'lengths': [14, 15], 'seed': 111}, {'B': 3, 'Hq': 3, 'Hkv': 3, 'd': 4, 'page_size': 1, 'lengths': [1, 2, 6], 'seed': 112, 'shared': True}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_splits", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.splits', paged_decode)
### BEGIN HIDDEN TESTS
grade('lesson11.splits', paged_decode, cases=[{'B': 4, 'Hq': 8, 'Hkv': 1, 'd': 16, 'page_size': 5, 'lengths': [50, 1, 26, 25], 'seed': 120, 'shared': True, 'num_splits': [1, 4, 11, 30]}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_large_logits", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.large_logits', paged_decode)
### BEGIN HIDDEN TESTS
grade('lesson11.large_logits', paged_decode, cases=[{'B': 3, 'Hq': 8, 'Hkv': 4, 'd': 16, 'page_size': 16, 'lengths': [33, 1, 70], 'seed': 130, 'q_scale': 100.0, 'num_splits': [2, 7]}, {'B': 2, 'Hq': 2, 'Hkv': 2, 'd': 128, 'page_size': 5, 'lengths': [21, 9], 'seed': 131, 'keys_away': True, 'num_splits': [1, 4]}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.memory', paged_decode)
### BEGIN HIDDEN TESTS
grade('lesson11.memory', paged_decode, cases=[{'B': 2, 'Hq': 2, 'Hkv': 1, 'd': 32, 'page_size': 16, 'lengths': [6000, 7], 'seed': 140}])
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Сколько блоков запускает декод, и зачем делить контекст
#
# Простейшее ядро декода — один **блок** на пару (последовательность, голова K/V): блок читает все страницы своей
# головы и обслуживает все G голов запроса. Таких блоков B · Hkv. У H200 132 SM, и чтобы держать память занятой,
# на каждом SM должно работать несколько блоков одновременно. Split-KV делит контекст на `num_splits` групп: блоков
# становится B · Hkv · num_splits, а слияние частей — маленькое второе ядро (combine).
#
# **Предскажите, потом посмотрите на замер.** При B = 1 (Hkv = 8) без разбиения запущено 8 блоков на 132 SM. Какую
# долю пропускной способности памяти H200 получит такое ядро при L = 32768? Запишите прогноз.

# %%
# Замер из benchmarks/results/decode_kernels_h200.json (округлено до 3 знаков; tests/test_lesson11_flash_decoding.py сверяет)
BENCH_DECODE_H200 = {'device': 'NVIDIA H200',
 'sm_count': 132,
 'date': '2026-12-05T14:32:33+00:00',
 'command': 'python benchmarks/decode_kernels.py --out /root/out/decode_kernels_h200.json',
 'versions': {'python': '3.12.3', 'numpy': '2.5.2', 'cupy': '14.2.0', 'torch': '2.11.0+cu130'},
 'copy_bandwidth_Bps': 4250000000000.0,
 'rows': [{'B': 1,
           'L': 1024,
           'kv_bytes': 8388608,
           'num_splits': 8,
           'kernel_share': 0.0364,
           'gather_sdpa_fp32_x_floor': 130.0,
           'sdpa_contiguous_fp32_share': 0.011,
           'gather_sdpa_bf16_x_floor': 108.0,
           'sdpa_contiguous_bf16_share': 0.0251,
           'speedup_vs_gather_sdpa_fp32': 4.73},
          {'B': 1,
           'L': 4096,
           'kv_bytes': 33554432,
           'num_splits': 32,
           'kernel_share': 0.162,
           'gather_sdpa_fp32_x_floor': 31.8,
           'sdpa_contiguous_fp32_share': 0.0437,
           'gather_sdpa_bf16_x_floor': 28.7,
           'sdpa_contiguous_bf16_share': 0.0994,
           'speedup_vs_gather_sdpa_fp32': 5.15},
          {'B': 1,
           'L': 8192,
           'kv_bytes': 67108864,
           'num_splits': 64,
           'kernel_share': 0.327,
           'gather_sdpa_fp32_x_floor': 16.6,
           'sdpa_contiguous_fp32_share': 0.0756,
           'gather_sdpa_bf16_x_floor': 14.0,
           'sdpa_contiguous_bf16_share': 0.227,
           'speedup_vs_gather_sdpa_fp32': 5.42},
          {'B': 1,
           'L': 32768,
           'kv_bytes': 268435456,
           'num_splits': 66,
           'kernel_share': 0.814,
           'gather_sdpa_fp32_x_floor': 13.8,
           'sdpa_contiguous_fp32_share': 0.0885,
           'gather_sdpa_bf16_x_floor': 3.91,
           'sdpa_contiguous_bf16_share': 0.693,
           'speedup_vs_gather_sdpa_fp32': 11.2},
          {'B': 8,
           'L': 1024,
           'kv_bytes': 67108864,
           'num_splits': 8,
           'kernel_share': 0.327,
           'gather_sdpa_fp32_x_floor': 20.1,
           'sdpa_contiguous_fp32_share': 0.076,
           'gather_sdpa_bf16_x_floor': 26.1,
           'sdpa_contiguous_bf16_share': 0.182,
           'speedup_vs_gather_sdpa_fp32': 6.58},
          {'B': 8,
           'L': 4096,
           'kv_bytes': 268435456,
           'num_splits': 8,
           'kernel_share': 0.835,
           'gather_sdpa_fp32_x_floor': 14.0,
           'sdpa_contiguous_fp32_share': 0.0903,
           'gather_sdpa_bf16_x_floor': 3.81,
           'sdpa_contiguous_bf16_share': 0.659,
           'speedup_vs_gather_sdpa_fp32': 11.7},
          {'B': 8,
           'L': 8192,
           'kv_bytes': 536870912,
           'num_splits': 8,
           'kernel_share': 0.918,
           'gather_sdpa_fp32_x_floor': 14.4,
           'sdpa_contiguous_fp32_share': 0.0877,
           'gather_sdpa_bf16_x_floor': 3.56,
           'sdpa_contiguous_bf16_share': 0.851,
           'speedup_vs_gather_sdpa_fp32': 13.2},
          {'B': 8,
           'L': 32768,
           'kv_bytes': 2147483648,
           'num_splits': 8,
           'kernel_share': 0.994,
           'gather_sdpa_fp32_x_floor': 14.2,
           'sdpa_contiguous_fp32_share': 0.0902,
           'gather_sdpa_bf16_x_floor': 3.4,
           'sdpa_contiguous_bf16_share': 0.997,
           'speedup_vs_gather_sdpa_fp32': 14.1},
          {'B': 64,
           'L': 1024,
           'kv_bytes': 536870912,
           'num_splits': 1,
           'kernel_share': 0.849,
           'gather_sdpa_fp32_x_floor': 14.4,
           'sdpa_contiguous_fp32_share': 0.0876,
           'gather_sdpa_bf16_x_floor': 3.52,
           'sdpa_contiguous_bf16_share': 0.86,
           'speedup_vs_gather_sdpa_fp32': 12.2},
          {'B': 64,
           'L': 4096,
           'kv_bytes': 2147483648,
           'num_splits': 1,
           'kernel_share': 0.998,
           'gather_sdpa_fp32_x_floor': 14.1,
           'sdpa_contiguous_fp32_share': 0.0908,
           'gather_sdpa_bf16_x_floor': 3.34,
           'sdpa_contiguous_bf16_share': 0.995,
           'speedup_vs_gather_sdpa_fp32': 14.1},
          {'B': 64,
           'L': 8192,
           'kv_bytes': 4294967296,
           'num_splits': 1,
           'kernel_share': 1.01,
           'gather_sdpa_fp32_x_floor': 14.1,
           'sdpa_contiguous_fp32_share': 0.0911,
           'gather_sdpa_bf16_x_floor': 3.27,
           'sdpa_contiguous_bf16_share': 1.02,
           'speedup_vs_gather_sdpa_fp32': 14.2},
          {'B': 64,
           'L': 32768,
           'kv_bytes': 17179869184,
           'num_splits': 1,
           'kernel_share': 0.989,
           'gather_sdpa_fp32_x_floor': 14.0,
           'sdpa_contiguous_fp32_share': 0.0916,
           'gather_sdpa_bf16_x_floor': 3.56,
           'sdpa_contiguous_bf16_share': 1.05,
           'speedup_vs_gather_sdpa_fp32': 13.9}],
 'splits_sweep': [{'L': 8192, 'num_splits': 1, 'share': 0.0274},
                  {'L': 8192, 'num_splits': 2, 'share': 0.054},
                  {'L': 8192, 'num_splits': 4, 'share': 0.104},
                  {'L': 8192, 'num_splits': 8, 'share': 0.192},
                  {'L': 8192, 'num_splits': 16, 'share': 0.294},
                  {'L': 8192, 'num_splits': 32, 'share': 0.303},
                  {'L': 8192, 'num_splits': 33, 'share': 0.303},
                  {'L': 8192, 'num_splits': 64, 'share': 0.323},
                  {'L': 8192, 'num_splits': 66, 'share': 0.296},
                  {'L': 8192, 'num_splits': 99, 'share': 0.303},
                  {'L': 8192, 'num_splits': 128, 'share': 0.323},
                  {'L': 8192, 'num_splits': 132, 'share': 0.294},
                  {'L': 8192, 'num_splits': 256, 'share': 0.302},
                  {'L': 32768, 'num_splits': 1, 'share': 0.028},
                  {'L': 32768, 'num_splits': 2, 'share': 0.0556},
                  {'L': 32768, 'num_splits': 4, 'share': 0.11},
                  {'L': 32768, 'num_splits': 8, 'share': 0.214},
                  {'L': 32768, 'num_splits': 16, 'share': 0.402},
                  {'L': 32768, 'num_splits': 32, 'share': 0.652},
                  {'L': 32768, 'num_splits': 33, 'share': 0.657},
                  {'L': 32768, 'num_splits': 64, 'share': 0.826},
                  {'L': 32768, 'num_splits': 66, 'share': 0.818},
                  {'L': 32768, 'num_splits': 99, 'share': 0.687},
                  {'L': 32768, 'num_splits': 128, 'share': 0.759},
                  {'L': 32768, 'num_splits': 132, 'share': 0.757},
                  {'L': 32768, 'num_splits': 256, 'share': 0.689}]}

# %%
my_guess_share_no_split = None   # ваш прогноз: доля копирования память→память при num_splits = 1, например 0.3

# %%
# Замер на H200 (данные из benchmarks/results/decode_kernels_h200.json репозитория курса: устройство, дата,
# команда и версии — в самих данных; пакет студента папку benchmarks/ не содержит, поэтому данные вписаны сюда).
bench = BENCH_DECODE_H200


def choose_splits_demo(B, Hkv, pages, sm_count):
    """The rule of the lesson's paged_decode_gpu: one full wave of about 4 blocks per SM, splits of >= 8 pages."""
    return max(1, min(4 * sm_count // (B * Hkv), pages // 8))


SM = bench["sm_count"]   # число SM у H200 — из замера
for B in (1, 8, 64):
    blocks = B * 8
    print(f"B = {B:>2}: без разбиения {blocks:>3} блоков = {blocks / SM:.2f} на SM; "
          f"выбор choose_splits: num_splits = {choose_splits_demo(B, 8, 32768 // 16, SM)}")
if bench:
    sweep = [r for r in bench["splits_sweep"] if r["L"] == 32768]
    print(f"\nзамер ({bench['device']}, {bench['date'][:10]}): num_splits = 1 → "
          f"{100 * sweep[0]['share']:.0f} % копирования"
          + ("" if my_guess_share_no_split is None else f"; ваш прогноз {100 * my_guess_share_no_split:.0f} %"))
    for L in sorted({r["L"] for r in bench["splits_sweep"]}):
        rows = [r for r in bench["splits_sweep"] if r["L"] == L]
        plt.plot([r["num_splits"] for r in rows], [100 * r["share"] for r in rows], "o-", label=f"B = 1, L = {L}")
    plt.xscale("log", base=2); plt.ylim(0, 100)
    plt.xlabel("num_splits"); plt.ylabel("% от копирования память→память")
    plt.title(f"Декод на {bench['device']}: пропускная способность против num_splits")
    plt.legend(); plt.grid(alpha=0.3); plt.show()
    print(f"команда: {bench['command']}; версии: {bench['versions']}")

# %% [markdown]
# Без разбиения 8 блоков занимают 8 SM из 132: остальные простаивают, и ядро получает малую долю пропускной
# способности, как бы хорошо оно ни читало. При B = 64 блоков уже 512 — почти четыре на SM, и делить контекст
# незачем. Поэтому `num_splits` выбирают по батчу, числу голов и числу SM: столько групп, чтобы блоков хватило на
# одну полную «волну» GPU, но не мельче нескольких страниц на группу.
#
# Волна и число блоков на SM — урок 06, раздел 1: мест сразу «SM × блоков на SM», а блоков на SM у ядра split этого
# урока (128 потоков, 128 регистров на поток, 16 КиБ разделяемой памяти) — 4 на H200 по регистрам. Отсюда «4» в
# правиле `choose_splits`:

# %%
from autograder.lessons.lesson06 import cuda_basics as cb
for gpu, sm in (("H200", SM), ("T4 (Colab)", 40)):
    per_sm = min(cb.resident_blocks(gpu, 128, 128, 16640).values())
    splits = choose_splits_demo(1, 8, 32768 // 16, sm)
    print(f"{gpu}: {per_sm} блока на SM, волна — {per_sm * sm} блоков; B = 1, Hkv = 8, L = 32768: "
          f"num_splits = {splits}, блоков {8 * splits} = {cb.waves(8 * splits, sm, per_sm):.2f} волны")

# %% [markdown]
# У T4 разделяемая память пускает только 3 таких блока на SM: правило «4 на SM» даёт там 1.33 волны, и последняя
# треть блоков идёт на GPU, занятом на треть. Число мест из `cb.resident_blocks` дало бы ровно одну волну; правило
# урока держит одну константу, рассчитанную на H200.
#
# ### С чем сравнивать: путь, который пишут сегодня
#
# Без страничного ядра пользователь собирает страницы в непрерывный кэш (`k_pages[block_table]`) и вызывает
# `torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)`. Сборка сама по себе читает и пишет весь
# кэш, а SDPA в fp32 для одного запроса далёк от пропускной способности памяти. Ниже — из того же замера: время
# относительно «байтового пола» (байты KV / пропускная способность копирования) для fp32 и bf16.

# %%
if bench and bench["rows"] and "gather_sdpa_fp32_x_floor" in bench["rows"][0]:
    print(f"{'B':>3} {'L':>6} {'KV, МБ':>8} {'ядро урока':>11} {'сборка+SDPA fp32':>17} {'SDPA fp32':>10} "
          f"{'сборка+SDPA bf16':>17} {'SDPA bf16':>10} {'ускорение':>10}")
    for r in bench["rows"]:
        print(f"{r['B']:>3} {r['L']:>6} {r['kv_bytes'] / 1e6:>8.0f} {100 * r['kernel_share']:>10.0f}% "
              f"{r['gather_sdpa_fp32_x_floor']:>15.1f}× {100 * r['sdpa_contiguous_fp32_share']:>9.0f}% "
              f"{r['gather_sdpa_bf16_x_floor']:>15.1f}× {100 * r['sdpa_contiguous_bf16_share']:>9.0f}% "
              f"{r['speedup_vs_gather_sdpa_fp32']:>9.1f}×")
    print("ядро урока и SDPA — доля копирования; сборка+SDPA — во сколько раз дольше байтового пола; "
          "ускорение — ядро урока против сборки+SDPA в fp32")
else:
    print("замер не найден: запустите benchmarks/decode_kernels.py на GPU")

# %% [markdown]
# ## 5. На GPU: ядро split и ядро combine
#
# Раскладка по образцу FlashDecoding (в коде FlashAttention — `flash_fwd_splitkv_kernel` и `num_splits`):
#
# | NumPy `paged_decode` | ядро |
# | --- | --- |
# | цикл по b, голове K/V, группе s | блок CUDA `(split, kvh, b)`: `blockIdx.x = split`, `blockIdx.y = kvh`, `blockIdx.z = b`; 128 потоков = 4 варпа |
# | G голов запроса одной головы K/V | все G векторов q — в регистрах каждого варпа: строку K/V читают **один** раз на все G голов |
# | страница за страницей | страницы своей группы блок один раз читает из `block_table` в разделяемую память (`sm_pages`, до `TABLE_SLOTS` = 512 страниц); варп берёт позиции группы порциями по RUN подряд (4 варпа — по очереди), `page = sm_pages[t / page_size − p0]`, позиции `t ≥ lengths[b]` не читаются |
# | — | двойная буферизация: две порции в регистрах; пока считается softmax одной, строки K/V следующей уже идут из памяти |
# | `q · k` для одной позиции | лейн варпа держит d/32 элементов (`float4` при d = 128), сумма — `__shfl_xor_sync` |
# | online softmax (m, l, acc) | у каждого варпа свой; в конце 4 варпа сливаются через разделяемую память (shared memory) |
# | `(o_s, lse_s)` группы | пишутся в буферы `o_part` (S, B, Hq, d), `lse_part` (S, B, Hq); при S = 1 сразу в ответ |
# | `merge_partials` | ядро `paged_decode_combine`: блок на (последовательность, голову запроса), d × 4 потоков: четыре потока элемента e делят части между собой |
#
# Зачем срез таблицы страниц в разделяемой памяти: если брать `page = row_table[t / page_size]` прямо из глобальной
# памяти, каждая порция ждёт два обращения к DRAM подряд — сначала номер страницы, потом по нему строки K/V. Из среза
# номер страницы приходит за десятки тактов, и в полёте остаются только загрузки K/V. Память под срез — та же, что
# под слияние варпов в конце (между ними `__syncthreads()`), поэтому блоков на SM столько же.
#
# Контракт `paged_decode_gpu(q, k_pages, v_pages, block_table, lengths, num_splits=None)` тот же, что у NumPy-версии,
# на массивах CuPy (`block_table`, `lengths` — int32); d = 64 или 128, G от 1 до 8; `num_splits=None` — выбор по
# батчу, числу голов и числу SM. Слитое (fused) ядро не создаёт непрерывную копию кэша: проверка видит все выделения
# на устройстве. Ядра — в строке `DECODE_SRC`: `extern "C"` ядра `paged_decode_split` и `paged_decode_combine`.
#
# Каркас ниже уже содержит раскладку, загрузки `float4`/`float2`, свёртку скалярного произведения по варпу и запись
# в разделяемую память. Допишите пять мест ядра — на месте каждого стоят строки заглушки `# ВАШ КОД ЗДЕСЬ` /
# `raise NotImplementedError()`; замените их кодом CUDA C (строки с `//` — комментарии C):
# 1. диапазон страниц `[p0, p1)` и позиций `[t0, t1)` своей группы — как группы `num_splits` в NumPy-версии (`ceil(pages / num_splits)` страниц на группу), без позиций ≥ n;
# 2. (в `load_run`) страница позиции t и смещение `row` строки (страница, слот, голова K/V) в пуле, вместе с
#    `lane * VEC` — началом элементов своего лейна. Страницы группы блок уже прочитал из таблицы в разделяемую память:
#    `sm_pages[i]` — страница `p0 + i` последовательности, но только при `i < TABLE_SLOTS`; страницу дальше среза
#    (группа длиннее 512 страниц) берите из самой таблицы: `row_table[p0 + i]`, то есть `row_table[t / page_size]`.
#    Смещение считайте в `size_t` с первого умножения: пул бывает больше 2³¹ чисел;
# 3. (в `softmax_run`) шаг online softmax для порции из RUN скоров `s[u]` (урок 04): новый максимум, множитель `exp(m − m_new)`,
#    добавки `p = exp(s[u] − m_new)` к `l` и `p · v` к `acc` только для позиций `base + u < t1`;
# 4. слияние состояний четырёх варпов для головы g и элемента e — то же правило, что в `merge_partials`;
# 5. ядро combine: суммы `merge_partials` по своим частям `o_part`, `lse_part` (максимум `M` и сложение четырёх
#    сумм уже написаны).
#
# В обёртке `paged_decode_gpu` остаётся (6) — два запуска, и тело `choose_splits` — правило выбора `num_splits`
# из раздела 4: столько групп, чтобы блоков хватило на одну волну (урок 06, раздел 1; около 4 блоков на SM: `__launch_bounds__(128, 4)`
# в каркасе ограничивает поток 65 536 / (4 · 128) = 128 регистрами; сколько вышло у вашего ядра, печатает проверка
# компиляции), но не меньше 8 страниц на группу. Число SM даёт
# `cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]` (запрос медленный: сохраните
# ответ, например, в списке `_sm_count`).

# %% nbgrader={"grade": false, "grade_id": "decode_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
DECODE_SRC = r"""
// Flash-decoding over a paged KV cache (the layout of vLLM's FlashAttention backend), GQA.
// paged_decode_split: one block per (split, KV head, sequence); 4 warps share the split's tokens,
// every warp serves all G query heads of its KV head from one read of each K/V row.
// paged_decode_combine: one block per (sequence, query head) merges the splits by their lse.
#define NEG_INF __int_as_float(0xff800000)
#define WARPS 4
#define SMEM_FLOATS (WARPS * 8 * (128 + 2))   // the cross-warp merge of the largest instantiation
#define TABLE_SLOTS 512   // pages of a split's block table kept in shared memory (2 KiB of the merge's)

template <int VEC> struct Vec;
template <> struct Vec<2> { typedef float2 T; };
template <> struct Vec<4> { typedef float4 T; };

template <int VEC> __device__ __forceinline__ void load_vec(float* r, const float* p)
{
    typedef typename Vec<VEC>::T T;
    const T x = __ldg(reinterpret_cast<const T*>(p));
    const float* f = reinterpret_cast<const float*>(&x);
#pragma unroll
    for (int i = 0; i < VEC; ++i) r[i] = f[i];
}

// the K and V rows of tokens base .. base + RUN - 1 of this split (none at or past t1) into registers
template <int D, int RUN>
__device__ __forceinline__ void load_run(float (&kr)[RUN][D / 32], float (&vr)[RUN][D / 32],
                                         const float* __restrict__ k_pages, const float* __restrict__ v_pages,
                                         const int* __restrict__ row_table, const int* sm_pages, int p0,
                                         int base, int t1, int page_size, int Hkv, int kvh, int lane)
{
    constexpr int VEC = D / 32;
#pragma unroll
    for (int u = 0; u < RUN; ++u) {
        const int t = base + u;
        if (t < t1) {
            // (2) where token t lives: its page, from the split's slice of the block table in shared memory
            //     (sm_pages[i] is page p0 + i of the sequence, for i < TABLE_SLOTS; a later page only in
            //     row_table), then `const size_t row`: the offset of this lane's VEC elements of
            //     (page, slot, KV head kvh) in the pool (P, page_size, Hkv, D)
            // ### BEGIN SOLUTION
            const int i = t / page_size - p0;        // the page's place in this split's slice
            const int page = i < TABLE_SLOTS ? sm_pages[i] : row_table[t / page_size];
            const size_t row = (((size_t)page * page_size + t % page_size) * Hkv + kvh) * D + lane * VEC;
            // ### END SOLUTION
            load_vec<VEC>(kr[u], k_pages + row);
            load_vec<VEC>(vr[u], v_pages + row);
        }
    }
}

// online softmax of the G query heads over one run of RUN tokens already in registers
template <int GT, int RUN, int VEC>
__device__ __forceinline__ void softmax_run(const float (&qr)[GT][VEC], const float (&kr)[RUN][VEC],
                                            const float (&vr)[RUN][VEC], float (&m)[GT], float (&l)[GT],
                                            float (&acc)[GT][VEC], int base, int t1, int G)
{
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        if (g >= G) break;
        float s[RUN];
        float m_blk = NEG_INF;
#pragma unroll
        for (int u = 0; u < RUN; ++u) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < VEC; ++i) dot += qr[g][i] * kr[u][i];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            s[u] = base + u < t1 ? dot : NEG_INF;
            m_blk = fmaxf(m_blk, s[u]);
        }
        // (3) online softmax over this run (lesson 04): the new max, l and acc rescaled by exp(m - m_new),
        //     then p = exp(s[u] - m_new) added to l and p * v to acc for every token of the run (u with
        //     base + u < t1); skip the others with an if: their vr[u] were never loaded (garbage, maybe NaN),
        //     and 0 * NaN = NaN
        // ### BEGIN SOLUTION
        const float m_new = fmaxf(m[g], m_blk);     // finite: the first token of the run is valid
        const float corr = __expf(m[g] - m_new);
        l[g] *= corr;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[g][i] *= corr;
#pragma unroll
        for (int u = 0; u < RUN; ++u) {
            if (base + u < t1) {
                const float p = __expf(s[u] - m_new);
                l[g] += p;
#pragma unroll
                for (int i = 0; i < VEC; ++i) acc[g][i] += p * vr[u][i];
            }
        }
        m[g] = m_new;
        // ### END SOLUTION
    }
}

template <int D, int GT>
__device__ void split_body(const float* __restrict__ q, const float* __restrict__ k_pages,
                           const float* __restrict__ v_pages, const int* __restrict__ table,
                           const int* __restrict__ lengths, float* __restrict__ o_part,
                           float* __restrict__ lse_part, int B, int Hq, int Hkv, int G, int page_size,
                           int max_pages, int num_splits, float scale, float* smem)
{
    constexpr int VEC = D / 32;
    constexpr int RUN = GT >= 8 ? 1 : GT >= 4 ? 2 : 4;     // tokens per run: two runs in registers, within 128 registers
    float (*sm_acc)[GT][D] = reinterpret_cast<float (*)[GT][D]>(smem);
    float (*sm_m)[GT] = reinterpret_cast<float (*)[GT]>(smem + WARPS * GT * D);
    float (*sm_l)[GT] = reinterpret_cast<float (*)[GT]>(smem + WARPS * GT * D + WARPS * GT);
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n = lengths[b];
    const int n_pages = (n + page_size - 1) / page_size;
    // (1) this split's pages [p0, p1) and tokens [t0, t1): ceil(n_pages / num_splits) pages per split (the
    //     last splits may be empty), and no token at or past n
    // ### BEGIN SOLUTION
    const int per = (n_pages + num_splits - 1) / num_splits;
    const int p0 = min(split * per, n_pages), p1 = min(p0 + per, n_pages);
    const int t0 = p0 * page_size, t1 = min(p1 * page_size, n);   // stale slots past n never read
    // ### END SOLUTION
    const int* row_table = table + (size_t)b * max_pages;
    // The split's pages of the block table, read once by the whole block into shared memory: a run's K/V loads
    // then wait on nothing but themselves (not on a load of the table first). The merge below reuses this memory.
    int* sm_pages = reinterpret_cast<int*>(smem);
    for (int i = threadIdx.x; i < min(p1 - p0, TABLE_SLOTS); i += blockDim.x) sm_pages[i] = row_table[p0 + i];
    __syncthreads();

    float qr[GT][VEC], m[GT], l[GT], acc[GT][VEC];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        const int h = kvh * G + (g < G ? g : 0);
        load_vec<VEC>(qr[g], q + ((size_t)b * Hq + h) * D + lane * VEC);
#pragma unroll
        for (int i = 0; i < VEC; ++i) { qr[g][i] *= scale; acc[g][i] = 0.0f; }
        m[g] = NEG_INF;
        l[g] = 0.0f;
    }
    // Warp w takes the runs that start at t0 + RUN * w, then every WARPS * RUN tokens. Double buffering: while
    // one run is in the softmax, the rows of the next one are already on their way from memory.
    const int step = WARPS * RUN;
    float ka[RUN][VEC], va[RUN][VEC], kb[RUN][VEC], vb[RUN][VEC];
    int base = t0 + warp * RUN;
    load_run<D, RUN>(ka, va, k_pages, v_pages, row_table, sm_pages, p0, base, t1, page_size, Hkv, kvh, lane);
    for (; base < t1; base += 2 * step) {
        load_run<D, RUN>(kb, vb, k_pages, v_pages, row_table, sm_pages, p0, base + step, t1, page_size, Hkv,
                         kvh, lane);
        softmax_run<GT, RUN, VEC>(qr, ka, va, m, l, acc, base, t1, G);
        if (base + step >= t1) break;
        load_run<D, RUN>(ka, va, k_pages, v_pages, row_table, sm_pages, p0, base + 2 * step, t1, page_size, Hkv,
                         kvh, lane);
        softmax_run<GT, RUN, VEC>(qr, kb, vb, m, l, acc, base + step, t1, G);
    }
    __syncthreads();   // every warp is done with sm_pages: the merge overwrites them
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        if (lane == 0) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
#pragma unroll
        for (int i = 0; i < VEC; ++i) sm_acc[warp][g][lane * VEC + i] = acc[g][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        const int g = idx / D, e = idx % D;
        const size_t head = ((size_t)split * B + b) * Hq + kvh * G + g;
        // (4) merge the WARPS states of head g for element e (the same rule as merge_partials), then write
        //     o_part[head * D + e] = A / L and, once per head, lse_part[head] = M + log L;
        //     an empty split writes o = 0, lse = -inf
        // ### BEGIN SOLUTION
        float M = NEG_INF;
        for (int w = 0; w < WARPS; ++w) M = fmaxf(M, sm_m[w][g]);
        float L = 0.0f, A = 0.0f;
        if (M != NEG_INF)
            for (int w = 0; w < WARPS; ++w) {
                const float c = sm_m[w][g] == NEG_INF ? 0.0f : __expf(sm_m[w][g] - M);
                L += sm_l[w][g] * c;
                A += sm_acc[w][g][e] * c;
            }
        o_part[head * D + e] = L > 0.0f ? A / L : 0.0f;       // an empty split: o = 0, lse = -inf
        if (e == 0) lse_part[head] = L > 0.0f ? M + logf(L) : NEG_INF;
        // ### END SOLUTION
    }
}

#define SPLIT_ARGS q, k_pages, v_pages, table, lengths, o_part, lse_part, B, Hq, Hkv, G, page_size, max_pages, num_splits, scale, smem
template <int D>
__device__ void split_by_group(const float* q, const float* k_pages, const float* v_pages, const int* table,
                               const int* lengths, float* o_part, float* lse_part, int B, int Hq, int Hkv, int G,
                               int page_size, int max_pages, int num_splits, float scale, float* smem)
{
    if (G == 1) split_body<D, 1>(SPLIT_ARGS);
    else if (G == 2) split_body<D, 2>(SPLIT_ARGS);
    else if (G <= 4) split_body<D, 4>(SPLIT_ARGS);
    else split_body<D, 8>(SPLIT_ARGS);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 4)
paged_decode_split(const float* q, const float* k_pages, const float* v_pages, const int* table,
                   const int* lengths, float* o_part, float* lse_part, int B, int Hq, int Hkv, int d,
                   int page_size, int max_pages, int num_splits, float scale)
{
    __shared__ float smem[SMEM_FLOATS];
    const int G = Hq / Hkv;
    if (d == 128) split_by_group<128>(SPLIT_ARGS);
    else split_by_group<64>(SPLIT_ARGS);
}

#define COMBINE_WAYS 4
extern "C" __global__ void paged_decode_combine(const float* o_part, const float* lse_part, float* out,
                                                int num_splits, int rows, int d)
{
    // one block per (sequence, query head) of d x COMBINE_WAYS threads: thread (e, y) sums element e of the
    // parts s = y, y + COMBINE_WAYS, ..., and the COMBINE_WAYS partial sums meet in shared memory
    __shared__ float sm_a[COMBINE_WAYS][128];
    __shared__ float sm_l[COMBINE_WAYS];
    const int row = blockIdx.x, e = threadIdx.x, y = threadIdx.y, lane = threadIdx.x & 31;
    float M = NEG_INF;                                    // the largest lse: the 32 lanes read the parts together
    for (int s = lane; s < num_splits; s += 32) M = fmaxf(M, lse_part[(size_t)s * rows + row]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float L = 0.0f, A = 0.0f;
    // (5) this thread's parts s = y, y + COMBINE_WAYS, ... of element e: L += w and A += w * o_part[(s * rows + row)
    //     * d + e] with w = exp(lse_part[s * rows + row] - M), as in merge_partials of part 2; empty parts
    //     (lse = -inf) add nothing, and nothing is added when M = -inf
    // ### BEGIN SOLUTION
    if (M != NEG_INF) {
#pragma unroll 4
        for (int s = y; s < num_splits; s += COMBINE_WAYS) {
            const float lse = lse_part[(size_t)s * rows + row];
            const float w = lse == NEG_INF ? 0.0f : __expf(lse - M);   // an empty split adds nothing
            L += w;
            A += w * o_part[((size_t)s * rows + row) * d + e];
        }
    }
    // ### END SOLUTION
    sm_a[y][e] = A;
    if (e == 0) sm_l[y] = L;
    __syncthreads();
    if (y == 0) {
        for (int i = 1; i < COMBINE_WAYS; ++i) { A += sm_a[i][e]; L += sm_l[i]; }
        out[(size_t)row * d + e] = L > 0.0f ? A / L : 0.0f;
    }
}
"""

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_gpu_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.gpu_compiles', DECODE_SRC)

# %% nbgrader={"grade": false, "grade_id": "paged_decode_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
_decode_kernels = {}   # (текст ядра, имя) -> cupy.RawKernel: компилируется при первом запуске, заново — после правки DECODE_SRC
_sm_count = []


def choose_splits(B, Hkv, max_pages, sm_count=None):
    """num_splits=None: one full wave of blocks (about 4 resident per SM), each split at least 8 pages long."""
    ### BEGIN SOLUTION
    if sm_count is None:
        if not _sm_count:  # the device query is slow: once per process
            _sm_count.append(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"])
        sm_count = _sm_count[0]
    resident = 4 * sm_count          # 128 threads x 128 registers: 4 blocks fit on one SM
    return int(max(1, min(resident // (B * Hkv), max_pages // 8)))
    ### END SOLUTION


def paged_decode_gpu(q, k_pages, v_pages, block_table, lengths, num_splits=None):
    B, Hq, d = q.shape
    P, page_size, Hkv, _ = k_pages.shape
    max_pages = block_table.shape[1]
    if d not in (64, 128) or Hq % Hkv or Hq // Hkv > 8:
        raise ValueError("ядро рассчитано на d = 64 или 128 и G = Hq / Hkv от 1 до 8")
    S = choose_splits(B, Hkv, max_pages) if num_splits is None else int(num_splits)
    split, combine = ((DECODE_SRC, name) for name in ("paged_decode_split", "paged_decode_combine"))
    for key in (split, combine):
        if key not in _decode_kernels:
            _decode_kernels[key] = cp.RawKernel(*key)
    out = cp.empty((B, Hq, d), dtype=cp.float32)
    o_part = out if S == 1 else cp.empty((S, B, Hq, d), dtype=cp.float32)   # S = 1: ядро split сразу пишет ответ
    lse_part = cp.empty((S, B, Hq), dtype=cp.float32)
    # (6) запуск ядра split: сетка (S, Hkv, B), 128 потоков; скаляры — np.int32 / np.float32, масштаб 1/√d;
    #     затем, если S > 1, ядро combine: сетка (B * Hq,), блок (d, 4) — 4 = COMBINE_WAYS
    ### BEGIN SOLUTION
    _decode_kernels[split](
        (S, Hkv, B), (128,),
        (q, k_pages, v_pages, block_table, lengths, o_part, lse_part, np.int32(B), np.int32(Hq), np.int32(Hkv),
         np.int32(d), np.int32(page_size), np.int32(max_pages), np.int32(S), np.float32(1 / math.sqrt(d))))
    if S > 1:
        _decode_kernels[combine](
            (B * Hq,), (d, 4), (o_part, lse_part, out, np.int32(S), np.int32(B * Hq), np.int32(d)))
    ### END SOLUTION
    return out

# %% [markdown]
# Проверки GPU: совпадение с эталоном float64 на тех же трудных случаях (GQA, страницы 1/5/16, NaN в устаревших
# слотах, общая страница, большие логиты), независимость от `num_splits`, отсутствие непрерывной копии кэша на
# устройстве, отсутствие выходов за границы, гонок и чтения неинициализированной памяти (эмулятор GPU смотрит каждое
# обращение каждого потока; на GPU — он же или compute-sanitizer) и скорость: байты KV в fp32 (4 байта на элемент, интенсивность G/2 — не bf16 раздела 1), которые требуют длины, делённые на время, — не меньше 50 % от копирования
# память→память на этом же GPU (B = 1 при L = 32768 и B = 8 при L = 8192, головы Qwen3-0.6B).

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_gpu_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.gpu_equivalence', paged_decode_gpu)
### BEGIN HIDDEN TESTS
grade('lesson11.gpu_equivalence', paged_decode_gpu, cases=[{'B': 8, 'Hq': 16, 'Hkv': 8, 'd': 128, 'page_size': 16, 'lengths': [1, 16, 17, 300, 33, 5, 48, 1000], 'seed': 150, 'shared': True}, {'B': 2, 'Hq': 8, 'Hkv': 1, 'd': 64, 'page_size': 7, 'lengths': [14, 15], 'seed': 151}, {'B': 2, 'Hq': 3, 'Hkv': 1, 'd': 128, 'page_size': 16, 'lengths': [40, 9], 'seed': 152, 'keys_away': True}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_gpu_splits", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.gpu_splits', paged_decode_gpu)
### BEGIN HIDDEN TESTS
grade('lesson11.gpu_splits', paged_decode_gpu, cases=[{'B': 3, 'Hq': 4, 'Hkv': 4, 'd': 64, 'page_size': 5, 'lengths': [200, 1, 51], 'seed': 160, 'shared': True, 'num_splits': [None, 2, 7, 64]}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_gpu_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.gpu_memory', paged_decode_gpu)

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_gpu_bounds", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.gpu_bounds', paged_decode_gpu)
### BEGIN HIDDEN TESTS
grade('lesson11.gpu_bounds', paged_decode_gpu, cases=[{'B': 3, 'Hq': 8, 'Hkv': 1, 'd': 128, 'page_size': 16, 'lengths': [33, 1, 70], 'seed': 161}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson11_gpu_speed", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson11.gpu_speed', paged_decode_gpu)

# %% [markdown]
# ## Вопросы для повторения
#
# 1. Почему интенсивность внимания декода не растёт с батчем, а у линейных слоёв растёт? Что тогда даёт батч декоду?
# 2. Часть с $\mathrm{lse}_s = -\infty$ и часть с $\mathrm{lse}_s = 10^4$: какие веса они получат при слиянии, и почему
#    нельзя считать $e^{\mathrm{lse}_s}$ напрямую?
# 3. При B = 64 и Hkv = 8 стоит ли делить контекст на H200? А на T4 (40 SM)? Что теряется, если групп слишком много?
