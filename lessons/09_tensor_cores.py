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
# # Урок 09. Тензорные ядра: `mma.sync` и FlashAttention на них
#
# **Модуль 07 «Fused-операторы и FlashAttention»**, курс *LLM Inference Systems*.
#
# {{COLAB_BADGE}}
#
# Нет своего GPU — откройте ноутбук в Colab по ссылке выше и выберите *Среда выполнения → Сменить среду выполнения → GPU*. Первая ячейка поставит пакет курса; CuPy в Colab уже есть.
#
# Ядро урока 08 считает только на CUDA-ядрах в fp32, и его потолок — fp32-пик GPU. Матричные произведения
# в настоящих ядрах внимания (уже в первой FlashAttention, затем в FA2, FA3 и cuDNN) делают **тензорные ядра**: отдельные блоки SM,
# которые за одну инструкцию варпа умножают маленькие матрицы 16-битных чисел и копят сумму в fp32. Вы:
# 1. посчитаете, во сколько раз тензорные ядра T4 и H200 быстрее CUDA-ядер, и при каком условии FlashAttention
#    с ними упирается в вычисления, а не в память;
# 2. разберёте инструкцию `mma.sync`: формы, **фрагменты** (какой поток варпа держит какие элементы A, B и C — с
#    картинкой), `ldmatrix`, встроенный PTX из CUDA C;
# 3. **разминка (оценивается):** `mma_matmul_gpu` — произведение матриц float16 на тензорных ядрах, один варп на тайл 16×8;
# 4. оцените ошибку 16-битных входов и P в f16 против эталона float64 и выведете из неё допуск проверки;
# 5. **главное (оценивается):** допишете FlashAttention на тензорных ядрах по каркасу — два MMA, шаг online softmax
#    на фрагментах-аккумуляторах и перевод P в f16;
# 6. сравните скорость с ядром урока 08 и с `scaled_dot_product_attention` в f16.
#
# **Как проверяется.** Баллы — в строке ✓/✗ каждой ячейки «Проверка» и в `make test` (окно Validate их не показывает). Проверки компиляции (NVRTC для sm_75, sm_80 и sm_90) работают везде. Проверки запуска идут на
# GPU, а без него — на эмуляторе GPU (урок 06, раздел 7), который выполняет и `mma.sync`, и `ldmatrix`: `mma_matmul` —
# на тех же случаях, FlashAttention — на меньших (не больше двух голов, n до 256), с теми же
# допусками. Входы — float16, поэтому всё работает и на T4 в Colab (sm_75).

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

# %% [markdown] id="p1"
# ## 1. Сколько дают тензорные ядра
#
# Пиковая скорость — произведение числа исполнителей, операций за такт и частоты. У CUDA-ядра это одно
# умножение-сложение fp32 (2 FLOP) за такт. Тензорное ядро за такт делает целый кусок матричного произведения:
# у Turing (T4) — 64 умножения-сложения f16 с накоплением в fp32, у Hopper (H100/H200) — 512 в плотном режиме.
# Числа блоков и частоты — из спецификаций NVIDIA (T4 datasheet; H100/H200 datasheet и whitepaper «NVIDIA H100 Tensor
# Core GPU Architecture»: 132 SM по 4 тензорных ядра, CUDA-ядер 128 на SM при 1.98 ГГц). Частоту тензорных операций
# datasheet не пишет, её даёт сам паспортный пик: 989.4 TFLOPS / (132 · 4 · 512 · 2 FLOP за такт) = 1.83 ГГц — эту
# частоту называет и whitepaper в таблице частот. Ячейка
# ниже пересчитывает из них паспортные пики: T4 — 65 TFLOPS f16 на тензорных ядрах и 8.1 TFLOPS fp32,
# H200 SXM — 989 TFLOPS плотных f16/bf16 (1979 — «со sparsity») и 67 TFLOPS fp32.

# %% id="p2"
gpus = {  # (SM, тензорных ядер на SM, FMA f16 на тензорное ядро за такт, ГГц тензорных; FP32-ядер на SM, ГГц)
    "T4 (sm_75)": (40, 8, 64, 1.59, 64, 1.59),
    "H200 SXM (sm_90)": (132, 4, 512, 1.83, 128, 1.98),
}
hbm = {"T4 (sm_75)": 320e9, "H200 SXM (sm_90)": 4.8e12}   # байт/с, паспорт
peaks = {}
for name, (sm, tc, fma, ghz_tc, fp32, ghz) in gpus.items():
    tensor = sm * tc * fma * 2 * ghz_tc * 1e9
    cuda = sm * fp32 * 2 * ghz * 1e9
    peaks[name] = (tensor, cuda)
    print(f"{name:17}: тензорные f16 {tensor / 1e12:6.1f} TFLOP/s, CUDA-ядра fp32 {cuda / 1e12:5.1f} TFLOP/s "
          f"(в {tensor / cuda:4.1f} раза); ridge point f16 {tensor / hbm[name]:5.0f} FLOP/Б")

# %% [markdown] id="p3"
# **Когда FlashAttention на тензорных ядрах упирается в вычисления.** Слитое ядро делает $4 n^2 d$ FLOP на голову и
# не выносит тайлы S из чипа (урок 05). Q оно читает и O пишет по одному разу, а K и V читает заново для каждого
# тайла из $B_r$ строк Q — так устроен FlashAttention-2, а модель теоремы 2 статьи FlashAttention (arXiv 2205.14135)
# считает всякое повторное чтение тайла обращением к HBM. Сколько из них на самом деле дойдёт до HBM, решает кэш L2:
# - **все перечитывания — из HBM**: $(2 + 2n/B_r)\,n d$ элементов по 2 байта, интенсивность
#   $\frac{4 n^2 d}{2 (2 + 2n/B_r)\, n d} = \frac{n}{1 + n/B_r} < B_r$ — при $B_r$ = 128 ниже ridge point H200 (около 206):
#   ядро упиралось бы в память;
# - **K и V перечитываются из L2**: до HBM доходят только $4 n d$ элементов, интенсивность
#   $\frac{4 n^2 d}{8 n d} = n/2$ FLOP/Б — в десять раз выше ridge point H200.
#
# Ядро этого урока рассчитывает на второй случай: `blockIdx.x` — голова, поэтому блоки, работающие одновременно,
# идут по K и V всех голов вместе, а K и V всех 16 голов помещаются в L2 H200 (60 МиБ, урок 06; ячейка ниже).
# Это **допущение**: байты, прочитанные из HBM, мы не измеряли (их показывает профилировщик Nsight Compute). Если оно
# верно, время ядра задают тензорные ядра и всё, что их ждёт: softmax на CUDA-ядрах, загрузки тайлов, барьеры. У T4
# L2 всего 4 МиБ, и там ближе первый случай.

# %% id="p3b"
n_ex, br_ex, heads_ex, l2_h200 = 4096, 128, 16, 60 * 2**20   # L2 H200: урок 06 (device_facts в gpu_kernels_h200.json)
print(f"n = {n_ex}, B_r = {br_ex}: интенсивность {n_ex / (1 + n_ex / br_ex):.0f} FLOP/Б, если K и V каждый раз "
      f"из HBM; {n_ex / 2:.0f} FLOP/Б, если из L2")
for d_ex in (64, 128):
    kv = heads_ex * 2 * n_ex * d_ex * 2                  # K и V всех голов, f16
    print(f"d = {d_ex:3}: K и V {heads_ex} голов — {kv / 2**20:.0f} МиБ, L2 H200 — {l2_h200 / 2**20:.0f} МиБ")

# %% [markdown] id="p3c"
# **Прогноз 1.** Ядро урока 08 на H200 давало 33–37 TFLOP/s без маски (fp32, CUDA-ядра; таблица раздела 7). Во
# сколько раз быстрее, по-вашему, будет такое же ядро на тензорных ядрах (f16, та же схема тайлов)? Впишите число —
# следующая ячейка сравнит его с паспортным отношением пиков и с измеренным на H200.

# %% id="p4"
my_speedup_prediction = None   # например, 10.0

# %% id="p5"
# H200, H = 16, n = 16384, d = 128, без маски: ядро урока 08 (fp32) и эталонное ядро этого урока (f16) — из одного
# прогона `python benchmarks/gpu_kernels.py --tensor-cores` (раздел 7, benchmarks/results/gpu_kernels_tc_h200.json)
H200_MEASURED_TFLOPS = {"урок 08, fp32": 36.8, "урок 09, f16": 303.4}
tensor, cuda = peaks["H200 SXM (sm_90)"]
print(f"паспортное отношение пиков H200: {tensor / cuda:.1f}×")
if None not in H200_MEASURED_TFLOPS.values():
    measured = H200_MEASURED_TFLOPS["урок 09, f16"] / H200_MEASURED_TFLOPS["урок 08, fp32"]
    print(f"измерено на H200: {measured:.1f}× ({H200_MEASURED_TFLOPS['урок 09, f16']:.0f} против "
          f"{H200_MEASURED_TFLOPS['урок 08, fp32']:.0f} TFLOP/s)")
if my_speedup_prediction is None:
    print("Прогноз не записан — впишите его в ячейку выше и запустите обе ячейки снова.")
else:
    print(f"ваш прогноз: {my_speedup_prediction:g}×")

