"""Lesson 02 bank: fused_rms_norm and fused_add_rms_norm written right in other ways, and wrong."""
from bank import correct, wrong

LESSON = "02_fused_rmsnorm"

VALUES = {"lesson02.equivalence", "lesson02.zeros", "lesson02.large_values", "lesson02.unit_rms",
          "lesson02.eps_placement", "lesson02.mean_axis", "lesson02.memory"}


def rms(body: str) -> dict[str, str]:
    return {"fused_rms_norm": "def fused_rms_norm(x, w, eps=1e-6):\n" + body}


CORRECT = [
    correct("row_loop", rms("""
    T, D = x.shape
    out = np.empty_like(x)
    for t in range(T):
        row = x[t]
        out[t] = row / np.sqrt(np.dot(row, row) / D + eps) * w
    return out
""")),
    correct("chunks_of_64_rows", rms("""
    T, D = x.shape
    out = np.empty_like(x)
    for i in range(0, T, 64):
        block = x[i:i + 64]
        ms = (block * block).mean(axis=-1, keepdims=True)
        out[i:i + 64] = block / np.sqrt(ms + eps) * w
    return out
""")),
    correct("squares_in_output_buffer", rms("""
    out = np.empty_like(x)
    np.square(x, out=out)
    ms = out.mean(axis=-1)
    np.divide(x, np.sqrt(ms + eps)[:, None], out=out)
    out *= w
    return out
""")),
    correct("float64_row_stats", rms("""
    ss = np.einsum("td,td->t", x, x, dtype=np.float64)
    inv = (1.0 / np.sqrt(ss / x.shape[1] + eps)).astype(np.float32)
    out = x * inv[:, None]
    out *= w
    return out
""")),
    correct("batched_matmul", rms("""
    ss = (x[:, None, :] @ x[:, :, None])[:, 0, 0]
    out = x * (1 / np.sqrt(ss / x.shape[-1] + eps)).astype(np.float32)[:, None]
    out *= w
    return out
""")),
]

REFERENCE_BODY = """
    sum_sq = np.einsum("td,td->t", x, x)
    inv_rms = {inv}
    out = np.empty_like(x)
    np.multiply(x, inv_rms[:, None], out=out)
    out *= w
    return out
"""


def ref_with_inv(inv: str) -> dict[str, str]:
    return rms(REFERENCE_BODY.format(inv=inv))


WRONG = [
    wrong("eps_outside_root", ref_with_inv("(1.0 / (np.sqrt(sum_sq / x.shape[1]) + eps)).astype(np.float32)"),
          {"lesson02.equivalence", "lesson02.eps_placement"}, says="eps прибавлен вне корня", mistakes='eps прибавлен вне корня: x / (sqrt(mean(x²)) + eps)'),
    wrong("no_eps", ref_with_inv("(1.0 / np.sqrt(sum_sq / x.shape[1])).astype(np.float32)"),
          {"lesson02.equivalence", "lesson02.zeros", "lesson02.eps_placement"}, says="NaN", mistakes='параметр eps игнорируется (зашит 1e-6)'),
    wrong("eps_hardcoded", ref_with_inv("(1.0 / np.sqrt(sum_sq / x.shape[1] + 1e-6)).astype(np.float32)"),
          {"lesson02.equivalence", "lesson02.eps_placement"}, says="eps игнорируется", mistakes='параметр eps игнорируется (зашит 1e-6)'),
    wrong("sum_not_mean", ref_with_inv("(1.0 / np.sqrt(sum_sq + eps)).astype(np.float32)"),
          VALUES, says="сумма квадратов вместо среднего", mistakes='сумма квадратов вместо среднего (не поделили на D)'),
    wrong("no_sqrt", ref_with_inv("(1.0 / (sum_sq / x.shape[1] + eps)).astype(np.float32)"),
          VALUES, says="нет квадратного корня", mistakes='нет квадратного корня: деление на mean(x²) + eps'),
    wrong("mean_over_tokens", rms("""
    ms = np.einsum("td,td->d", x, x) / x.shape[0]
    out = x / np.sqrt(ms + eps)
    out *= w
    return out
"""), VALUES | {"lesson02.dtype"}, says="среднее по оси токенов", mistakes='среднее по оси токенов T (axis=0), а не по D'),
    wrong("no_weight", rms("""
    sum_sq = np.einsum("td,td->t", x, x)
    return x / np.sqrt(sum_sq / x.shape[1] + eps)[:, None]
"""), VALUES - {"lesson02.unit_rms"} | {"lesson02.dtype"}, says="забыли умножить на вес", mistakes='забыли умножить на вес w'),
    wrong("layer_norm", rms("""
    centred = x - x.mean(axis=-1, keepdims=True)
    var = np.einsum("td,td->t", centred, centred) / x.shape[1]
    centred /= np.sqrt(var + eps)[:, None]
    centred *= w
    return centred
"""), VALUES - {"lesson02.unit_rms"}, says="LayerNorm", mistakes='вычитается среднее (это LayerNorm, а не RMSNorm)'),
    wrong("float64_for_float64_eps", rms("""
    sum_sq = np.einsum("td,td->t", x, x)
    out = x * (1.0 / np.sqrt(sum_sq / x.shape[1] + eps))[:, None]
    out *= w
    return out
"""), {"lesson02.dtype"}, says="dtype float64"),
    wrong("mutates_input", rms("""
    sum_sq = np.einsum("td,td->t", x, x)
    x *= (1.0 / np.sqrt(sum_sq / x.shape[1] + eps)).astype(np.float32)[:, None]
    x *= w
    return x
"""), {"lesson02.not_mutated"}, says="изменила вход x"),
    wrong("naive_temporaries", rms("""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w
"""), {"lesson02.memory", "lesson02.dtype"}, says="временные массивы (T, D)"),
    wrong("tail_rows_dropped", rms("""
    T, D = x.shape
    out = np.zeros_like(x)
    for i in range(0, T - T % 64, 64):
        block = x[i:i + 64]
        out[i:i + 64] = block / np.sqrt(np.einsum("td,td->t", block, block) / D + eps)[:, None] * w
    return out
"""), VALUES - {"lesson02.memory"}, says="не совпадает"),
    wrong("add_ignores_residual", {"fused_add_rms_norm": """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    residual += x
    return fused_rms_norm(x, w, eps), residual
"""}, {"lesson02.add_equivalence", "lesson02.add_memory"}, says="без прибавления residual", mistakes='нормируется x без прибавления residual'),
    wrong("add_mutates_x", {"fused_add_rms_norm": """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    x += residual
    return fused_rms_norm(x, w, eps), x
"""}, {"lesson02.add_equivalence"}, says="изменила x"),
    wrong("add_extra_buffers", {"fused_add_rms_norm": """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    h = x + residual
    squares = h * h
    out = h / np.sqrt(squares.mean(axis=-1, keepdims=True) + eps) * w
    return out, h
"""}, {"lesson02.add_memory"}, says="пик памяти"),
    # only the second visible case is over the bound: a check that stops after its first case passes it
    wrong("add_extra_buffers_second_case", {"fused_add_rms_norm": """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    residual += x
    spare = np.stack([residual, residual]) if residual.shape == (1024, 2048) else None
    return fused_rms_norm(residual, w, eps), residual
"""}, {"lesson02.add_memory"}, says="T=1024, D=2048"),
]
