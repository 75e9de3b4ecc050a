"""Lesson 10 bank: the simulator formulas, the overlap program, run_program and FP8, right and wrong."""
from bank import correct, edited, reference_code, wrong

LESSON = "10_fa3_overlap"
REFERENCE = reference_code(LESSON)

SEQUENTIAL = """
def makespan_sequential(n_tiles, t_load, t_gemm, t_softmax):
    return n_tiles * (t_load + 2 * t_gemm + t_softmax)
"""

IS_COPY_BOUND = """
def is_copy_bound(t_load, t_gemm, t_softmax):
    return t_load > 2 * t_gemm + t_softmax
"""

PINGPONG = """
def pingpong_utilisation(t_gemm, t_softmax, warpgroups):
    return min(1.0, warpgroups * 2 * t_gemm / (2 * t_gemm + t_softmax))
"""

UTILISATION = """
def tensor_utilisation(events):
    makespan = max(e.end for e in events) - min(e.start for e in events)
    return sum(e.end - e.start for e in events if e.unit == "tensor") / makespan
"""

HADAMARD = """
def random_hadamard(d, seed):
    H = np.ones((1, 1))
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    return H * np.random.default_rng(seed).choice([-1.0, 1.0], size=d) / np.sqrt(d)
"""

INCOHERENT = """
def incoherent_qk(Q, K, seed):
    H = random_hadamard(Q.shape[1], seed)
    return Q @ H, K @ H
"""

def pipelined(body: str) -> dict[str, str]:
    return {"makespan_pipelined": "def makespan_pipelined(n_tiles, t_load, t_gemm, t_softmax, stages):\n"
                                  + body + IS_COPY_BOUND}


def copy_bound(body: str) -> dict[str, str]:
    reference = """
    if stages == 1:
        return makespan_sequential(n_tiles, t_load, t_gemm, t_softmax)
    compute = 2 * t_gemm + t_softmax
    return t_load + compute + (n_tiles - 1) * max(t_load, compute)
"""
    return {"makespan_pipelined": "def makespan_pipelined(n_tiles, t_load, t_gemm, t_softmax, stages):\n"
                                  + reference + "\ndef is_copy_bound(t_load, t_gemm, t_softmax):\n" + body}


def utilisation(body: str) -> dict[str, str]:
    return {"tensor_utilisation": "def tensor_utilisation(events):\n" + body + PINGPONG}


def pingpong(body: str) -> dict[str, str]:
    return {"tensor_utilisation": UTILISATION + "\ndef pingpong_utilisation(t_gemm, t_softmax, warpgroups):\n"
                                  + body}


def program(body: str) -> dict[str, str]:
    return {"overlap_program": "def overlap_program(n_tiles):\n" + body}


def run(*edits: tuple[str, str]) -> dict[str, str]:
    """run_program: the reference with the given edits (each ``old`` stands in it once)."""
    return {"run_program": edited(REFERENCE["run_program"], *edits)}


def quantize(body: str) -> dict[str, str]:
    return {"quantize_per_block": "def quantize_per_block(x, block):\n" + body}


def hadamard(h=HADAMARD, incoherent=INCOHERENT) -> dict[str, str]:
    return {"random_hadamard": h + incoherent}


