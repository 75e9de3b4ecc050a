"""Lesson 11 bank: decode_traffic, merge_partials and paged_decode written right in other ways, and wrong.

Wrong answers are the reference with one edit (``edited``), so each carries exactly one mistake.  The GPU
checks of the lesson are left out here (``tests/test_banks.py`` runs the checks that need no GPU); the GPU
bank is ``bank_11`` in ``tests/test_gpu_lessons.py``.
"""
from autograder.course import paths as course
from autograder.course import grading
from bank import correct, wrong

LESSON = "11_flash_decoding"
REFERENCE = grading.reference_answers(LESSON)

DECODE = {"lesson11.equivalence", "lesson11.splits", "lesson11.large_logits", "lesson11.memory"}
TRAFFIC, MERGE, EQ, SPLITS, LARGE, MEMORY = ("lesson11." + n for n in (
    "traffic", "merge", "equivalence", "splits", "large_logits", "memory"))


def edited(cell: str, old: str, new: str) -> dict[str, str]:
    source = REFERENCE[cell]
    assert old in source, f"bank drift: {old!r} not in the reference {cell}"
    return {cell: source.replace(old, new)}


PER_HEAD_TWO_PASS = '''
def paged_decode(q, k_pages, v_pages, block_table, lengths, num_splits=1):
    """Per query head, two passes over the pages of each group (max first, then sums): still page-wise."""
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    G = Hq // Hkv
    out = np.empty_like(q)
    for b in range(B):
        n = int(lengths[b])
        pages = (n + ps - 1) // ps
        per = (pages + num_splits - 1) // num_splits
        for h in range(Hq):
            kv = h // G
            qh = q[b, h].astype(np.float64) / np.sqrt(d)
            os_, lses = [], []
            for s in range(num_splits):
                group = range(s * per, min(s * per + per, pages))
                rows = [(block_table[b, j], min(ps, n - j * ps)) for j in group]
                if not rows:
                    os_.append(np.zeros(d, dtype=np.float32)); lses.append(-np.inf)
                    continue
                m = max(float((k_pages[p, :u, kv] @ qh).max()) for p, u in rows)
                l, acc = 0.0, np.zeros(d)
                for p, u in rows:
                    w = np.exp(k_pages[p, :u, kv] @ qh - m)
                    l += w.sum()
                    acc += w @ v_pages[p, :u, kv]
                os_.append((acc / l).astype(np.float32)); lses.append(m + np.log(l))
            out[b, h] = merge_partials(np.array(os_, dtype=np.float32), np.array(lses, dtype=np.float32))[0]
    return out
'''

FLOAT64_EINSUM = '''
def paged_decode(q, k_pages, v_pages, block_table, lengths, num_splits=1):
    """All KV heads at once per page, float64 einsum; (o, lse) of each page merged into the group's."""
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    G = Hq // Hkv
    out = np.zeros((B, Hq, d), dtype=np.float32)
    for b in range(B):
        n = int(lengths[b])
        pages = -(-n // ps)
        per = -(-pages // num_splits)
        qb = q[b].reshape(Hkv, G, d).astype(np.float64) / np.sqrt(d)
        o_parts, lse_parts = [], []
        for s in range(num_splits):
            m = np.full((Hkv, G), -np.inf); l = np.zeros((Hkv, G)); acc = np.zeros((Hkv, G, d))
            for j in range(s * per, min((s + 1) * per, pages)):
                u = min(ps, n - j * ps)
                k = k_pages[block_table[b, j], :u]                    # (u, Hkv, d) view
                sc = np.einsum("kgd,ukd->kgu", qb, k)
                m_new = np.maximum(m, sc.max(axis=-1))
                c = np.exp(m - m_new)
                p = np.exp(sc - m_new[..., None])
                l = l * c + p.sum(-1)
                acc = acc * c[..., None] + np.einsum("kgu,ukd->kgd", p, v_pages[block_table[b, j], :u])
                m = m_new
            with np.errstate(all="ignore"):
                o_parts.append(np.where(l[..., None] > 0, acc / l[..., None], 0.0).reshape(Hq, d))
                lse_parts.append((m + np.log(l)).reshape(Hq))
        out[b] = merge_partials(np.array(o_parts, dtype=np.float32), np.array(lse_parts, dtype=np.float32))[0]
    return out
'''