# %% [markdown] id="p6"
# Паспортное отношение — верхняя граница, и на Hopper инструкции `mma.sync` её не достичь: паспортные 989 TFLOPS
# рассчитаны на асинхронную инструкцию `wgmma` (урок 10). Цикл из одних `mma.sync` m16n8k16 на регистрах, без
# загрузок и softmax, выходит на H200 курса примерно на 630 TFLOP/s — около 64 % паспорта
# (`benchmarks/results/review_measurements_h200.json`, ключ `mma_sync_peak`). Достижимое отношение `mma.sync` к
# fp32-пику поэтому около 630 / 67 ≈ 9.4×, а не 14.8×. Всё, что ниже, — ожидание загрузок тайлов, барьеров и
# softmax, который по-прежнему считают CUDA-ядра (экспонента — на SFU, их ещё меньше). Насколько измеренное ядро
# отстаёт от этого потолка и от лучших ядер — в разделе 7.
# %% [markdown] id="m1"
# ## 2. Инструкция `mma.sync`: варп умножает матрицы 16×16 на 16×8
#
# Тензорное ядро программируется не поточно, а **всем варпом сразу**: 32 потока вместе выполняют одну
# инструкцию PTX
# ```
# mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32  {d0,d1,d2,d3}, {a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3};
# ```
# Она вычисляет $D = A B + C$, где A — 16×16 (m×k, f16, «row»), B — 16×8 (k×n, f16, «col»), C и D — 16×8 в fp32.
# Каждый поток держит свою долю матриц в **регистрах-фрагментах**: A — четыре 32-битных регистра (в каждом две
# половинки f16, всего 8 чисел), B — два регистра (4 числа), C — четыре float. 32 потока × 8 = 256 = 16·16 элементов A.
#
# | форма | типы | где есть |
# | --- | --- | --- |
# | `m16n8k8` | f16 × f16 → f32 (или f16) | sm_75 и новее (T4 в Colab) |
# | `m16n8k16` | f16 или bf16 × … → f32 | sm_80 и новее (A100, H100/H200) |
# | `wgmma.m64nNk16`, для fp8 — `wgmma.m64nNk32` (асинхронная, варп-группа из 4 варпов) | f16/bf16 (k16), fp8 (k32) → f32 | только sm_90a: H100/H200 с ключом `-arch=sm_90a` (для `sm_90` NVRTC её не принимает) — тема урока 10 |
#
# На sm_75 `m16n8k16` складывается из двух `m16n8k8`: первая берёт столбцы k 0–7 (регистры a0, a1 и b0), вторая —
# 8–15 (a2, a3 и b1). Так и устроен помощник `mma_m16n8k16` в каркасе: `#if __CUDA_ARCH__ >= 800` — одна инструкция,
# иначе две. bf16 (`…f32.bf16.bf16.f32`) есть только на sm_80+ — это вариант для A100/H100, если обернуть его тем же `#if`.
#
# **Кто что держит.** Номер потока в варпе `lane = 4·g + t`: g = `lane / 4` (0–7) — «группа», t = `lane % 4` (0–3).
# - C (и D): c0, c1 — строка g, столбцы 2t и 2t+1; c2, c3 — строка g+8, те же столбцы;
# - A: a0 — строка g, столбцы 2t, 2t+1; a1 — строка g+8; a2 — строка g, столбцы 2t+8, 2t+9; a3 — строка g+8, столбцы 2t+8, 2t+9;
# - B: b0 — **строки** 2t и 2t+1 столбца g; b1 — строки 2t+8 и 2t+9 столбца g.
#
# Младшая половина регистра — элемент с меньшим номером столбца (у B — строки). На картинке номер в клетке — lane,
# цвет — регистр.

# %% id="m2"
def draw_fragments():
    """The m16n8k16 fragments: which lane holds which element of A (16x16), B (16x8) and C (16x8)."""
    def owners_a():
        lane, reg = np.zeros((16, 16), int), np.zeros((16, 16), int)
        for l in range(32):
            g, t = divmod(l, 4)
            for r, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
                lane[row, col:col + 2], reg[row, col:col + 2] = l, r
        return lane, reg

    def owners_b():
        lane, reg = np.zeros((16, 8), int), np.zeros((16, 8), int)
        for l in range(32):
            g, t = divmod(l, 4)
            for r, row in enumerate([2 * t, 2 * t + 8]):
                lane[row:row + 2, g], reg[row:row + 2, g] = l, r
        return lane, reg

    def owners_c():
        lane, reg = np.zeros((16, 8), int), np.zeros((16, 8), int)
        for l in range(32):
            g, t = divmod(l, 4)
            lane[g, 2 * t:2 * t + 2], reg[g, 2 * t:2 * t + 2] = l, [0, 1]
            lane[g + 8, 2 * t:2 * t + 2], reg[g + 8, 2 * t:2 * t + 2] = l, [2, 3]
        return lane, reg

    colors = plt.get_cmap("Pastel1").colors
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2), gridspec_kw={"width_ratios": [16, 8, 8]})
    for ax, (title, (lane, reg), names) in zip(axes, [
            ("A (16×16, f16): a0 a1 a2 a3", owners_a(), "a"),
            ("B (16×8, f16): b0 b1", owners_b(), "b"),
            ("C, D (16×8, fp32): c0 c1 c2 c3", owners_c(), "c")]):
        rows, cols = lane.shape
        image = np.array([[colors[r] for r in row] for row in reg])
        ax.imshow(image, aspect="equal")
        for i in range(rows):
            for j in range(cols):
                ax.text(j, i, str(lane[i, j]), ha="center", va="center", fontsize=7)
        ax.set_title(title + "\nчисло — lane, цвет — регистр " + ", ".join(f"{names}{r}" for r in range(reg.max() + 1)))
        ax.set_xticks(range(cols)); ax.set_yticks(range(rows))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("k" if names == "a" else "n"); ax.set_ylabel("m" if names != "b" else "k")
    fig.tight_layout()
    return fig

draw_fragments()
plt.show()

# %% [markdown] id="m3"
# **Связь C и A — главный трюк FlashAttention-2 на тензорных ядрах.** Посмотрите на C и на левую половину A:
# поток с номером lane держит в C элементы (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) — ровно те, что в A лежат
# в a0 и a1. Значит, фрагмент-аккумулятор S = Q Kᵀ (два соседних n-тайла по 8 ключей) **без обмена между потоками**
# превращается во фрагмент A для P·V: `a0, a1` из тайла 2kk, `a2, a3` из тайла 2kk+1 — только округлить fp32 в f16.
# P не идёт ни в разделяемую, ни в глобальную память.
#
# **`ldmatrix`.** Собирать фрагменты поэлементно из разделяемой памяти долго. Инструкция
# `ldmatrix.sync.aligned.m8n8.x4.shared.b16` (есть с sm_75) читает четыре матрицы 8×8 по 16 бит: потоки 8i … 8i+7
# дают адреса восьми строк матрицы i (по 16 байт), а в регистр i потока `4g + t` приходят элементы 2t и 2t+1 строки g
# матрицы i — это как раз раскладка фрагмента. С суффиксом `.trans` матрица приходит транспонированной: в регистр i
# потока `4g + t` попадают элементы строк 2t и 2t+1 **столбца** g хранимой матрицы i. Так V (строки — ключи, то есть k)
# становится фрагментом B, а K без `.trans` — фрагментом Kᵀ.
#
# **Встроенный PTX и адреса.** CUDA C вставляет инструкцию PTX через `asm volatile("шаблон" : выходы : входы)`:
# `%0, %1, …` — операнды по порядку, сначала выходы. Буква у операнда говорит, в каком регистре PTX он живёт (NVIDIA,
# «Inline PTX Assembly in CUDA», раздел «Constraints»):
#
# | ограничение | регистр PTX | что это в каркасе |
# | --- | --- | --- |
# | `"h"` | 16 бит (`.u16`) | половинка f16 — `unsigned short` |
# | `"r"` | 32 бита (`.u32`) | `unsigned`, `int`, два f16 в одном слове, 32-битный адрес разделяемой памяти |
# | `"l"` | 64 бита (`.u64`) | указатель на глобальную память (`src` у `cp.async`) |
# | `"f"` | float (`.f32`) | `float` |
#
# `=` перед буквой — операнд только пишется (выход), `+` — читается и пишется (аккумулятор `c` у `mma`), без знака —
# вход. `volatile` не даёт компилятору выбросить или переставить вставку. Никаких заголовков NVRTC не нужно:
# половинки f16 в каркасе — просто `unsigned short`, а перевод float → f16 — PTX `cvt.rn.f16.f32` (округление к
# ближайшему).
#
# Указатель C (`f16* dst`) — **общий** (generic) 64-битный адрес: в общем адресном пространстве есть окна глобальной,
# разделяемой и локальной памяти, и по адресу железо само решает, куда идти (PTX ISA, «Generic Addressing»).
# Инструкции с суффиксом `.shared` (`ldmatrix`, `cp.async … .shared.global`) хотят другое — 32-битное смещение внутри
# окна разделяемой памяти блока. Переводит `__cvta_generic_to_shared(p)` (cvta — convert address; CUDA C++
# Programming Guide, «Address Space Conversion Functions»); поэтому адрес в разделяемой памяти идёт как `"r"`, а
# адрес в глобальной — как `"l"`.
#
# `ex2.approx.ftz.f32` в `fast_exp2` — приближённое $2^x$; `.ftz` (flush to zero) заменяет нулём субнормальные
# входы и результаты — числа меньше $2^{-126} \approx 1.2 \cdot 10^{-38}$ (PTX ISA, `ex2`). Для softmax это
# безопасно: такой `p` рядом с `p = 1` у максимума строки не меняет сумму $\ell$ ни в одном бите float32.
#
# **Банки разделяемой памяти** — урок 06, раздел 6: 32 банка по 4 байта, банк адреса — (адрес / 4) mod 32.
# `ldmatrix` читает за один проход восемь строк по 16 байт (4 слова). Строка тайла K при d = 64 — 64 f16 = 128
# байт: все восемь строк начинаются в банке 0 и делят банки 0–3 (8-кратный конфликт). Каркас дополняет каждую строку
# 8 элементами (16 байт): шаг строки `D + 8` = 144 байта, строка r начинается в банке 4r mod 32, и восемь строк
# занимают 32 разных банка. Всё это — в числах:

