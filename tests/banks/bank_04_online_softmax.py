"""Lesson 04 bank: the online-softmax state written right in other ways, and wrong."""
from bank import correct, wrong

LESSON = "04_online_softmax"

STATE_CHECKS = {"lesson04.worked_example", "lesson04.update_step", "lesson04.block_sizes",
                "lesson04.block_order", "lesson04.masked_blocks", "lesson04.huge_logits", "lesson04.merge"}


def update(body: str) -> dict[str, str]:
    return {"online_softmax_update": "def online_softmax_update(state, s_block, v_block):\n" + body}


def merge(body: str) -> dict[str, str]:
    return {"merge_states": "def merge_states(a, b):\n" + body}


CORRECT = [
    correct("block_max_form_in_place", update("""
    m, l, acc = state
    m_block = np.max(s_block)
    if m_block == -np.inf:                           # a fully masked block adds nothing
        return state
    m_new = np.maximum(m, m_block)
    p = np.exp(s_block - m_block)                    # from the block's own max
    scale_old, scale_block = np.exp(m - m_new), np.exp(m_block - m_new)
    acc *= scale_old                                 # in place is fine: the new state is returned
    acc += scale_block * (p @ v_block)
    return m_new, l * scale_old + scale_block * p.sum(), acc
""")),
    correct("lists_and_safe_max", {
        "online_softmax_init": "def online_softmax_init(d):\n    return [float('-inf'), 0.0, np.zeros((d,))]\n",
        **update("""
    m, l, acc = state
    m_new = max(m, s_block.max())
    shift = m_new if np.isfinite(m_new) else 0.0     # all -inf so far: any finite shift gives exp(-inf) = 0
    c = np.exp(m - shift) if np.isfinite(m) else 0.0
    p = np.exp(s_block - shift)
    return [m_new, l * c + p.sum(), acc * c + np.einsum('b,bd->d', p, v_block)]
"""),
        "online_softmax_finalize": "def online_softmax_finalize(state):\n    return state[2] / state[1]\n",
    }),
    correct("lazy_rescale_only_when_max_grows", update("""
    m, l, acc = state
    block_max = float(s_block.max())
    if block_max == -np.inf:
        return m, l, acc
    if block_max > m:
        c = np.exp(m - block_max)
        l, acc, m = l * c, acc * c, block_max
    p = np.exp(s_block - m)
    return m, l + p.sum(), acc + v_block.T @ p
""")),
    correct("merge_via_where", merge("""
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = np.maximum(m_a, m_b)
    safe = m if np.isfinite(m) else 0.0
    c_a = np.exp(m_a - safe)
    c_b = np.exp(m_b - safe)
    return float(m), l_a * c_a + l_b * c_b, acc_a * c_a + acc_b * c_b
""")),
]

REFERENCE_UPDATE = """
    m, l, acc = state
    m_new = max(m, float(np.max(s_block)))
    if m_new == -np.inf:
        return m, l, acc
    c = {c}
    p = np.exp(s_block - m_new)
    return {result}
"""


def update_with(c: str = "np.exp(m - m_new)", result: str = "m_new, l * c + p.sum(), acc * c + p @ v_block"):
    return update(REFERENCE_UPDATE.format(c=c, result=result))


REFERENCE_MERGE = """
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    m = max(m_a, m_b)
    if m == -np.inf:
        return m, 0.0, np.zeros_like(acc_a)
    c_a, c_b = {c}
    return m, l_a * c_a + l_b * c_b, acc_a * c_a + acc_b * c_b
"""

