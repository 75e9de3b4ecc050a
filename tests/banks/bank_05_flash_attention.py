"""Lesson 05 bank: flash_attention / flash_attention_v2 written right in other ways, and wrong.

Wrong answers are the reference (the notebook's solution, :func:`bank.reference_code`) with one edit
(``edited``), so each carries exactly one mistake.
"""
from bank import correct, edited, notebook_function, reference_code, wrong

LESSON = "05_flash_attention"

REFERENCE = reference_code(LESSON)
V1, V2 = REFERENCE["flash_attention"], REFERENCE["flash_attention_v2"]


def v2(*edits) -> dict[str, str]:
    return {"flash_attention_v2": edited(V2, *edits)}


def v1(*edits) -> dict[str, str]:
    return {"flash_attention": edited(V1, *edits)}


def fa2(*names: str) -> set[str]:
    return {f"lesson05.fa2_{name}" for name in names}


def fa1(*names: str) -> set[str]:
    return {f"lesson05.fa1_{name}" for name in names}


CORRECT = [
    correct("v1_in_fa2_order", {"flash_attention": V2.replace("flash_attention_v2", "flash_attention")}),
    correct("v1_fa1_order_unnormalised_acc", {"flash_attention": '''
def flash_attention(Q, K, V, Br=64, Bc=64, causal=False):
    n, d = Q.shape
    scale = np.float32(1.0 / np.sqrt(d))
    acc = np.zeros((n, d), dtype=np.float32)
    m = np.full(n, -np.inf, dtype=np.float32)
    l = np.zeros(n, dtype=np.float32)
    for j0 in range(0, n, Bc):
        j1 = min(j0 + Bc, n)
        first_row = j0 if causal else 0          # rows above j0 see nothing of this block
        for i0 in range(first_row - first_row % Br, n, Br):
            i1 = min(i0 + Br, n)
            S = np.einsum("id,jd->ij", Q[i0:i1], K[j0:j1]) * scale
            if causal:
                S = np.where(np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None], np.float32(-np.inf), S)
            m_new = np.maximum(m[i0:i1], S.max(axis=1))
            c = np.exp(m[i0:i1] - m_new)
            P = np.exp(S - m_new[:, None])
            l[i0:i1] = l[i0:i1] * c + P.sum(axis=1)
            acc[i0:i1] = acc[i0:i1] * c[:, None] + P @ V[j0:j1]
            m[i0:i1] = m_new
    acc /= l[:, None]
    return acc
'''}),
    correct("v2_float64_accumulators", v2(
        ("        m = np.full(i1 - i0, -np.inf, dtype=np.float32)\n"
         "        l = np.zeros(i1 - i0, dtype=np.float32)\n"
         "        acc = np.zeros((i1 - i0, d), dtype=np.float32)\n",
         "        m = np.full(i1 - i0, -np.inf)\n        l = np.zeros(i1 - i0)\n        acc = np.zeros((i1 - i0, d))\n"),
        ("S = (Qi @ Kj.T) * scale", "S = (Qi.astype(np.float64) @ Kj.T.astype(np.float64)) / np.sqrt(d)"),
        ("acc = acc * c[:, None] + P @ Vj", "acc = acc * c[:, None] + P @ Vj.astype(np.float64)"),
    )),
    correct("v2_einsum_lazy_rescale", {"flash_attention_v2": '''
def flash_attention_v2(Q, K, V, Br=64, Bc=64, causal=False):
    n, d = Q.shape
    O = np.empty_like(Q)
    for i0 in range(0, n, Br):
        i1 = min(i0 + Br, n)
        Qi = Q[i0:i1] * np.float32(d ** -0.5)            # a scaled copy of the block, not of Q
        m = np.full(i1 - i0, -np.inf, dtype=np.float32)
        l = np.zeros(i1 - i0, dtype=np.float32)
        acc = np.zeros((i1 - i0, d), dtype=np.float32)
        stop = min(n, i1) if causal else n
        for j0 in range(0, stop, Bc):
            j1 = min(j0 + Bc, n)
            S = np.einsum("id,jd->ij", Qi, K[j0:j1])
            if causal and j1 - 1 > i0:
                S = np.where(np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None], -np.inf, S).astype(np.float32)
            m_new = np.maximum(m, S.max(axis=1))
            grows = m_new > m
            if grows.any():                                  # rescale only rows whose max grew
                c = np.where(grows, np.exp(m - m_new), np.float32(1)).astype(np.float32)
                l *= c
                acc *= c[:, None]
                m = m_new
            P = np.exp(S - m[:, None])
            l += P.sum(axis=1)
            acc += np.einsum("ij,jd->id", P, V[j0:j1])
        O[i0:i1] = acc / l[:, None]
    return O
'''}),
    correct("v2_transposed_products", v2(
        ("S = (Qi @ Kj.T) * scale", "S = np.dot(Kj, Qi.T).T * scale"),
        ("                S[hidden] = -np.inf", "                S = np.where(hidden, np.float32(-np.inf), S)"),
    )),
]