# %% id="m3-numbers"
from autograder.lessons.lesson06 import cuda_basics as cb   # банки и occupancy — урок 06
from autograder.lessons.lesson09 import cuda_notes as cn
word = cn.pack_f16x2(1.0, -2.0)
print(f"pack_f16x2(1.0, -2.0) = {word:#010x}: младшие 16 бит — f16(1.0) = {word & 0xFFFF:#06x}, старшие — "
      f"f16(-2.0) = {word >> 16:#06x} (каждая половинка — регистр \"h\", вместе — один регистр \"r\")")
x = np.float32([-10, -126, -130, -149])
print("2^x        :", np.exp2(x))
print("2^x с .ftz :", cn.flush_to_zero(np.exp2(x)))
for stride in (64, 64 + 8):                              # f16 в строке тайла K при d = 64: без добавки и с ней
    words = np.arange(8)[:, None] * stride * 2 + np.arange(0, 16, 4)   # 8 строк по 16 байт: адреса их слов
    print(f"шаг строки {stride} f16: строки начинаются в банках {cb.bank_of(words[:, 0])}, "
          f"конфликт {cb.conflict_degree(words)}-кратный")

# %% [markdown] id="w1"
# ## 3. Разминка: `mma_matmul_gpu` — C = A·B на тензорных ядрах
#
# Контракт: `mma_matmul_gpu(A, B)` — A (M, K) и B (K, N) `cupy`-массивы float16 в C-порядке, любые M, N, K ≥ 1;
# вернуть новый массив C (M, N) float32, накопление — в fp32. Ядро `mma_matmul(A, B, C, M, N, K)`:
# - один варп считает один тайл C размером 16×8 (строки `m0 … m0+15`, столбцы `n0 … n0+7`), шагами k по 8;
# - инструкция — `m16n8k8` (есть на всех GPU курса); фрагменты собираются прямо из глобальной памяти
#   функцией `at(...)`, которая за краем матрицы даёт 0 (так M, N и K не обязаны делиться на 16, 8 и 8);
# - варп, чей тайл целиком за краем, выходит **весь** (`mma.sync` требует все 32 потока варпа);
# - в C пишутся только элементы внутри (M, N).
#
# Допишите (1) сборку a0, a1, b0 и вызов `mma_m16n8k8`, (2) запись c0…c3 с защитой краёв.
# В обёртке (3) — запуск, как в уроках 07–08: `kernel(grid, block, args)`, где grid и block — кортежи, args — кортеж
# аргументов ядра по порядку; блок из 128 потоков (4 варпа), блоков — столько, чтобы варпов хватило на все тайлы.
#
# Заглушка в строке с кодом CUDA C — те же две строки Python, что и везде (`# ВАШ КОД ЗДЕСЬ` и
# `raise NotImplementedError()`): удалите обе и впишите на их место код на CUDA C.

# %% nbgrader={"grade": false, "grade_id": "mma_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
MMA_SRC = r"""
// C = A B on tensor cores: A (M, K) and B (K, N) float16 in C order, C (M, N) float32.
// One warp computes one 16 x 8 tile of C with mma.sync m16n8k8 (sm_75 and later), k 8 at a time.
typedef unsigned short f16;                      // the 16 bits of an IEEE half (no cuda_fp16.h needed)

__device__ __forceinline__ unsigned pack2(f16 lo, f16 hi) { return (unsigned)lo | ((unsigned)hi << 16); }

// element (row, col) of a (rows, cols) f16 matrix in C order, or 0 outside it
__device__ __forceinline__ f16 at(const f16* p, int row, int col, int rows, int cols)
{
    return row < rows && col < cols ? p[(size_t)row * cols + col] : (f16)0;
}

// C (16x8, fp32) += A (16x8, f16, row-major fragment) * B (8x8, f16, column-major fragment)
__device__ __forceinline__ void mma_m16n8k8(float c[4], unsigned a0, unsigned a1, unsigned b0)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
}

extern "C" __global__ void mma_matmul(const f16* A, const f16* B, float* C, int M, int N, int K)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    const int tiles_n = (N + 7) / 8;
    const int m0 = (warp / tiles_n) * 16, n0 = (warp % tiles_n) * 8;   // this warp's tile of C
    if (m0 >= M) return;                         // the whole warp leaves together: mma.sync needs all 32 lanes
    const int g = lane >> 2, t = lane & 3;       // lane = 4 g + t
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};       // c0, c1: row m0 + g, columns n0 + 2t, +1; c2, c3: row m0 + g + 8
    for (int k0 = 0; k0 < K; k0 += 8) {
        // (1) a0: A[m0 + g][k0 + 2t], A[m0 + g][k0 + 2t + 1]; a1: the same for row m0 + g + 8;
        //     b0: B[k0 + 2t][n0 + g], B[k0 + 2t + 1][n0 + g]; then c += a b
        // ### BEGIN SOLUTION
        const int k = k0 + 2 * t;
        const unsigned a0 = pack2(at(A, m0 + g, k, M, K), at(A, m0 + g, k + 1, M, K));
        const unsigned a1 = pack2(at(A, m0 + g + 8, k, M, K), at(A, m0 + g + 8, k + 1, M, K));
        const unsigned b0 = pack2(at(B, k, n0 + g, K, N), at(B, k + 1, n0 + g, K, N));
        mma_m16n8k8(c, a0, a1, b0);
        // ### END SOLUTION
    }
    // (2) write c[0..3] to C: element e is row m0 + g (+ 8 for e >= 2), column n0 + 2t + (e & 1); only inside (M, N)
    // ### BEGIN SOLUTION
    for (int e = 0; e < 4; ++e) {
        const int row = m0 + g + (e >= 2 ? 8 : 0), col = n0 + 2 * t + (e & 1);
        if (row < M && col < N)
            C[(size_t)row * N + col] = c[e];
    }
    // ### END SOLUTION
}
"""

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_mma_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.mma_compiles', MMA_SRC)