LSE_FORM = '''
def paged_decode(q, k_pages, v_pages, block_table, lengths, num_splits=1):
    """Every page is a partial (o, lse) of its own; merge_partials folds them, then the groups."""
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    heads = np.arange(Hq) // (Hq // Hkv)
    scale = np.float32(d ** -0.5)
    out = np.empty((B, Hq, d), dtype=np.float32)
    for b in range(B):
        n = int(lengths[b])
        pages = -(-n // ps)
        per = -(-pages // num_splits)
        groups_o, groups_lse = [], []
        for s in range(num_splits):
            o = np.zeros((Hq, d), dtype=np.float32)
            lse = np.full(Hq, -np.inf, dtype=np.float32)
            for j in range(s * per, min((s + 1) * per, pages)):
                u = min(ps, n - j * ps)
                k = k_pages[block_table[b, j], :u][:, heads]          # (u, Hq, d): one page, small
                v = v_pages[block_table[b, j], :u][:, heads]
                sc = np.einsum("hd,uhd->hu", q[b], k) * scale
                mx = sc.max(-1)
                p = np.exp(sc - mx[:, None])
                page_o = np.einsum("hu,uhd->hd", p, v) / p.sum(-1)[:, None]
                page_lse = mx + np.log(p.sum(-1))
                o, lse = merge_partials(np.stack([o, page_o.astype(np.float32)]),
                                        np.stack([lse, page_lse.astype(np.float32)]))
            groups_o.append(o); groups_lse.append(lse)
        out[b] = merge_partials(np.stack(groups_o), np.stack(groups_lse))[0]
    return out
'''

MERGE_LOGADDEXP = '''
def merge_partials(o_parts, lse_parts):
    lse = np.logaddexp.reduce(lse_parts.astype(np.float64), axis=0)
    with np.errstate(invalid="ignore"):
        w = np.where(np.isfinite(lse_parts), np.exp(lse_parts - np.where(np.isfinite(lse), lse, 0.0)), 0.0)
    return (w[..., None] * o_parts).sum(axis=0).astype(np.float32), lse.astype(np.float32)
'''

CORRECT = [
    correct("per_head_two_pass_float64", {"paged_decode": PER_HEAD_TWO_PASS}),
    correct("float64_einsum_all_heads", {"paged_decode": FLOAT64_EINSUM}),
    correct("every_page_a_partial", {"paged_decode": LSE_FORM}),
    correct("merge_logaddexp", {"merge_partials": MERGE_LOGADDEXP}),
    correct("traffic_as_floats", {"decode_traffic": "def decode_traffic(L, Hq, Hkv, d, bytes_per_element):\n"
                                                    "    per_token = 2.0 * Hkv * d * bytes_per_element\n"
                                                    "    return L * per_token, 4.0 * L * d * Hq\n"}),
]