CORRECT = [
    correct("formulas_rearranged", {
        "makespan_sequential": """
def makespan_sequential(n_tiles, t_load, t_gemm, t_softmax):
    per_tile = t_load + t_gemm + t_softmax + t_gemm
    return per_tile * n_tiles
""",
        **pipelined("""
    compute = t_gemm * 2 + t_softmax
    if stages < 2:
        return n_tiles * (t_load + compute)
    return max(t_load, compute) * n_tiles + min(t_load, compute)
""")}),
    correct("utilisation_by_interval_union_and_period", {"tensor_utilisation": """
def tensor_utilisation(events):
    busy, end_of_busy = 0.0, float("-inf")
    for e in sorted((e for e in events if e.unit == "tensor"), key=lambda e: e.start):
        start = max(e.start, end_of_busy)
        if e.end > start:
            busy += e.end - start
        end_of_busy = max(end_of_busy, e.end)
    return busy / (max(e.end for e in events) - min(e.start for e in events))


def pingpong_utilisation(t_gemm, t_softmax, warpgroups):
    work = warpgroups * 2 * t_gemm
    period = max(2 * t_gemm + t_softmax, work)
    return work / period
"""}),
    correct("eager_overlap_program", program("""
    prog = [("gemm_qk", 0)]
    if n_tiles > 1:
        prog.append(("gemm_qk", 1))
    prog += [("wait_qk", 0), ("softmax", 0)]
    for j in range(1, n_tiles):
        prog += [("gemm_pv", j - 1), ("wait_qk", j), ("softmax", j), ("wait_pv", j - 1)]
        if j + 1 < n_tiles:
            prog.append(("gemm_qk", j + 1))
    return prog + [("gemm_pv", n_tiles - 1), ("wait_pv", n_tiles - 1)]
""")),
    correct("run_program_rescales_to_running_max", run(
        ("O = O * np.exp(m_O - m_p)[:, None] + p @ V[rows]",
         "O = O * np.exp(m_O - m)[:, None] + (p * np.exp(m_p - m)[:, None]) @ V[rows]"),
        ("m_O = m_p\n", "m_O = m\n"))),
    correct("quantize_vectorised_with_padding", quantize("""
    n, d = x.shape
    n_blocks = -(-n // block)
    padded = np.zeros((n_blocks * block, d), np.float32)
    padded[:n] = x
    amax = np.abs(padded).reshape(n_blocks, block * d).max(axis=1)
    scales = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
    scaled = padded.reshape(n_blocks, block, d) / scales[:, None, None]
    return scaled.reshape(-1, d)[:n].astype(F8), scales
""")),
    correct("hadamard_by_kron_float32", hadamard(h="""
def random_hadamard(d, seed):
    H = np.array([[1.0]], np.float32)
    while H.shape[0] < d:
        H = np.kron(np.array([[1, 1], [1, -1]], np.float32), H)
    signs = np.where(np.random.default_rng(seed).random(d) < 0.5, -1, 1).astype(np.float32)
    return (signs[:, None] * H) / np.float32(np.sqrt(d))
""")),
]