# %% nbgrader={"grade": false, "grade_id": "mma_matmul_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mma_matmul_gpu(A, B):
    M, K = A.shape
    K2, N = B.shape
    if K2 != K or A.dtype != cp.float16 or B.dtype != cp.float16:
        raise ValueError("ожидаются A (M, K) и B (K, N) float16")
    A, B = cp.ascontiguousarray(A), cp.ascontiguousarray(B)
    C = cp.empty((M, N), dtype=cp.float32)
    kernel = cp.RawKernel(MMA_SRC, "mma_matmul")
    warps = ((M + 15) // 16) * ((N + 7) // 8)      # one warp per 16 x 8 tile of C
    # (3) launch: blocks of 128 threads (4 warps), enough blocks for all warps; M, N, K as np.int32
    ### BEGIN SOLUTION
    kernel(((warps + 3) // 4,), (128,), (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    ### END SOLUTION
    return C


# %% [markdown] id="w2"
# Проверка: совпадение с эталоном float64 на формах 64×64×64, 100×37×77 (ни одна сторона не кратна тайлу) и 1×5×3.
# Допуск на каждый элемент — $2 K \cdot 2^{-24} \cdot (|A|\,|B|)_{ij}$: входы f16 точны, их произведения точны в
# fp32, ошибка — только от сложений в fp32. Но складывает тензорное ядро не по правилам IEEE: лишние биты слагаемых
# оно **отбрасывает** (округление к нулю), а не округляет к ближайшему (Fasi, Higham, Mikaitis, Pranesh, «Numerical
# behavior of NVIDIA tensor cores», PeerJ Computer Science 7:e330, 2021 — V100, T4, A100). Округление к ближайшему
# ошибается на одном сложении не больше чем на $2^{-24}$ от результата, отбрасывание — на $2^{-23}$. За K сложений
# набегает до $K \cdot 2^{-23} = 2K \cdot 2^{-24}$ от суммы модулей: допуск — ровно эта граница, без запаса.
# На H200 курса ошибка эталонного `mma_matmul` на положительных данных всегда отрицательна (признак отбрасывания) и
# по модулю около десятой доли $K \cdot 2^{-24}$ (`benchmarks/results/review_measurements_h200.json`, ключ
# `mma_matmul_error`).
# Накопление в f16 (`…f16.f16.f16.f16`) ошибается в $2^{-11}$ на каждом шаге — проверка его узнает и назовёт.

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_mma_matmul", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.mma_matmul', mma_matmul_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.mma_matmul', mma_matmul_gpu, cases=[{'M': 130, 'N': 200, 'K': 257, 'seed': 101}, {'M': 16, 'N': 8, 'K': 512, 'seed': 102}, {'M': 33, 'N': 1, 'K': 9, 'seed': 103}])
### END HIDDEN TESTS
# %% [markdown] id="e1"
# ## 4. Точность: что стоят 16 бит
#
# float16 хранит 10 бит мантиссы: округление к ближайшему ошибается не больше чем на $u_{16} = 2^{-11} \approx 4.9
# \cdot 10^{-4}$ относительно числа (у fp32 — $u_{32} = 2^{-24} \approx 6 \cdot 10^{-8}$). В ядре на тензорных ядрах
# 16 бит появляются в трёх местах:
# 1. **входы** Q, K, V — float16. Эталон считает с теми же числами (переведёнными в float64 без потерь), поэтому
#    округление входов в ошибку проверки не входит — оно есть, но одинаково у ядра и у эталона;
# 2. **P в f16 перед P·V**: каждое $\tilde p_{ij} = 2^{s_{ij} - m_i} \le 1$ округляется с относительной ошибкой
#    $\le u_{16}$ (если $\tilde p_{ij} \ge 2^{-14}$; меньшие $\tilde p$ — субнормальные числа f16, их ошибка абсолютная,
#    до $2^{-25}$, и при их ничтожном весе в сумме её можно не считать), значит ошибка $O_{ic}$ не больше $u_{16} \sum_j P_{ij} |V_{jc}| = u_{16} (P|V|)_{ic}$;
# 3. **выход** O в f16: ещё $u_{16} |O_{ic}|$.
#
# S = QKᵀ, m, l и O копятся в fp32 на тензорных ядрах, а они при сложении отбрасывают лишние биты (раздел 3):
# - S — сумма d произведений: ошибка до $d \cdot 2^{-23}$ от суммы модулей, в $2^{-11} / (d \cdot 2^{-23}) = 4096 / d$
#   раз меньше $u_{16}$ — в 64 раза при d = 64 и в 32 раза при d = 128;
# - O копится по n ключам, по 16 за одну `mma` (m16n8k16): до $(n/16) \cdot 2^{-23}$ от $(P|V|)_{ic}$ — около
#   $0.06\,u_{16}$ при n = 4096 и $0.25\,u_{16}$ при n = 16384 (ячейка ниже). Это не «в тысячи раз меньше» оценок 2 и 3,
#   а при длинных n — заметная их доля;
# - softmax — в fp32 на CUDA-ядрах.
#
# Отсюда допуск проверки на каждый элемент: $2 u_{16} \left((P|V|)_{ic} + |O_{ic}|\right)$ — сумма двух оценок,
# умноженная на 2: второй множитель покрывает накопление S и O на тензорных ядрах, логиты в fp32 и `ex2.approx`.

# %% id="e1b"
u16 = 2.0 ** -11
for d_ex in (64, 128):
    print(f"d = {d_ex:3}: ошибка S до {d_ex} · 2⁻²³ = u16 / {u16 / (d_ex * 2.0 ** -23):.0f}")
for n_ex in (4096, 16384):
    print(f"n = {n_ex:5}: накопление O до (n/16) · 2⁻²³ = {n_ex / 16 * 2.0 ** -23 / u16:.2f} · u16")

# %% [markdown] id="e1c"
# Ниже — модель ядра на NumPy (те же тайлы, P в f16, аккумуляторы fp32 с округлением к ближайшему — отбрасывания
# тензорных ядер в ней нет), чтобы увидеть ошибку без GPU, рядом с
# fp32-вариантом урока 08 (P не округляется).
#
# **Прогноз 2.** Во сколько раз максимальная ошибка f16-ядра больше ошибки fp32-ядра при n = 4096, d = 64?
# Впишите число.

# %% id="e2"
my_error_ratio_prediction = None   # например, 100.0

# %% id="e3"
def attention_model(q, k, v, p_dtype, out_dtype, bc=64):
    """FlashAttention-2 over K/V tiles of bc rows: fp32 S, m, l and O; P rounded to p_dtype before P V."""
    n, d = q.shape
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    scale = np.float32(1 / math.sqrt(d))
    m = np.full((n, 1), -np.inf, np.float32)
    l = np.zeros((n, 1), np.float32)
    o = np.zeros((n, d), np.float32)
    for k0 in range(0, n, bc):
        s = (q32 @ k32[k0:k0 + bc].T) * scale
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new)
        l = l * alpha + p.sum(axis=1, keepdims=True)
        o = o * alpha + p.astype(p_dtype).astype(np.float32) @ v32[k0:k0 + bc]
        m = m_new
    return (o / l).astype(out_dtype)


def exact_attention(q, k, v):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.T / math.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p @ v, p @ np.abs(v)


rng = np.random.default_rng(0)
worst = []   # max |error| / tolerance of the f16 model at each n
ns, errors = [128, 256, 512, 1024, 2048, 4096], {"f16": [], "fp32": [], "допуск": []}
for n in ns:
    q, k, v = (rng.standard_normal((n, 64)).astype(np.float16) for _ in range(3))
    exact, p_abs_v = exact_attention(q, k, v)
    errors["f16"].append(np.abs(attention_model(q, k, v, np.float16, np.float16) - exact).max())
    errors["fp32"].append(np.abs(attention_model(q, k, v, np.float32, np.float32) - exact).max())
    tolerance = 2 * 2.0**-11 * (p_abs_v + np.abs(exact))
    errors["допуск"].append(np.median(tolerance))
    worst.append((np.abs(attention_model(q, k, v, np.float16, np.float16) - exact) / tolerance).max())
for name, marker in (("f16", "o-"), ("fp32", "s-"), ("допуск", "k--")):
    label = {"f16": "P и O в f16 (тензорные ядра)", "fp32": "всё в fp32 (урок 08)",
             "допуск": "допуск проверки (медиана по элементам)"}[name]
    plt.loglog(ns, errors[name], marker, label=label)
plt.xlabel("n (d = 64, одна голова, входы float16)"); plt.ylabel("макс. |ошибка| против float64")
plt.legend(); plt.grid(True, which="both", alpha=0.3); plt.show()
print("макс. ошибка f16:", ", ".join(f"n={n}: {e:.1e}" for n, e in zip(ns, errors["f16"])))
print("худшая ошибка f16-модели в долях допуска:", ", ".join(f"n={n}: {w:.2f}" for n, w in zip(ns, worst)))
ratio = errors["f16"][-1] / errors["fp32"][-1]
print(f"n = 4096: ошибка f16 {errors['f16'][-1]:.2e}, fp32 {errors['fp32'][-1]:.2e} — в {ratio:.0f} раз больше")
if my_error_ratio_prediction is None:
    print("Прогноз не записан — впишите его в ячейку выше и запустите обе ячейки снова.")
else:
    print(f"Ваш прогноз: {my_error_ratio_prediction:g} — отличается от модели в {max(ratio, my_error_ratio_prediction) / max(min(ratio, my_error_ratio_prediction), 1e-12):.1f} раза.")

# %% [markdown] id="e4"
# Что видно на графике и в строках выше:
# - ошибка f16-модели с ростом n не растёт, а падает: строка O — взвешенное среднее строк V, и чем длиннее
#   последовательность, тем меньше каждый вес $P_{ij}$ и тем больше ошибок округления гасят друг друга;
# - она в сотни раз больше ошибки fp32-варианта (отношение напечатано выше) — это и есть цена скорости; для внимания
#   в LLM её хватает, и так считают все рабочие ядра (FlashAttention-2/3, cuDNN, SDPA в f16/bf16);
# - худшая ошибка — доля допуска: допуск — оценка сверху (все округления в одну сторону), а не подобранное число.
#   Ошибки, которые проверка ловит (P не перемасштабирован, перепутан фрагмент, нет маски), больше допуска на порядки.

# %% [markdown] id="f1"
# ## 5. FlashAttention на тензорных ядрах
#
# Алгоритм — FlashAttention-2 урока 05 и ядра урока 08; меняется, **кто держит данные**:
#
# | урок 08, шаг 2 (fp32, CUDA-ядра) | урок 09 (f16, тензорные ядра) |
# | --- | --- |
# | блок CUDA — тайл из 64 строк Q одной головы | блок из 4 варпов = $B_r$ = 128 строк; варп w ведёт строки 32w … 32w+31 — **два тайла m16** (`MT = 2`) |
# | тайл Q в разделяемой памяти | так же (f16); фрагменты A берёт `ldmatrix` на каждом шаге k (в регистрах им тесно) |
# | тайлы K/V по 32 строки, float | тайлы K/V по $B_c$ = 64 строки (`BC`; на GPU с меньшей разделяемой памятью — 32 или 16), f16, шаг строки D + 8 (без конфликтов банков `ldmatrix`), **по два буфера** |
# | S тайла — кусочки 4×4 у каждого потока | S — `BC/8` фрагментов C (16×8) на тайл m16: `s[mt][nn][e]`, nn — 8 ключей, e = 0…3 |
# | m, l строки сводятся `__shfl_xor_sync` восьми потоков | строку держат 4 потока группы g: `__shfl_xor_sync` со смещениями (offset) 1 и 2 |
# | P через разделяемую память | P остаётся в регистрах: фрагмент C → фрагмент A (раздел 2), округление в f16 |
# | O += P V на CUDA-ядрах | `mma` P·V: ldmatrix **.trans** по V |
#
# **Почему два тайла m16 на варп.** Фрагмент K (или V), который `ldmatrix` принёс из разделяемой памяти, годится
# для любого тайла строк Q. Варп с 16 строками тратит одну `ldmatrix.x4` на два MMA, варп с 32 строками — на
# четыре: вдвое меньше чтений разделяемой памяти и инструкций на тот же объём `mma`. Цена — вдвое больше
# аккумуляторов O в регистрах (раздел «Регистры» ниже).
#
# В каждом тайле m16 поток (`lane = 4g + t`) держит две строки Q: `r0 = q0 + 32·warp + 16·mt + g` и `r0 + 8`. Элемент
# `s[mt][nn][e]` — это ключ `k0 + 8·nn + 2t + (e & 1)` строки r0 (e = 0, 1) или r0 + 8 (e = 2, 3). Шаг online softmax
# на фрагментах одного тайла m16 — функция `softmax_step` (урок 04, в логарифмах по основанию 2:
# $e^x = 2^{x \log_2 e}$, `fast_exp2` — инструкция `ex2.approx`):
# 1. маска (только в варианте `MASK`): ключ ≥ n или (causal и ключ > строки) даёт −inf;
# 2. максимум строки по тайлу (`fmaxf`): у потока в каждом из `BC/8` фрагментов по 2 значения строки r0 (e = 0, 1) и по 2
#    — строки r0 + 8 (e = 2, 3); свой максимум поток сводит с тремя соседями группы:
#    `mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1))`, затем то же со смещением 2 (`0xffffffffu` — маска
#    участвующих потоков, последний аргумент — смещение `offset` номера lane, как в уроке 06);
# 3. `m_new = max(m, max_тайла)` — m хранится в единицах «сырых» S = QKᵀ; `u = m_new·c`, где `c = scale·log2(e)`;
#    множитель `alpha = 2^(m·c − u)` и `p = 2^(s·c − u)` — по одной `fmaf` перед `fast_exp2`
#    (`fmaf(a, b, c)` = a·b + c одной инструкцией: `p = fast_exp2(fmaf(s, c, -u))`; так делает и FlashAttention-2 —
#    масштаб не нужно умножать отдельно). Если `m_new` ещё −inf — строка без ключей, — берите
#    `u = 0`, чтобы не получить −inf − (−inf) = NaN; в `m` всё равно записывается `m_new`. В этом ядре такого
#    не случается — ключ 0 виден каждой строке уже в первом тайле, — но защита дёшева и нужна в общем случае;
# 4. `l = l·alpha + сумма p` (частичная сумма потока — сводится один раз в конце), **O *= alpha** — все `D/8` фрагментов.
#
# Маска нужна только на краевых тайлах (хвост n или диагональ в causal), поэтому `softmax_step` — шаблон с
# параметром `MASK`: компилятор строит его дважды, и обычный тайл не проверяет ключи вовсе. Пишите просто
# `if (MASK) { … }` — в варианте без маски компилятор выбросит эту ветку. Край считается для каждого варпа: тайл у
# диагонали краевой только для тех варпов, чьи строки он пересекает.
#
# **Про скорость (не оценивается).** Максимум и сумму строки можно копить в одной переменной: каждая следующая
# `fmaxf` тогда ждёт предыдущую. Эталон копит их в четырёх (по одной на e) и сводит в конце, но на H200 это не
# дало заметной разницы: в прогоне 5 из `benchmarks/results/tc_variants_h200.json` варианты `s2_pad_split` (одна
# переменная) и `s2_pad_split_tree` (четыре) расходятся не больше чем на 4 % в обе стороны — пока одни варпы ждут,
# другие считают.
#
# **Конвейер загрузок.** У K и V по два буфера. На sm_80+ тайлы грузит `cp.async` (копия global → shared без
# регистров и без ожидания): в начале тайла j варпы ждут, пока долетит тайл j (`wait_copies` — `cp.async.wait_group 0`),
# встречаются на **одном** `__syncthreads()` на тайл («тайл j готов у всех, тайл j − 1 больше никто не читает») и
# сразу просят тайл j + 1 в освободившийся буфер — он летит, пока считаются S, softmax и P·V тайла j. На sm_75
# ветка `#else` копирует обычными загрузками (синхронно), а барьер тот же.
#
# Как поток узнаёт, что его копии долетели (PTX ISA, `cp.async.commit_group`, `cp.async.wait_group`): `cp.async`
# только ставит копию в очередь; `commit_copies` (`cp.async.commit_group`) закрывает все копии, поставленные с прошлого
# commit, в одну **группу** — у нас группа = тайл; `wait_copies` (`cp.async.wait_group N`) ждёт, пока незавершёнными
# останутся не больше N последних групп этого потока (N = 0 — все). Поток ждёт только **свои** копии, а тайл грузили
# все: поэтому после `wait_copies` и нужен `__syncthreads()`.

# %% id="p5-pipeline"
cn.plot_cp_async_pipeline(tiles=4)
plt.show()

# %% [markdown] id="p5-contract"
#
# **Causal** — как в уроке 08: цикл по K/V кончается на `min(q0 + BR, n)`, а `tile_counter` получает число
# посчитанных пар тайлов. Блоки запускаются от длинных строк к коротким (`q0` считается от конца), `blockIdx.x` —
# голова, чтобы длинные блоки всех голов шли первыми.
#
# **Контракт.** `FLASH_TC_SRC` содержит ядра `flash_attention_tc_d64` и `flash_attention_tc_d128` с сигнатурой
# `(const f16* Q, const f16* K, const f16* V, f16* O, int n, float scale, int causal, int* tile_counter)`;
# `flash_attention_tc_gpu(Q, K, V, causal=False, tile_counter=None)` — Q, K, V `cupy`-массивы (H, n, d) float16,
# d ∈ {64, 128}, результат — новый массив (H, n, d) float16; остальное — как в уроке 08 (любое n ≥ 1, без (n, n)
# в глобальной памяти, одно деление на l в конце, `tile_counter`).
#
# Каркас готов целиком, кроме пяти мест: (1) `mma_m16n8k16` для S = Q Kᵀ в обоих тайлах m16, (2) шаг online
# softmax в `softmax_step`, (3) там же — перевод P в f16-фрагменты A, (4) `mma_m16n8k16` для O += P V в обоих тайлах
# m16; и (5) — строка запуска в обёртке. Помощники (`ldmatrix_x4`, `ldmatrix_x4_trans`, `mma_m16n8k16`, `pack_f16x2`,
# `fast_exp2`, `load_tile`) трогать не нужно. В (1) и (4) вторую пару регистров B передают указателем: `kb + 2` —
# это адрес `kb[2]` (срезов, как `kb[2:4]` в NumPy, в C нет).
#
# **C++ каркаса.** `template <int D, bool MASK>`, `constexpr`, `#pragma unroll` — из таблицы урока 06 (раздел 4).
# Новое — параметры `softmax_step` вида `float (&s)[BC / 8][4]`: **ссылка на массив** BC/8 × 4. Функция работает
# с массивом вызывающего, без копии (как функция NumPy, которая меняет переданный массив на месте), а размеры — часть
# типа. Параметр `float s[BC / 8][4]` без `(&…)` C превратил бы в указатель, размер бы потерялся, и массив пришлось бы
# держать в памяти; со ссылкой после встраивания (`__forceinline__`) и `#pragma unroll` каждый `s[nn][e]` — свой
# регистр. Что видит `sizeof` у `float s[4]` и у `float (&s)[4]`, проверяет NVRTC (ячейка ниже, GPU не нужен).
#
# **Регистры.** Ядро держит в регистрах O двух тайлов m16 (2 × D/8 фрагментов по 4 float — 128 регистров при
# d = 128), S тайла (2 × BC/8 фрагментов — 64 регистра при BC = 64), m, l и адреса. Проверка компиляции печатает,
# сколько регистров на поток вышло: у эталона при d = 128 — 255 (sm_90), у вашего ядра число может быть другим (оно
# зависит от кода и версии NVRTC). `__launch_bounds__(128, 2)` просит компилятор уложиться так, чтобы на SM
# поместились 2 блока: 65 536 регистров / 256 потоков = 256 на поток, а больше 255 на поток не бывает вообще. Спиллов (вытеснения регистров в
# локальную память) быть не должно — проверка компиляции о них предупредит. Прежняя версия эталона вела 16 строк
# на варп (один тайл m16) и была медленнее в 1.2–1.4 раза; что дал каждый шаг — в
# `benchmarks/results/tc_variants_h200.json` (например, цикл `load_tile` без деления и с известным числом шагов
# поднял ядро при n = 4096, d = 128 с 305 до 344 TFLOP/s).
#
# Сколько блоков живёт на SM, считает `cb.resident_blocks` урока 06 (раздел 1, там же — что такое волна): лимит —
# наименьший из потоков, регистров и разделяемой памяти.

# %% id="p5-cpp"
print("sizeof(s) внутри функции:", cn.array_parameter_sizes(), "байт")
for gpu, bc in (("T4 (Colab)", 16), ("H200", 64)):       # BC, который обёртка берёт при d = 128
    limits = cb.resident_blocks(gpu, 128, 255, (128 + 4 * bc) * (128 + 8) * 2)
    print(f"{gpu}: d = 128, BC = {bc}, 255 регистров: {limits} → блоков на SM: {min(limits.values())}")

# %% nbgrader={"grade": false, "grade_id": "flash_tc_source", "locked": false, "schema_version": 3, "solution": true, "task": false}
FLASH_TC_SRC = r"""
// FlashAttention forward on tensor cores (mma.sync), float16 inputs, float32 accumulators.
// A block of NW = 4 warps owns BR = 128 query rows of one head; warp w owns rows 32w .. 32w + 31 as MT = 2
// m16 tiles, so every K or V fragment that ldmatrix brings feeds two MMAs. K/V tiles of BC rows stream
// through shared memory in two buffers: cp.async fills tile j + 1 while tile j is computed. S, P, m, l and O
// live in registers as mma fragments: lane = 4 * g + t holds rows g and g + 8 of each of its m16 tiles.
#ifndef BC                                       // keys per K/V tile; the wrapper passes -DBC=... (what fits)
#if __CUDA_ARCH__ >= 800
#define BC 64
#else
#define BC 16                                    // a T4 at d = 128 (64 KiB of shared memory per block)
#endif
#endif
#define NW 4
#define MT 2
#define NEG_INF (-__int_as_float(0x7f800000))   // -infinity (NVRTC has no math.h)
typedef unsigned short f16;                      // the 16 bits of an IEEE half (no cuda_fp16.h needed)

// ---- fragment helpers (given) -----------------------------------------------------------
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi)
{
    // two floats -> one 32-bit register of two halves, lo in the low 16 bits (round to nearest)
#if __CUDA_ARCH__ >= 800
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));   // one instruction for both
    return r;
#else
    unsigned short a, b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(a) : "f"(lo));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(hi));
    return (unsigned)a | ((unsigned)b << 16);
#endif
}

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));   // 2^x; 2^-inf = 0
    return y;
}

// C (16x8, fp32) += A (16x8, f16, row) * B (8x8, f16, col): exists from sm_75 (T4) on
__device__ __forceinline__ void mma_m16n8k8(float c[4], unsigned a0, unsigned a1, unsigned b0)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
}

// C (16x8, fp32) += A (16x16) * B (16x8): one m16n8k16 from sm_80 (A100) on, two m16n8k8 on sm_75
__device__ __forceinline__ void mma_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2])
{
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    mma_m16n8k8(c, a[0], a[1], b[0]);   // k 0..7
    mma_m16n8k8(c, a[2], a[3], b[1]);   // k 8..15
#endif
}

// four 8x8 f16 matrices from shared memory; lanes 8i .. 8i+7 give the row addresses of matrix i,
// and register i of lane 4g + t receives row g, columns 2t and 2t+1 of matrix i (.trans: transposed)
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const f16* row)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const f16* row)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

// copies global -> shared 16 bytes at a time; cp.async (sm_80+) does it without registers and without waiting
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void copy16(f16* dst, const f16* src, bool valid)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(address), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group 0;\n" ::); }
#else
__device__ __forceinline__ void copy16(f16* dst, const f16* src, bool valid)
{
    *reinterpret_cast<uint4*>(dst) = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void commit_copies() {}
__device__ __forceinline__ void wait_copies() {}
#endif

// rows row0 .. row0 + ROWS - 1 of a (n, D) matrix into a tile with a padded row stride (zeros past n).
// Each thread copies one 16-byte column piece of every STEP-th row: no division inside the loop, and a
// trip count known at compile time (the loop unrolls) -- this loop alone was worth 10 % of the kernel's time.
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(f16* tile, const f16* src, int row0, int n)
{
    constexpr int CHUNKS = D / 8, STEP = 32 * NW / CHUNKS, STRIDE = D + 8;
    const int col = (threadIdx.x % CHUNKS) * 8, r = threadIdx.x / CHUNKS;
    #pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const int row = r + i * STEP, g = row0 + row;
        copy16(tile + row * STRIDE + col, src + (size_t)(g < n ? g : 0) * D + col, g < n);
    }
}

// ---- one online-softmax step for one m16 tile (the holes (2) and (3)) ---------------------------
// s[nn][e]: the raw score Q K^T of key k0 + 8 nn + 2 t + (e & 1) and row r0 (e = 0, 1) or r0 + 8 (e = 2, 3).
// m: the two rows' running maxima of raw scores; l: this lane's part of the rows' sums; o: the rows' O fragments.
// MASK: this tile crosses n or the causal diagonal, so some keys must be masked (compiled twice: with and without).
template <int D, bool MASK>
__device__ __forceinline__ void softmax_step(float (&s)[BC / 8][4], float (&m)[2], float (&l)[2], float (&o)[D / 8][4],
                                             unsigned (&pa)[BC / 16][4], int k0, int r0, int n, int causal,
                                             float scale_log2)
{
    constexpr int SN = BC / 8, PK = BC / 16, ON = D / 8;
    const int t = threadIdx.x & 3;
    // (2) 1. if MASK: key >= n or (causal and key > row) -> s = NEG_INF; row max of the tile over this lane's
    //        values, then __shfl_xor_sync with 1 and 2 (the 4 lanes of the group)
    //     2. m_new = max(m, tile max); with u = m_new * scale_log2 (0 while m_new is still NEG_INF):
    //        alpha = fast_exp2(m * scale_log2 - u) and p = fast_exp2(s * scale_log2 - u), one fmaf each;
    //        overwrite s with p
    //     3. l = l * alpha + (sum of this lane's p); every o[nn][e] *= alpha of its row; m = m_new
    // ### BEGIN SOLUTION
    if (MASK) {
        #pragma unroll
        for (int nn = 0; nn < SN; ++nn)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + 8 * nn + 2 * t + (e & 1), row = e < 2 ? r0 : r0 + 8;
                if (key >= n || (causal && key > row)) s[nn][e] = NEG_INF;
            }
    }
    float mx[4] = {s[0][0], s[0][1], s[0][2], s[0][3]};   // four independent chains, not one long one
    #pragma unroll
    for (int nn = 1; nn < SN; ++nn)
        #pragma unroll
        for (int e = 0; e < 4; ++e) mx[e] = fmaxf(mx[e], s[nn][e]);
    float mx0 = fmaxf(mx[0], mx[1]), mx1 = fmaxf(mx[2], mx[3]);
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m[0], mx0), mn1 = fmaxf(m[1], mx1);
    const float u0 = mn0 == NEG_INF ? 0.0f : mn0 * scale_log2;   // no key yet: 0, not -inf - (-inf) = NaN
    const float u1 = mn1 == NEG_INF ? 0.0f : mn1 * scale_log2;
    const float alpha0 = fast_exp2(fmaf(m[0], scale_log2, -u0)), alpha1 = fast_exp2(fmaf(m[1], scale_log2, -u1));
    m[0] = mn0;
    m[1] = mn1;
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    #pragma unroll
    for (int nn = 0; nn < SN; ++nn)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[nn][e] = fast_exp2(fmaf(s[nn][e], scale_log2, e < 2 ? -u0 : -u1));
            sum[e] += s[nn][e];
        }
    l[0] = l[0] * alpha0 + (sum[0] + sum[1]);   // this lane's keys only: the group sums at the end
    l[1] = l[1] * alpha1 + (sum[2] + sum[3]);
    #pragma unroll
    for (int nn = 0; nn < ON; ++nn) {
        o[nn][0] *= alpha0; o[nn][1] *= alpha0;
        o[nn][2] *= alpha1; o[nn][3] *= alpha1;
    }
    // ### END SOLUTION
    // (3) P as A fragments of O += P V: pa[kk] holds keys 16 kk .. 16 kk + 15:
    //     pa[kk][0] = pack_f16x2(s[2 kk][0], s[2 kk][1]) (row r0), pa[kk][1] = the same of e = 2, 3 (row r0 + 8);
    //     pa[kk][2], pa[kk][3]: the same from s[2 kk + 1]
    // ### BEGIN SOLUTION
    #pragma unroll
    for (int kk = 0; kk < PK; ++kk) {
        pa[kk][0] = pack_f16x2(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = pack_f16x2(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack_f16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack_f16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    // ### END SOLUTION
}

template <int D>
__device__ __forceinline__ void flash_tc(const f16* __restrict__ Q, const f16* __restrict__ K,
                                         const f16* __restrict__ V, f16* __restrict__ O,
                                         int n, float scale, int causal, int* tile_counter)
{
    constexpr int BR = 16 * MT * NW;            // query rows per block
    constexpr int STRIDE = D + 8;               // padded shared-memory row: ldmatrix without bank conflicts
    constexpr int DK = D / 16;                  // k-steps of S = Q K^T
    constexpr int SN = BC / 8;                  // n-tiles (8 keys) of S
    constexpr int PK = BC / 16;                 // k-steps of O += P V
    constexpr int ON = D / 8;                   // n-tiles (8 columns) of O
    extern __shared__ uint4 shared16[];
    f16* Qs = reinterpret_cast<f16*>(shared16); // BR x D (stride STRIDE): the Q tile, for the whole loop
    f16* Ks = Qs + BR * STRIDE;                 // 2 buffers of BC x D
    f16* Vs = Ks + 2 * BC * STRIDE;             // 2 buffers of BC x D

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;                    // fragment row group
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;   // longest causal rows first
    const size_t head = (size_t)blockIdx.x * n * D;
    Q += head; K += head; V += head; O += head;
    const int wr = 16 * MT * warp;              // the warp's first row in the Q tile
    const float scale_log2 = scale * 1.4426950408889634f; // exp(x) = 2^(x log2 e)

    const int kv_end = causal ? min(n, q0 + BR) : n;   // causal: no key after the block's last row
    const int tiles = (kv_end + BC - 1) / BC;
    load_tile<D, BR>(Qs, Q, q0, n);
    load_tile<D, BC>(Ks, K, 0, n);
    load_tile<D, BC>(Vs, V, 0, n);
    commit_copies();                            // group: Q, K_0, V_0

    float o[MT][ON][4];                         // O accumulator fragments of the two m16 tiles
    float m[MT][2], l[MT][2];                   // online softmax of rows r0 and r0 + 8 of each m16 tile
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn)
            o[mt][nn][0] = o[mt][nn][1] = o[mt][nn][2] = o[mt][nn][3] = 0.0f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int j = 0; j < tiles; ++j) {
        const int k0 = j * BC;
        wait_copies();                          // tile j has landed (this thread's copies) ...
        __syncthreads();                        // ... and everyone's; every warp is done with tile j - 1
        if (j + 1 < tiles) {                    // tile j + 1 into the buffer of tile j - 1, in flight during tile j
            load_tile<D, BC>(Ks + ((j + 1) & 1) * BC * STRIDE, K, k0 + BC, n);
            load_tile<D, BC>(Vs + ((j + 1) & 1) * BC * STRIDE, V, k0 + BC, n);
        }
        commit_copies();
        const f16* Kt = Ks + (j & 1) * BC * STRIDE;
        const f16* Vt = Vs + (j & 1) * BC * STRIDE;

        // (1) S = Q K_j^T: s[mt][nn] is the 16 x 8 fragment of m16 tile mt and keys k0 + 8 nn .. k0 + 8 nn + 7
        float s[MT][SN][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn)
                s[mt][nn][0] = s[mt][nn][1] = s[mt][nn][2] = s[mt][nn][3] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
            unsigned qa[MT][4];                 // A fragments of Q: m16 tile mt, columns 16 kk .. + 15
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                ldmatrix_x4(qa[mt], Qs + (wr + 16 * mt + (lane & 15)) * STRIDE + 16 * kk + ((lane >> 4) << 3));
            #pragma unroll
            for (int nn = 0; nn < SN; nn += 2) {
                unsigned kb[4];                 // B fragments of n-tiles nn (kb[0], kb[1]) and nn + 1 (kb[2], kb[3])
                ldmatrix_x4(kb, Kt + (8 * nn + (lane & 7) + ((lane >> 4) << 3)) * STRIDE + 16 * kk + ((lane >> 3) & 1) * 8);
                // s[mt][nn] += Q K^T for n-tile nn and s[mt][nn + 1] for nn + 1, in both m16 tiles (A: qa[mt];
                // B: kb for n-tile nn, kb + 2 -- the address of kb[2] -- for nn + 1)
                // ### BEGIN SOLUTION
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(s[mt][nn], qa[mt], kb);
                    mma_m16n8k16(s[mt][nn + 1], qa[mt], kb + 2);
                }
                // ### END SOLUTION
            }
        }

        // (2), (3) in softmax_step; the mask only where this warp's rows meet n or the diagonal
        const bool edge = k0 + BC > n || (causal && k0 + BC - 1 > q0 + wr);
        unsigned pa[MT][PK][4];
        if (edge) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                softmax_step<D, true>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, q0 + wr + 16 * mt + g, n, causal, scale_log2);
        } else {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                softmax_step<D, false>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, q0 + wr + 16 * mt + g, n, causal, scale_log2);
        }

        // (4) O += P V_j
        #pragma unroll
        for (int kk = 0; kk < PK; ++kk) {
            #pragma unroll
            for (int nn = 0; nn < ON; nn += 2) {
                unsigned vb[4];                 // B fragments of n-tiles nn (vb[0], vb[1]) and nn + 1 (vb[2], vb[3])
                ldmatrix_x4_trans(vb, Vt + (16 * kk + (lane & 15)) * STRIDE + 8 * nn + ((lane >> 4) << 3));
                // o[mt][nn] += P V for n-tile nn and o[mt][nn + 1] for nn + 1, in both m16 tiles (A: pa[mt][kk];
                // B: vb and vb + 2)
                // ### BEGIN SOLUTION
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(o[mt][nn], pa[mt][kk], vb);
                    mma_m16n8k16(o[mt][nn + 1], pa[mt][kk], vb + 2);
                }
                // ### END SOLUTION
            }
        }
    }

    // one division per row, at the very end; the 4 lanes of a group hold parts of l
    const int t = lane & 3;
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = q0 + wr + 16 * mt + g, r1 = r0 + 8;
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn) {
            const int c = 8 * nn + 2 * t;
            if (r0 < n) *reinterpret_cast<unsigned*>(O + (size_t)r0 * D + c) = pack_f16x2(o[mt][nn][0] * inv0, o[mt][nn][1] * inv0);
            if (r1 < n) *reinterpret_cast<unsigned*>(O + (size_t)r1 * D + c) = pack_f16x2(o[mt][nn][2] * inv1, o[mt][nn][3] * inv1);
        }
    }
    if (tile_counter != nullptr && threadIdx.x == 0)
        atomicAdd(tile_counter, tiles);         // (Q tile, K/V tile) pairs computed
}

extern "C" __global__ void __launch_bounds__(128, 2)
flash_attention_tc_d64(const f16* Q, const f16* K, const f16* V, f16* O, int n, float scale, int causal, int* tile_counter)
{
    flash_tc<64>(Q, K, V, O, n, scale, causal, tile_counter);
}

extern "C" __global__ void __launch_bounds__(128, 2)
flash_attention_tc_d128(const f16* Q, const f16* K, const f16* V, f16* O, int n, float scale, int causal, int* tile_counter)
{
    flash_tc<128>(Q, K, V, O, n, scale, causal, tile_counter);
}
"""

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_flash_compiles", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.flash_compiles', FLASH_TC_SRC)

# %% [markdown] id="f2"
# Обёртка почти готова, осталось (5) — запуск: сетка `(H, ⌈n / 128⌉)` (`blockIdx.x` — голова, `blockIdx.y` — тайл Q),
# блок из 128 потоков, `shared_mem=shared`, аргументы в порядке сигнатуры ядра (`n` и `causal` — `np.int32`,
# `scale = 1/√d` — `np.float32`). Динамическая разделяемая память — тайл Q из 128 строк и по два буфера K и V из
# BC строк, строка D + 8 элементов f16: $(128 + 4 B_c)(d + 8) \cdot 2$ байт. Обёртка берёт наибольшее BC из 64, 32, 16,
# которое влезает в предел блока этого GPU, и передаёт его ядру при компиляции (`options=("-DBC=…",)`):
# на H200 и A100 — BC = 64 (54 КиБ при d = 64, 102 КиБ при d = 128), на RTX 30xx/40xx (99 КиБ на блок: compute
# capability 8.6 и 8.9 в таблице технических характеристик CUDA C++ Programming Guide) при d = 128 —
# BC = 32 (68 КиБ), на T4 (64 КиБ) при d = 128 — BC = 16 (51 КиБ). Больше 48 КиБ ядру нужно разрешить явно
# (`kernel.max_dynamic_shared_size_bytes`).

# %% nbgrader={"grade": false, "grade_id": "flash_attention_tc_gpu", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_attention_tc_gpu(Q, K, V, causal=False, tile_counter=None):
    H, n, d = Q.shape
    if d not in (64, 128) or K.shape != Q.shape or V.shape != Q.shape:
        raise ValueError("ожидаются Q, K, V одной формы (H, n, d) с d = 64 или 128")
    if any(a.dtype != cp.float16 or not a.flags.c_contiguous for a in (Q, K, V)):
        raise ValueError("ожидаются массивы float16 в C-порядке")
    O = cp.empty_like(Q)
    if tile_counter is None:
        tile_counter = cp.zeros(1, dtype=cp.int32)
    br = 128                                         # 4 варпа по 32 строки (BR в FLASH_TC_SRC)
    # ключей в тайле K/V: наибольшее BC, при котором тайл Q и по два буфера K и V (строка d + 8) влезают
    # в разделяемую память блока этого GPU — H200: 227 КиБ, RTX 30xx/40xx: 99 КиБ, T4: 64 КиБ
    limit = cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    bc = next(b for b in (64, 32, 16) if (br + 4 * b) * (d + 8) * 2 <= limit)
    shared = (br + 4 * bc) * (d + 8) * 2
    kernel = cp.RawKernel(FLASH_TC_SRC, f"flash_attention_tc_d{d}", options=(f"-DBC={bc}",))
    kernel.max_dynamic_shared_size_bytes = shared
    # (5) запуск: сетка (H, число тайлов Q по br строк), блок из 128 потоков, shared_mem=shared
    ### BEGIN SOLUTION
    kernel((H, (n + br - 1) // br), (128,),
           (Q, K, V, O, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(bool(causal)), tile_counter),
           shared_mem=shared)
    ### END SOLUTION
    return O


# %% [markdown] id="f3"
# Быстрая самопроверка (не оценивается; без GPU — на эмуляторе GPU):

# %% id="f4"
if cp is not None:   # на GPU или на эмуляторе GPU
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 100, 64)).astype(np.float16) for _ in range(3))
    exact, _ = exact_attention(q[0], k[0], v[0])
    got = flash_attention_tc_gpu(cp.asarray(q), cp.asarray(k), cp.asarray(v)).get()[0]
    print("макс. отклонение от float64:", np.abs(got.astype(np.float64) - exact).max())
    show_roofline()   # без GPU: байты и FLOP, которые эмулятор насчитал ядру, на roofline урока 01
