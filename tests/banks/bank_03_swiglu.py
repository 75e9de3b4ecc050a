"""Lesson 03 bank: fused_swiglu and the byte count written right in other ways, and wrong."""
from bank import correct, wrong

LESSON = "03_swiglu"

VALUES = {"lesson03.equivalence", "lesson03.large_inputs", "lesson03.memory"}


def swiglu(body: str) -> dict[str, str]:
    return {"fused_swiglu": "def fused_swiglu(x, W_gate_up):\n" + body}


def traffic(body: str) -> dict[str, str]:
    return {"swiglu_traffic_per_token": "def swiglu_traffic_per_token(I, bytes_per_element=2):\n" + body}


HEAD = """
    I = W_gate_up.shape[1] // 2
    gu = x @ W_gate_up
    g, u = gu[:, :I], gu[:, I:]
"""

STABLE_EPILOGUE = """
    out = np.minimum(g, 0)
    np.exp(out, out=out)
    u *= g
    np.abs(g, out=g)
    np.negative(g, out=g)
    np.exp(g, out=g)
    g += 1
    out *= u
    out /= g
    return out
"""

CORRECT = [
    correct("tanh_sigmoid_split_views", swiglu("""
    gu = np.matmul(x, W_gate_up)
    g, u = np.split(gu, 2, axis=1)
    out = np.multiply(g, 0.5)
    np.tanh(out, out=out)
    out += 1
    out *= 0.5
    out *= g
    out *= u
    return out
""")),
    correct("row_chunks_small_temporaries", swiglu("""
    gu = x @ W_gate_up
    I = gu.shape[1] // 2
    out = np.empty((gu.shape[0], I), dtype=np.float32)
    for i in range(0, gu.shape[0], 32):
        g, u = gu[i:i + 32, :I], gu[i:i + 32, I:]
        out[i:i + 32] = g * np.exp(np.minimum(g, 0)) / (1 + np.exp(-np.abs(g))) * u
    return out
""")),
    correct("result_in_the_up_half", swiglu(HEAD + """
    for i in range(0, len(gu), 16):
        gi = g[i:i + 16]
        u[i:i + 16] *= gi * (np.exp(np.minimum(gi, 0)) / (1 + np.exp(-np.abs(gi))))
    return u
""")),
    correct("einsum_and_boolean_mask", swiglu("""
    I = W_gate_up.shape[1] // 2
    gu = np.einsum("td,dk->tk", x, W_gate_up, optimize=True)
    g, u = gu[:, :I], gu[:, I:]
    negative = g < 0
    z = np.abs(g)
    np.negative(z, out=z)
    np.exp(z, out=z)
    u *= g
    np.multiply(u, z, out=u, where=negative)
    z += 1
    np.divide(u, z, out=z)
    return z
""")),
    correct("traffic_via_passes", traffic("""
    write_gu, read_gu, write_h = 2 * I, 2 * I, I
    return {"fused": float(write_h * bytes_per_element),
            "naive": (write_gu + read_gu + write_h) * bytes_per_element,
            "merged": (write_gu + read_gu + write_h) * bytes_per_element}
""")),
]

WRONG = [
    wrong("gate_and_up_swapped", swiglu("""
    I = W_gate_up.shape[1] // 2
    gu = x @ W_gate_up
    u, g = gu[:, :I], gu[:, I:]
""" + STABLE_EPILOGUE), VALUES, says="gate и up перепутаны", mistakes='gate и up перепутаны: silu(u) · g (gate — первые I столбцов W_gate_up)'),
    wrong("interleaved_halves", swiglu("""
    gu = x @ W_gate_up
    g, u = gu[:, 0::2], gu[:, 1::2]
""" + STABLE_EPILOGUE), VALUES, says="не совпадает"),
    wrong("sigmoid_not_silu", swiglu(HEAD + """
    out = np.minimum(g, 0)
    np.exp(out, out=out)
    np.abs(g, out=g)
    np.negative(g, out=g)
    np.exp(g, out=g)
    g += 1
    out /= g
    out *= u
    return out
"""), VALUES, says="sigmoid вместо silu", mistakes='sigmoid вместо silu: sigmoid(g) · u (silu(g) = g · sigmoid(g))'),
    wrong("no_activation", swiglu(HEAD + """
    return g * u
"""), VALUES, says="нет активации", mistakes='нет активации: g · u'),
    wrong("relu_not_silu", swiglu(HEAD + """
    out = np.maximum(g, 0)
    out *= u
    return out
"""), VALUES, says="ReLU вместо silu", mistakes='ReLU вместо silu'),
    wrong("overflowing_silu", swiglu(HEAD + """
    out = np.negative(g)
    np.exp(out, out=out)
    out += 1
    np.divide(g, out, out=out)
    out *= u
    return out
"""), {"lesson03.large_inputs"}, says="переполняется"),
    wrong("where_evaluates_both_branches", swiglu(HEAD + """
    out = np.where(g >= 0, g / (1 + np.exp(-g)), g * np.exp(g) / (1 + np.exp(g)))
    out *= u
    return out
"""), {"lesson03.large_inputs", "lesson03.memory"}, says="np.where вычисляет ОБЕ ветви"),
    wrong("copies_of_g_and_u", swiglu("""
    I = W_gate_up.shape[1] // 2
    gu = x @ W_gate_up
    g, u = gu[:, :I].copy(), gu[:, I:].copy()
""" + STABLE_EPILOGUE), {"lesson03.memory"}, says="копии g и u"),
    wrong("two_gemms_and_concat", swiglu("""
    I = W_gate_up.shape[1] // 2
    gu = np.concatenate([x @ W_gate_up[:, :I], x @ W_gate_up[:, I:]], axis=1)
    g, u = gu[:, :I], gu[:, I:]
""" + STABLE_EPILOGUE), {"lesson03.memory"}, says="пик памяти"),
    wrong("clips_input_in_place", swiglu("""
    np.clip(x, -20, 20, out=x)
""" + HEAD + STABLE_EPILOGUE), {"lesson03.not_mutated", "lesson03.large_inputs"}, says="изменила вход x"),
    wrong("float64_scalar_promotes", swiglu(HEAD + STABLE_EPILOGUE.replace(
        "np.minimum(g, 0)", "np.minimum(g, np.float64(0.0))")), VALUES | {"lesson03.dtype"}, says="dtype float64"),
    wrong("merged_counted_as_saving_bytes", traffic("""
    return {"naive": 5 * I * bytes_per_element, "merged": 3 * I * bytes_per_element,
            "fused": I * bytes_per_element}
"""), {"lesson03.traffic"}, says="один GEMM не убирает", mistakes='один GEMM не убирает промежуточный [g, u]: он записан (2I) и прочитан обратно (2I), плюс запись h (I) — 5·I, а не 3·I'),
    wrong("traffic_as_tuple", traffic("""
    return 5 * I * bytes_per_element, 5 * I * bytes_per_element, I * bytes_per_element
"""), {"lesson03.traffic"}, says="словарь с ключами"),
]