WRONG = [
    wrong("makespan_summed_not_overlapped", pipelined("""
    return n_tiles * (t_load + 2 * t_gemm + t_softmax)
"""), {"lesson10.makespan_pipelined"}, says="время сложено, а не перекрыто", mistakes='время сложено, а не перекрыто: n·(t_load + 2·t_gemm + t_softmax)'),
    wrong("single_stage_treated_as_overlapping", pipelined("""
    compute = 2 * t_gemm + t_softmax
    return t_load + compute + (n_tiles - 1) * max(t_load, compute)
"""), {"lesson10.single_stage"}, says="кольцо из одной ячейки считается перекрывающим", mistakes='кольцо из одной ячейки считается перекрывающим (формула для S ≥ 2)'),
    wrong("no_prologue_epilogue", pipelined("""
    if stages == 1:
        return makespan_sequential(n_tiles, t_load, t_gemm, t_softmax)
    return n_tiles * max(t_load, 2 * t_gemm + t_softmax)
"""), {"lesson10.makespan_pipelined"}, says="нет пролога и эпилога", mistakes='нет пролога и эпилога: n·max(t_load, c)'),
    wrong("one_gemm_per_tile", {"makespan_sequential": """
def makespan_sequential(n_tiles, t_load, t_gemm, t_softmax):
    return n_tiles * (t_load + t_gemm + t_softmax)
"""}, {"lesson10.makespan_sequential", "lesson10.single_stage"}, says="один GEMM", mistakes='на тайл посчитан один GEMM, а их два (Q K^T и P V)'),
    wrong("copy_bound_against_one_gemm", copy_bound("""
    return t_load > t_gemm + t_softmax
"""), {"lesson10.copy_bound"}, says="сравнение с одним GEMM", mistakes='сравнение с одним GEMM: t_load > t_gemm + t_softmax'),
    wrong("utilisation_over_tensor_span", utilisation("""
    tensor = [e for e in events if e.unit == "tensor"]
    return sum(e.end - e.start for e in tensor) / (max(e.end for e in tensor) - min(e.start for e in tensor))
"""), {"lesson10.tensor_utilisation"}, says="от первого до последнего GEMM", mistakes='делите на промежуток от первого до последнего GEMM, а не на весь makespan'),
    wrong("utilisation_counts_softmax", utilisation("""
    makespan = max(e.end for e in events) - min(e.start for e in events)
    return sum(e.end - e.start for e in events if e.unit != "tma") / makespan
"""), {"lesson10.tensor_utilisation"}, says="softmax посчитан", mistakes='softmax посчитан как работа тензорных ядер'),
    wrong("pingpong_not_capped", pingpong("""
    return warpgroups * 2 * t_gemm / (2 * t_gemm + t_softmax)
"""), {"lesson10.pingpong_utilisation"}, says="нет ограничения сверху", mistakes='нет ограничения сверху: загрузка больше 100 %'),
    wrong("pingpong_ignores_warpgroups", pingpong("""
    return 2 * t_gemm / (2 * t_gemm + t_softmax)
"""), {"lesson10.pingpong_utilisation"}, says="число варп-групп не учтено", mistakes='число варп-групп не учтено'),
    wrong("overlap_is_sequential", program("""
    prog = []
    for j in range(n_tiles):
        prog += [("gemm_qk", j), ("wait_qk", j), ("softmax", j), ("gemm_pv", j), ("wait_pv", j)]
    return prog
"""), {"lesson10.overlap_program_makespan"}, says="двухстадийный конвейер FA3 даёт"),
    wrong("overlap_pv_issued_first", program("""
    prog = [("gemm_qk", 0), ("wait_qk", 0), ("softmax", 0)]
    for j in range(1, n_tiles):
        prog += [("gemm_pv", j - 1), ("gemm_qk", j), ("wait_qk", j), ("softmax", j), ("wait_pv", j - 1)]
    return prog + [("gemm_pv", n_tiles - 1), ("wait_pv", n_tiles - 1)]
"""), {"lesson10.overlap_program_makespan"}, says="makespan вашей программы"),
    wrong("overlap_softmax_before_wait", program("""
    prog = [("gemm_qk", 0), ("softmax", 0), ("wait_qk", 0)]
    for j in range(1, n_tiles):
        prog += [("gemm_qk", j), ("gemm_pv", j - 1), ("softmax", j), ("wait_qk", j), ("wait_pv", j - 1)]
    return prog + [("gemm_pv", n_tiles - 1), ("wait_pv", n_tiles - 1)]
"""), {"lesson10.overlap_program_valid", "lesson10.overlap_program_makespan"}, says="S_0 ещё не посчитан"),
    wrong("overlap_all_qk_first", program("""
    prog = [("gemm_qk", j) for j in range(n_tiles)]
    for j in range(n_tiles):
        prog += [("wait_qk", j), ("softmax", j), ("gemm_pv", j), ("wait_pv", j)]
    return prog
"""), {"lesson10.overlap_program_valid", "lesson10.overlap_program_makespan"}, says="только двух тайлов"),
    wrong("run_rescales_o_in_softmax", run(
        ("            l = l * np.exp(m - m_new) + p.sum(axis=1)\n            P[j] = (p, m_new)\n",
         "            alpha = np.exp(m - m_new)\n            l = l * alpha + p.sum(axis=1)\n"
         "            O = O * alpha[:, None]\n            P[j] = p\n"),
        ("            p, m_p = P.pop(j)\n            O = O * np.exp(m_O - m_p)[:, None] + p @ V[rows]\n            m_O = m_p\n",
         "            O = O + P.pop(j) @ V[rows]\n")), {"lesson10.program_math_any_order"}, says="O умножается на exp(m_old − m_new) в softmax", mistakes='O умножается на exp(m_old − m_new) в softmax, до того как к нему добавлен отложенный P V предыдущего тайла'),
    wrong("run_ignores_the_program", {"run_program": """
def run_program(Q, K, V, program, Bc=64):
    S = (Q @ K.T) / np.float32(np.sqrt(Q.shape[1]))
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P @ V) / P.sum(axis=1, keepdims=True)
"""}, {"lesson10.program_math_any_order"}, says="по всем тайлам", mistakes='программа не исполняется: внимание посчитано по всем тайлам K, V'),
    wrong("run_without_scale", run(("S[j] = (Q @ K[rows].T) * scale", "S[j] = Q @ K[rows].T")), {"lesson10.program_math", "lesson10.program_math_any_order"}, says="нет множителя 1/sqrt(d)", mistakes='нет множителя 1/sqrt(d)'),
    wrong("per_tensor_scale_where_per_block_asked", quantize("""
    amax = np.abs(x).max()
    scale = np.float32(amax / 448)
    n_blocks = -(-x.shape[0] // block)
    return (x / scale).astype(F8), np.full(n_blocks, scale, np.float32)
"""), {"lesson10.quantize_per_block", "lesson10.block_beats_tensor"}, says="один масштаб на весь тензор", mistakes='один масштаб на весь тензор (amax всего x / 448), а нужен свой для каждого блока'),
    wrong("quantized_to_e5m2", quantize("""
    n_blocks = -(-x.shape[0] // block)
    scales = np.ones(n_blocks, np.float32)
    xq = np.empty(x.shape, ml_dtypes.float8_e5m2)
    for b in range(n_blocks):
        rows = slice(b * block, (b + 1) * block)
        amax = np.abs(x[rows]).max()
        if amax > 0:
            scales[b] = amax / 57344
        xq[rows] = (x[rows] / scales[b]).astype(ml_dtypes.float8_e5m2)
    return xq, scales
"""), {"lesson10.quantize_per_block", "lesson10.block_beats_tensor"}, says="e5m2"),
    wrong("zero_block_gives_nan", quantize("""
    n_blocks = -(-x.shape[0] // block)
    scales = np.array([np.abs(x[b * block:(b + 1) * block]).max() / 448 for b in range(n_blocks)], np.float32)
    return (x / np.repeat(scales, block)[:x.shape[0], None]).astype(F8), scales
"""), {"lesson10.quantize_per_block"}, says="блока из одних нулей"),
    wrong("hadamard_not_normalised", hadamard(h="""
def random_hadamard(d, seed):
    H = np.ones((1, 1))
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    return H * np.random.default_rng(seed).choice([-1.0, 1.0], size=d)
"""), {"lesson10.hadamard", "lesson10.qk_unchanged"}, says="не нормирована", mistakes={'H не нормирована: Q Kᵀ выросло в d = 128 раз', 'H не нормирована: Q Kᵀ выросло в d = 64 раз', 'матрица Адамара не нормирована: нет множителя 1/√d'}),
    wrong("hadamard_without_random_signs", hadamard(h="""
def random_hadamard(d, seed):
    H = np.ones((1, 1))
    while H.shape[0] < d:
        H = np.block([[H, H], [H, -H]])
    return H / np.sqrt(d)
"""), {"lesson10.hadamard"}, says="нет случайных знаков"),
    wrong("only_q_rotated", hadamard(incoherent="""
def incoherent_qk(Q, K, seed):
    return Q @ random_hadamard(Q.shape[1], seed), K
"""), {"lesson10.qk_unchanged"}, says="повёрнута только Q", mistakes='повёрнута только Q, K осталась прежней'),
    wrong("different_h_for_q_and_k", hadamard(incoherent="""
def incoherent_qk(Q, K, seed):
    return Q @ random_hadamard(Q.shape[1], seed), K @ random_hadamard(K.shape[1], seed + 1)
"""), {"lesson10.qk_unchanged"}, says="разные матрицы", mistakes='Q и K умножены на разные матрицы (нужна одна и та же H, из одного seed)'),
]