else:
    print("Нет ни GPU, ни эмулятора GPU (он выключен) — самопроверка пропущена; проверки запуска ниже покажут «нужен GPU».")

# %% [markdown] id="f5"
# ### Проверки
#
# - совпадение с эталоном float64 без маски и с causal-маской (n кратно 128), отдельно **хвосты** (n = 1, 77, 100);
#   допуск — $2 u_{16} ((P|V|) + |O|)$ на каждый элемент (раздел 4);
# - на устройстве нет выделений размера (n, n);
# - causal пропускает тайлы: по счётчику доля пар тайлов не больше 0.6 от полного прогона (на эмуляторе, где n = 256,
#   — до 0.8); в отзыве — TFLOP/s
#   рядом с SDPA в f16 и fp32 (не оценивается);
# - нет выходов за границы и гонок в разделяемой памяти (эмулятор GPU, с GPU и без, как `compute-sanitizer` memcheck
#   и racecheck на GPU).
#
# Проверки памяти, пропуска тайлов и гонок засчитываются только при верном результате на своём случае.

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_equivalence", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.equivalence', flash_attention_tc_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.equivalence', flash_attention_tc_gpu, cases=[{'H': 3, 'n': 512, 'd': 128, 'seed': 101}, {'H': 1, 'n': 1024, 'd': 64, 'seed': 102}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_tails", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.tails', flash_attention_tc_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.tails', flash_attention_tc_gpu, cases=[{'H': 2, 'n': 33, 'd': 128, 'seed': 103}, {'H': 1, 'n': 500, 'd': 64, 'seed': 104, 'causal': True}, {'H': 1, 'n': 2, 'd': 64, 'seed': 105, 'causal': True}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_causal", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.causal', flash_attention_tc_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.causal', flash_attention_tc_gpu, cases=[{'H': 2, 'n': 512, 'd': 128, 'seed': 106}, {'H': 1, 'n': 128, 'd': 64, 'seed': 107}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_memory", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.memory', flash_attention_tc_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.memory', flash_attention_tc_gpu, cases=[{'H': 1, 'n': 4096, 'd': 128, 'seed': 109}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_causal_skip", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.causal_skip', flash_attention_tc_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.causal_skip', flash_attention_tc_gpu, cases=[{'H': 1, 'n': 2048, 'd': 128, 'seed': 110}])
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_lesson09_sanitizer", "locked": true, "schema_version": 3, "solution": false, "task": false}
from autograder import grade
grade('lesson09.sanitizer', flash_attention_tc_gpu)
### BEGIN HIDDEN TESTS
grade('lesson09.sanitizer', flash_attention_tc_gpu, cases=[{'H': 1, 'n': 77, 'd': 128, 'seed': 111}])
### END HIDDEN TESTS

# %% [markdown] id="s1"
# ## 6. Измеряем на вашем GPU
#
# TFLOP/s вашего ядра рядом с `scaled_dot_product_attention` из PyTorch в f16 и в fp32 (fp32 — уровень ядра
# урока 08). Без GPU или без PyTorch ячейка покажет, что смогла.

# %% id="s2"
def time_ms(fn, repeat=5):
    fn(); cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    end.record(); end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / repeat

if gpu_status()[0]:
    try:
        import torch
        sdpa = torch.nn.functional.scaled_dot_product_attention
    except ImportError:
        torch = None
    H = 16
    measured = []   # (имя, секунды, байты Q, K, V и O в f16, FLOP, на тензорных ядрах) — для roofline урока 01
    for n, d in ((4096, 64), (4096, 128)):
        q, k, v = (cp.random.standard_normal((H, n, d), dtype=cp.float32).astype(cp.float16) for _ in range(3))
        for causal in (False, True):
            flops = 4 * H * n * n * d / (2 if causal else 1)
            line = {"ваше ядро": time_ms(lambda: flash_attention_tc_gpu(q, k, v, causal))}
            measured.append((f"d={d}{', causal' if causal else ''}", line["ваше ядро"] / 1e3, 4 * q.nbytes, flops, True))
            if torch is not None:
                tq, tk, tv = (torch.as_tensor(a, device="cuda")[None] for a in (q, k, v))
                line["SDPA f16"] = time_ms(lambda: sdpa(tq, tk, tv, is_causal=causal))
                tq, tk, tv = (t.float() for t in (tq, tk, tv))
                line["SDPA fp32"] = time_ms(lambda: sdpa(tq, tk, tv, is_causal=causal), repeat=2)
            print(f"n={n} d={d:3d} causal={causal!s:5}: " +
                  ", ".join(f"{name} {flops / ms / 1e9:6.1f} TFLOP/s" for name, ms in line.items()))
    show_roofline(measured=measured)
else:
    print("GPU нет: измерения пропущены. Числа с H200 — в разделе 7.")

# %% [markdown] id="r1"
# ## 7. Эталонные ядра на H200: сколько до потолка
#
# Эталонное ядро этого урока (то, что в ячейке `FLASH_TC_SRC` выше), `scaled_dot_product_attention` из PyTorch
# в f16 на тех же входах и ядро шага 2 урока 08 (fp32, CUDA-ядра) — в одном прогоне, H = 16 голов, TFLOP/s по
# формуле $4 n^2 d$ (половина для causal):
#
# | n | d | causal | ядро, мс | ядро, TFLOP/s | SDPA f16, TFLOP/s | ядро / SDPA f16 | урок 08 fp32, TFLOP/s |
# | --- | --- | --- | --- | --- | --- | --- | --- |
# | 4096 | 64 | нет | 0.243 | 282 | 443 | 0.64× | 33.4 |
# | 4096 | 64 | да | 0.128 | 268 | 329 | 0.82× | 27.2 |
# | 4096 | 128 | нет | 0.429 | 320 | 599 | 0.54× | 35.8 |
# | 4096 | 128 | да | 0.227 | 303 | 431 | 0.70× | 28.9 |
# | 16384 | 64 | нет | 3.90 | 282 | 448 | 0.63× | — |
# | 16384 | 64 | да | 1.93 | 285 | 419 | 0.68× | — |
# | 16384 | 128 | нет | 7.25 | 303 | 592 | 0.51× | 36.8 |
# | 16384 | 128 | да | 3.47 | 317 | 538 | 0.59× | — |
#
# Измерено на NVIDIA H200 (132 SM), 2026-12-01, CuPy 14.2.0, PyTorch 2.11.0+cu130; команда
# `python benchmarks/gpu_kernels.py --tensor-cores`, результаты — `benchmarks/results/gpu_kernels_tc_h200.json` в
# репозитории курса. CUDA events, медиана пяти раундов после прогрева не короче 100 мс; наибольшее отличие от SDPA f16 на этих входах —
# 9.8·10⁻⁴ (шаг f16 у единицы).
#
# Что из этого следует:
# - тензорные ядра дают **8.2–10.5×** против fp32-ядра урока 08 (303 против 37 TFLOP/s при n = 16384, d = 128) —
#   меньше паспортных 14.8×, но близко к отношению потолков `mma.sync` и fp32 (630 / 67 ≈ 9.4×, раздел 1): сама
#   `mma.sync` на Hopper не выходит на паспорт. От её потолка наше ядро берёт 43–51 % (268–320 TFLOP/s), ядро урока 08
#   от fp32-пика — 41–55 % (27–37 из 67); остальное съедают softmax, загрузки тайлов и барьеры;
# - SDPA в f16 на H200 выбирает ядро, написанное под Hopper (по умолчанию — cuDNN, на асинхронных `wgmma`, урок 10):
#   330–600 TFLOP/s. Наше ядро на `mma.sync` даёт 0.51–0.82 от него; труднее всего — d = 128 без маски, где SDPA
#   быстрее всего: там 0.51–0.54, и от прогона к прогону SDPA гуляет на несколько процентов. Для масштаба:
#   FlashAttention-2, написанная на тех же `mma.sync`, на H100 (те же 132 SM и частоты) при d = 128 и n = 4k–16k
#   даёт 368–370 TFLOP/s без маски и 319–335 с causal (статья FlashAttention-3, arXiv 2407.08608, сравнение прямого
#   прохода). Наше ядро при d = 128 — 303–320 без маски и 303–317 с causal: 0.82–0.87 от FlashAttention-2 без
#   маски и почти вровень с ней в causal;
# - causal при n = 16384 быстрее полного внимания в 2.02× (d = 64) и 2.09× (d = 128): пропуск тайлов над диагональю
#   и запуск длинных блоков первыми работают;
# - до паспортных 989 TFLOP/s далеко всем `mma.sync`-ядрам: на Hopper полную скорость тензорных ядер даёт только
#   `wgmma` (потолок самой `mma.sync` — около 630 TFLOP/s, раздел 1), а TMA и варп-специализация — способ кормить
#   `wgmma` данными без остановок. Это следующий урок;
# - первый шаг к FlashAttention-3 — только `wgmma`, без TMA и варп-специализации — в репозитории курса сделан и
#   измерен: `benchmarks/tc_wgmma.cu` (варпгруппа из 4 варпов ведёт 64 строки Q; S = QKᵀ и O += PV — асинхронные
#   `wgmma` из разделяемой памяти, P — прямо из регистров; тайлы K/V по-прежнему грузит `cp.async`). На том же H200
#   при n = 16384, d = 128 без маски два его варианта в двух прогонах 2026-12-05 дали 373–408 TFLOP/s против
#   317–321 у ядра урока — 0.64–0.76 от SDPA f16 (`benchmarks/results/tc_wgmma_h200.json` и
#   `tc_wgmma_h200_again.json`). Одна смена инструкции дала около 1.2–1.3×; остальное, что есть у cuDNN и
#   FlashAttention-3, — то, что урок 10 разбирает на модели: softmax одной варпгруппы идёт, пока тензорные ядра
#   заняты другой, а данные подвозит отдельный варп через TMA.
#
# ## Итог
#
# - Тензорное ядро — инструкция **варпа**: `mma.sync` m16n8k8 (sm_75+) и m16n8k16 (sm_80+) умножают фрагменты
#   f16/bf16 и копят сумму в fp32; раскладка фрагментов задана PTX ISA — поток `4g + t` держит строки g и g + 8.
# - `ldmatrix` собирает фрагменты из разделяемой памяти за одну инструкцию, `.trans` превращает V в фрагмент B;
#   дополнение строки тайла на 16 байт убирает конфликты банков.
# - В FlashAttention-2 S остаётся фрагментом-аккумулятором, из него прямо в регистрах получается фрагмент A для
#   P·V; softmax идёт по строкам, которые делят 4 потока группы (`__shfl_xor_sync` со смещениями 1 и 2).
# - Скорость `mma.sync`-ядра решают не сами MMA, а всё вокруг: два тайла m16 на варп (фрагмент K/V идёт в четыре
#   MMA, а не в два), два буфера K/V с `cp.async`, маска только на краевых тайлах и копирование тайлов без лишней
#   арифметики адресов.
# - Цена 16 бит — ошибка порядка $2^{-11}$ от $P|V|$ и $|O|$; допуск проверки выведен из неё, а не подобран.
# - Интенсивность слитого внимания ~n/2 FLOP/Б, если K и V перечитываются из L2 (и меньше $B_r$, если из HBM): в
#   первом случае с тензорными ядрами оно упирается в вычисления, и всё, что не `mma` (softmax, загрузки, барьеры),
#   теперь видно во времени.
#
# ## Вопросы к уроку 10
#
# 1. В нашем ядре варп то ждёт тайл K/V на барьере, то считает `mma`, то softmax — по очереди. Hopper добавляет
#    асинхронный `wgmma` (варп-группа из 4 варпов, операнд B прямо из разделяемой памяти) и TMA (копия тайла
#    одной инструкцией). Наш единственный `__syncthreads()` на тайл значит две вещи сразу: «тайл j долетел у всех»
#    и «буфер тайла j − 1 больше никто не читает». Как их разделить, если тайлы грузит отдельный
#    варп-производитель, а готовность сообщают барьеры в памяти (mbarrier), — и что от этого выигрывают варпы,
#    которые считают?
# 2. Пока CUDA-ядра считают softmax тайла j, тензорные ядра этого варпа простаивают. Как две варп-группы,
#    работающие «пинг-понгом», могут занять тензорные ядра softmax-ом друг друга, и сколько это может дать, если
#    softmax занимает, скажем, четверть времени тайла?
# 3. Мы округляли P до f16 (10 бит мантиссы) и получили ошибку ~$2^{-11}$. FP8 e4m3 хранит 3 бита мантиссы: во
#    сколько раз вырастет та же оценка ошибки, и почему FA3 при этом масштабирует блоки и поворачивает Q и K
#    (Адамар)?