WRONG = [
    wrong("m_starts_at_zero", {"online_softmax_init": "def online_softmax_init(d):\n    return 0.0, 0.0, np.zeros(d)\n"},
          {"lesson04.init", "lesson04.block_sizes", "lesson04.block_order", "lesson04.masked_blocks",
           "lesson04.huge_logits", "lesson04.merge"}, says="должно быть −inf"),
    wrong("no_guard_for_masked_blocks", update("""
    m, l, acc = state
    m_new = max(m, float(np.max(s_block)))
    c = np.exp(m - m_new)
    p = np.exp(s_block - m_new)
    return m_new, l * c + p.sum(), acc * c + p @ v_block
"""), {"lesson04.masked_blocks"}, says="В состоянии NaN"),
    wrong("l_not_rescaled", update_with(result="m_new, l + p.sum(), acc * c + p @ v_block"),
          STATE_CHECKS, says="l не домножается", mistakes='l не домножается на exp(m_old − m_new)'),
    wrong("acc_not_rescaled", update_with(result="m_new, l * c + p.sum(), acc + p @ v_block"),
          STATE_CHECKS, says="acc не домножается", mistakes='acc не домножается на exp(m_old − m_new)'),
    wrong("correction_inverted", update_with(c="np.exp(m_new - m)"),
          STATE_CHECKS, says="коэффициент перевёрнут", mistakes='коэффициент перевёрнут: exp(m_new − m_old) вместо exp(m_old − m_new)'),
    wrong("max_of_block_only", update("""
    m, l, acc = state
    m_new = float(np.max(s_block))
    if m_new == -np.inf:
        return m, l, acc
    c = np.exp(m - m_new)
    p = np.exp(s_block - m_new)
    return m_new, l * c + p.sum(), acc * c + p @ v_block
"""), STATE_CHECKS, says="m_new = max блока", mistakes='m_new = max блока, без max(m_old, ·)'),
    wrong("block_sum_not_rescaled", update("""
    m, l, acc = state
    m_block = float(np.max(s_block))
    m_new = max(m, m_block)
    if m_new == -np.inf:
        return m, l, acc
    c = np.exp(m - m_new)
    p = np.exp(s_block - m_block)
    return m_new, l * c + p.sum(), acc * c + p @ v_block
"""), STATE_CHECKS, says="не домножена на exp(m_blk − m_new)", mistakes='сумма блока посчитана от m_blk, но не домножена на exp(m_blk − m_new)'),
    wrong("m_not_updated", update_with(result="m, l * c + p.sum(), acc * c + p @ v_block"),
          STATE_CHECKS, says="m не обновляется", mistakes='m не обновляется (осталось m_old)'),
    wrong("divide_inside_update", {
        **update_with(result="m_new, l * c + p.sum(), (acc * c + p @ v_block) / (l * c + p.sum())"),
        "online_softmax_finalize": "def online_softmax_finalize(state):\n    return state[2]\n",
    }, STATE_CHECKS, says="acc делится на l внутри update", mistakes='acc делится на l внутри update (деление должно быть одно, в finalize)'),
    wrong("no_max_subtracted", update("""
    m, l, acc = state
    p = np.exp(s_block)
    return max(m, float(np.max(s_block))), l + p.sum(), acc + p @ v_block
"""), STATE_CHECKS, says="не совпадает"),
    wrong("finalize_without_division",
          {"online_softmax_finalize": "def online_softmax_finalize(state):\n    return state[2]\n"},
          {"lesson04.worked_example", "lesson04.block_sizes", "lesson04.block_order", "lesson04.masked_blocks",
           "lesson04.huge_logits"}, says="acc / l"),
    wrong("merge_without_rescale", merge("""
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    return max(m_a, m_b), l_a + l_b, acc_a + acc_b
"""), {"lesson04.merge"}, says="общему максимуму"),
    wrong("merge_rescales_one_side", merge(REFERENCE_MERGE.format(c="1.0, np.exp(m_b - m)")),
          {"lesson04.merge"}, says="общему максимуму"),
    wrong("merge_nan_for_two_empty_parts", merge("""
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    m = max(m_a, m_b)
    c_a, c_b = np.exp(m_a - m), np.exp(m_b - m)
    return m, l_a * c_a + l_b * c_b, acc_a * c_a + acc_b * c_b
"""), {"lesson04.merge"}, says="пусто, пусто"),
]