WRONG = [
    wrong("traffic_k_only", edited("decode_traffic", "kv_bytes = 2 * L", "kv_bytes = L"), {TRAFFIC},
          says="прочитан только K", mistakes='прочитан только K (нужны K и V)'),
    wrong("traffic_without_gqa", edited("decode_traffic", "2 * L * Hkv", "2 * L * Hq"), {TRAFFIC}, says="GQA", mistakes='байты посчитаны по Hq головам запроса (в кэше Hkv голов: GQA)'),
    wrong("traffic_qk_only", edited("decode_traffic", "flops = 4 * L", "flops = 2 * L"), {TRAFFIC}, says="q·Kᵀ", mistakes='посчитан только q·Kᵀ (нужно и p·V)'),
    wrong("block_table_ignored", edited("paged_decode", "page = block_table[b, j]", "page = j"), DECODE,
          says="таблица страниц не используется", mistakes='таблица страниц не используется: позиция t взята из страницы t // page_size пула, а не block_table[b, t // page_size]'),
    wrong("gqa_modulo", edited("paged_decode", "heads = slice(kv * G, (kv + 1) * G)", "heads = slice(kv, Hq, Hkv)"),
          DECODE, says="h % Hkv", mistakes='GQA: голова h читает KV-голову h % Hkv, а нужна h // (Hq // Hkv)'),
    wrong("stale_slots_read", edited("paged_decode", "used = min(page_size, n - j * page_size)", "used = page_size"),
          DECODE, says="устаревшие слоты", mistakes='прочитаны устаревшие слоты последней страницы (позиции ≥ lengths[b])'),
    wrong("newest_position_dropped", edited("paged_decode", "n = int(lengths[b])", "n = int(lengths[b]) - 1"),
          DECODE, says="потеряна последняя позиция", mistakes='потеряна последняя позиция (новый токен): позиции до lengths[b] − 1 не включительно'),
    wrong("scale_one_over_d", edited("paged_decode", "scale = np.float32(1 / math.sqrt(d))", "scale = np.float32(1 / d)"),
          DECODE, says="масштаб 1/d", mistakes='масштаб 1/d вместо 1/sqrt(d)'),
    wrong("m_starts_at_zero", edited("paged_decode", "m = np.full(G, -np.inf, dtype=np.float32)",
                                     "m = np.zeros(G, dtype=np.float32)"), {LARGE}, says="m начинается с 0", mistakes='m начинается с 0, а не с −inf (все логиты ≪ 0 дают l = 0, и часть считается пустой)'),
    wrong("empty_split_gives_nan", edited("paged_decode", "if l[0] > 0:                                    # an empty group stays (0, -inf)",
                                          "if True:"), {SPLITS, LARGE}, says="пустая группа", mistakes='пустая группа страниц даёт NaN (0/0) вместо o = 0, lse = −inf'),
    wrong("merge_without_max", {"merge_partials": '''
def merge_partials(o_parts, lse_parts):
    w = np.exp(lse_parts)
    total = w.sum(axis=0)
    with np.errstate(all="ignore"):
        return ((w[..., None] * o_parts).sum(axis=0) / total[..., None]).astype(np.float32), np.log(total).astype(np.float32)
'''}, {MERGE, LARGE}, says="без вычитания максимума", mistakes='слияние без вычитания максимума: exp(lse_s) переполняется или обнуляется'),
    wrong("merge_without_max_guarded", {"merge_partials": '''
def merge_partials(o_parts, lse_parts):
    w = np.exp(lse_parts)                      # no max subtracted: overflows in float32
    total = w.sum(axis=0)
    with np.errstate(all="ignore"):
        o = (w[..., None] * o_parts).sum(axis=0) / np.where(total > 0, total, np.float32(1))[..., None]
        lse = np.log(total)
    return o.astype(np.float32), lse.astype(np.float32)
'''}, {MERGE, LARGE}, says="без вычитания максимума",
          mistakes='слияние без вычитания максимума: exp(lse_s) во float32 переполняется (inf / inf = NaN)'),
    wrong("splits_floor", edited("paged_decode", "per = -(-n_pages // num_splits)", "per = n_pages // num_splits"),
          {SPLITS, LARGE}, says="floor",
          mistakes='группы по floor(страниц / num_splits) страниц вместо ceil: последние страницы не попали ни в '
                   'одну группу (а если страниц меньше num_splits — все)'),
    wrong("no_scale", edited("paged_decode", "scale = np.float32(1 / math.sqrt(d))", "scale = np.float32(1)"),
          DECODE, says="нет масштаба 1/sqrt(d)",
          mistakes='нет масштаба 1/sqrt(d): логиты q·k не поделены на sqrt(d)'),
    wrong("merge_unweighted_mean", edited("merge_partials", "o = (w[..., None] * o_parts).sum(axis=0) / np.where(total > 0, total, np.float32(1))[..., None]",
                                          "o = o_parts.mean(axis=0)"), {MERGE, SPLITS, LARGE}, says="без весов", mistakes={'слияние без весов: o — среднее o_s', 'слияние частей без весов: o — среднее o_s'}),
    wrong("merge_nan_when_all_empty", edited("merge_partials", "m_safe = np.where(np.isfinite(m), m, np.float32(0))", "m_safe = m"),
          {MERGE}, says="все части пусты", mistakes='все части пусты (lse = −inf): exp(−inf − (−inf)) = NaN вместо o = 0, lse = −inf'),
    wrong("merge_lse_is_max", edited("merge_partials", "lse = m_safe + np.log(total)", "lse = m"),
          {MERGE}, says="lse = max", mistakes='lse = max lse_s (без логарифма суммы)'),  # paged_decode keeps only o: a wrong lse of the last merge is lost
    wrong("gathers_the_sequence", {"paged_decode": REFERENCE["paged_decode"].replace(
        "                for j in range(s * per, min((s + 1) * per, n_pages)):",
        "                K_all = k_pages[block_table[b, :n_pages]]     # a copy of the whole sequence\n"
        "                for j in range(s * per, min((s + 1) * per, n_pages)):")}, {MEMORY}, says="пик памяти"),
    wrong("scales_q_in_place", edited("paged_decode", "qg = q[b, heads] * scale", "q[b, heads] *= scale\n                qg = q[b, heads]"),
          {EQ, SPLITS, LARGE}, says="изменила вход q"),
]