WRONG = [
    wrong("v2_divide_inside_loop", v2(
        ("            acc = acc * c[:, None] + P @ Vj\n",
         "            acc = acc * c[:, None] + P @ Vj\n            acc = acc / l[:, None]\n"),
        ("        O[i0:i1] = acc / l[:, None]", "        O[i0:i1] = acc")),
        fa2("equivalence", "stability"), says="деление на l внутри цикла", mistakes='деление на l внутри цикла: acc нормируется на каждом шаге, а пересчёт exp(m_old − m_new) считает его ненормированным'),
    wrong("v2_mask_after_max", v2(
        ("            m_new = np.maximum(m, S.max(axis=1))\n", ""),
        ("            if causal:\n", "            m_new = np.maximum(m, S.max(axis=1))\n            if causal:\n")),
        fa2("stability"), says="маска накладывается после max", mistakes='маска накладывается после max: m учитывает скрытые (будущие) скоры'),
    wrong("v2_l_not_rescaled", v2(("l = l * c + P.sum(axis=1)", "l = l + P.sum(axis=1)")),
          fa2("equivalence", "stability"), says="l не домножается", mistakes='l не домножается на exp(m_old − m_new) при росте максимума'),
    wrong("v2_acc_not_rescaled", v2(("acc = acc * c[:, None] + P @ Vj", "acc = acc + P @ Vj")),
          fa2("equivalence", "stability"), says="acc не домножается", mistakes='acc не домножается на exp(m_old − m_new) при росте максимума'),
    wrong("v2_no_scale", v2(("S = (Qi @ Kj.T) * scale", "S = Qi @ Kj.T")),
          fa2("equivalence", "stability"), says="нет масштаба 1/√d", mistakes='нет масштаба 1/√d: S = Q Kᵀ'),
    wrong("v2_q_tail_dropped", v2(("O = np.empty((n, d), dtype=np.float32)", "O = np.zeros((n, d), dtype=np.float32)"),
                                  ("for i0 in range(0, n, Br):", "for i0 in range(0, n - n % Br, Br):")),
          fa2("equivalence", "stability", "causal_work"), says="хвост Q не обработан", mistakes='хвост Q не обработан: последние n mod Br строк не посчитаны'),
    wrong("v2_k_tail_dropped", v2(("for j0 in range(0, n, Bc):", "for j0 in range(0, n - n % Bc, Bc):")),
          fa2("equivalence", "causal_work"), says="хвост K/V не обработан", mistakes='хвост K/V не обработан: последние n mod Bc ключей пропущены'),
    wrong("v2_diagonal_masked", v2(("[None, :] > np.arange(i0, i1)", "[None, :] >= np.arange(i0, i1)")),
          fa2("equivalence", "stability"), says="замаскирована и диагональ", mistakes='замаскирована и диагональ (j ≥ i вместо j > i): строка 0 не видит ни одного ключа'),
    wrong("v2_m_starts_at_zero", v2(("m = np.full(i1 - i0, -np.inf, dtype=np.float32)",
                                     "m = np.zeros(i1 - i0, dtype=np.float32)")),
          fa2("stability"), says="m стартует с 0", mistakes='m стартует с 0, а не с −inf: при логитах ≪ 0 все exp обнуляются, 0/0 = NaN'),
    wrong("v2_float64_output_via_np_sqrt", v2(("S = (Qi @ Kj.T) * scale", "S = Qi @ Kj.T / np.sqrt(d)"),
                                             ("O = np.empty((n, d), dtype=np.float32)", "O = np.empty((n, d))")),
          fa2("contract"), says="NumPy 2"),
    wrong("v2_materialised_S", {"flash_attention_v2": edited(
        notebook_function(LESSON, "attention_naive"),   # the lesson's own naive attention: S and P of (n, n)
        ("def attention_naive(Q, K, V, causal=False):", "def flash_attention_v2(Q, K, V, Br=64, Bc=64, causal=False):"))},
          fa2("memory", "causal_work", "loop_order"), says="матрицы (n, n)"),
    wrong("v2_causal_without_skipping", v2(("            if causal and j0 > i1 - 1:\n                break\n", "")),
          fa2("causal_work"), says="посчитаны все блоки"),
    wrong("v2_one_extra_block", v2(("if causal and j0 > i1 - 1:", "if causal and j0 > i1:")),
          fa2("causal_work"), says="лишний блок сразу за диагональю"),
    wrong("v2_diagonal_block_skipped", v2(("if causal and j0 > i1 - 1:", "if causal and j0 >= i0:")),
          fa2("equivalence", "stability", "causal_work"), says="пропущен и диагональный блок", mistakes='пропущен и диагональный блок (условие пропуска j0 ≥ i0 — ошибка на единицу)'),
    wrong("v2_row_strip_against_all_of_K", v2(
        ("            Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]\n            S = (Qi @ Kj.T) * scale\n",
         "            Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]\n            S = ((Qi @ K.T) * scale)[:, j0:j0 + Bc]\n")),
          fa2("causal_work"), says="больше одного блока"),
    wrong("v2_in_fa1_order", {"flash_attention_v2": edited(V1, ("def flash_attention(", "def flash_attention_v2("))},
          fa2("loop_order"), says="порядок FA-1"),
    wrong("v2_scales_Q_in_place", v2(("        Qi = Q[i0:i1]\n", "        Qi = Q[i0:i1]\n        Qi *= scale\n"),
                                     ("S = (Qi @ Kj.T) * scale", "S = Qi @ Kj.T")),
          fa2("contract"), says="изменила вход Q"),
    wrong("v1_local_mask", v1(("hidden = np.arange(j0, j0 + len(Kj))[None, :] > np.arange(i0, i1)[:, None]",
                               "hidden = np.arange(len(Kj))[None, :] > np.arange(i1 - i0)[:, None]")),
          fa1("equivalence", "stability"), says="по локальным индексам", mistakes='causal-маска строится по локальным индексам блока, а не по глобальным i и j'),
    wrong("v1_skip_by_block_index", v1(("if causal and j0 > i1 - 1:", "if causal and j0 // Bc > i0 // Br:")),
          fa1("equivalence", "causal_work"), says="по номерам", mistakes='блоки пропускаются по номерам (j > i): верно только при Br = Bc'),
    wrong("v1_correction_inverted", v1(("c = np.exp(m_old - m_new)", "c = np.exp(m_new - m_old)")),
          fa1("equivalence", "stability"), says="множитель пересчёта — exp(m_old − m_new)"),
    wrong("v1_tracing_lost_by_np_asarray", v1(("    n, d = Q.shape\n", "    Q, K = np.asarray(Q), np.asarray(K)\n    n, d = Q.shape\n")),
          fa1("causal_work"), says="np.asarray"),
    wrong("v1_m_not_updated", v1(("m[i0:i1], l[i0:i1] = m_new, l_new", "l[i0:i1] = l_new")),
          fa1("equivalence", "stability"), says="m не обновляется", mistakes='m не обновляется (забыто m = m_new): acc и l каждый раз обнуляются множителем 0'),
    wrong("v1_divide_inside_without_l_old", v1(
        ("O[i0:i1] = ((l_old * c)[:, None] * O[i0:i1] + P @ Vj) / l_new[:, None]",
         "O[i0:i1] = (c[:, None] * O[i0:i1] + P @ Vj) / l_new[:, None]")),
          fa1("equivalence", "stability"), says="O хранится уже поделённым на l",
          mistakes='O хранится уже поделённым на l, а при пересчёте умножается только на exp(m_old − m_new): '
                   'нужно O_new = (l_old · exp(m_old − m_new) · O_old + P V) / l_new'),
    wrong("v1_max_of_block_only", v1(("m_new = np.maximum(m_old, S.max(axis=1))", "m_new = S.max(axis=1)")),
          fa1("equivalence", "stability"), says="старый максимум забыт", mistakes='m_new = max по блоку, без max(m_old, ·): старый максимум забыт'),
]
