"""Lesson 01 bank: the roofline functions, traffic counts and the plot, written right in other ways, and wrong."""
from bank import correct, wrong

LESSON = "01_hbm_intensity"

PLOT = "lesson01.roofline_plot"

CHECKS = """
    if flops < 0 or bytes_moved < 0:
        raise ValueError("flops и bytes_moved должны быть >= 0")
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("peak_flops и bandwidth должны быть > 0")
"""


def fn(name: str, signature: str, body: str) -> dict[str, str]:
    return {name: f"def {name}({signature}):\n{body}"}


def plot(body: str) -> dict[str, str]:
    return fn("plot_roofline", "gpu_name, ops", body)


PLOT_HEAD = """
    peak, bandwidth = GPUS[gpu_name]
    ridge = ridge_point(peak, bandwidth)
    points = {name: arithmetic_intensity(f, b) for name, (f, b) in ops.items()}
    xs = [min([ridge, *points.values()]) / 10, ridge, max([ridge, *points.values()]) * 10]
    fig, ax = plt.subplots()
"""
PLOT_ROOF = "    ax.plot(xs, [attainable_flops(x, peak, bandwidth) for x in xs], label='roof')\n"
PLOT_POINTS = """    for name, x in points.items():
        ax.scatter([x], [attainable_flops(x, peak, bandwidth)], label=name)
"""
PLOT_TAIL = """    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend()
    return ax
"""

CORRECT = [
    correct("numpy_and_reuse", {
        **fn("arithmetic_intensity", "flops, bytes_moved", """
    if not flops >= 0:
        raise ValueError(f"FLOPs не могут быть отрицательными: {flops}")
    if not bytes_moved > 0:
        raise ValueError(f"нужен положительный объём данных, а не {bytes_moved}")
    return float(np.float64(flops) / np.float64(bytes_moved))
"""),
        **fn("ridge_point", "peak_flops, bandwidth", """
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops = {peak_flops} и bandwidth = {bandwidth} должны быть > 0")
    return arithmetic_intensity(peak_flops, bandwidth)
"""),
        **fn("attainable_flops", "intensity, peak_flops, bandwidth", """
    if intensity < 0 or peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"неверные аргументы: {intensity}, {peak_flops}, {bandwidth}")
    return float(np.minimum(peak_flops, intensity * bandwidth))
"""),
        **fn("roofline_time", "flops, bytes_moved, peak_flops, bandwidth", CHECKS + """
    compute, memory = flops / peak_flops, bytes_moved / bandwidth
    return compute if compute >= memory else memory
"""),
        **fn("bound_by", "flops, bytes_moved, peak_flops, bandwidth", CHECKS + """
    times = {"compute": flops / peak_flops, "memory": bytes_moved / bandwidth}
    return "memory" if times["memory"] > times["compute"] else "compute"
"""),
    }),
    correct("counts_as_floats_and_numpy_ints", {
        **fn("rmsnorm_bytes_per_row", "d, bytes_per_element=2", """
    passes_naive, passes_fused = 5, 2
    return [float(passes_naive * d * bytes_per_element), np.int64(passes_fused * d) * bytes_per_element]
"""),
        **fn("swiglu_bytes_per_token", "I, bytes_per_element=2", """
    element = np.int64(bytes_per_element)
    return (2 * I + 2 * I + I) * element, I * element
"""),
        **fn("attention_scores_bytes", "n, heads=16, bytes_per_element=2", """
    return float(n) ** 2 * heads * bytes_per_element
"""),
        **fn("naive_attention_traffic", "n, d, bytes_per_element=2", """
    s = n * n * bytes_per_element
    passes = {f"pass {i}: " + what: s for i, what in enumerate(["S <- QK^T", "max(S)", "exp(S - m)", "P", "P @ V"])}
    passes["Q и K для QK^T"] = 2 * n * d * bytes_per_element
    passes["V и O"] = 2 * n * d * bytes_per_element
    return passes
"""),
        **fn("gemm_traffic", "M, N, K, bytes_per_element=2", """
    elements = M * K + K * N + M * N
    return float(2 * M * N * K), np.int64(elements) * bytes_per_element
"""),
    }),
    correct("plot_markers_dense_grid_figure", plot("""
    peak, bandwidth = GPUS[gpu_name]
    ridge = peak / bandwidth
    intensities = np.array([f / b for f, b in ops.values()])
    lo = min(intensities.min(), ridge) / 3
    hi = max(intensities.max(), ridge) * 3
    xs = np.sort(np.append(np.logspace(np.log10(lo), np.log10(hi), 200), ridge))
    fig = plt.figure()
    ax = fig.add_subplot()
    ax.loglog(xs, np.minimum(peak, xs * bandwidth), "-", color="k")
    for name, x in zip(ops, intensities):
        y = min(peak, x * bandwidth)
        ax.plot([x], [y], "o")
        ax.annotate(name, (x, y))
    return fig
""")),
]


def with_roof_and_points(roof: str = PLOT_ROOF, points: str = PLOT_POINTS, tail: str = PLOT_TAIL,
                         head: str = PLOT_HEAD) -> dict[str, str]:
    return plot(head + roof + points + tail)


WRONG = [
    wrong("intensity_inverted", fn("arithmetic_intensity", "flops, bytes_moved", """
    if flops < 0 or bytes_moved <= 0:
        raise ValueError("flops >= 0, bytes_moved > 0")
    return bytes_moved / flops if flops else 0.0
"""), {"lesson01.arithmetic_intensity", PLOT}, says="перевёрнуто: байты / FLOPs", mistakes={'перевёрнуто: байты / FLOPs', 'по оси x отложены байты/FLOPs (интенсивность перевёрнута)'}),
    wrong("ridge_inverted", fn("ridge_point", "peak_flops, bandwidth", """
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("peak_flops и bandwidth должны быть > 0")
    return bandwidth / peak_flops
"""), {"lesson01.ridge_point", PLOT}, says="ridge point перевёрнут", mistakes='ridge point перевёрнут: пропускная способность / пик'),
    wrong("attainable_max", fn("attainable_flops", "intensity, peak_flops, bandwidth", """
    if intensity < 0 or peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("неверные аргументы")
    return max(peak_flops, intensity * bandwidth)
"""), {"lesson01.attainable_flops", PLOT}, says="max вместо min", mistakes={'max вместо min', 'max вместо min: крыша не ограничивает'}),
    wrong("time_is_a_sum", fn("roofline_time", "flops, bytes_moved, peak_flops, bandwidth", CHECKS + """
    return flops / peak_flops + bytes_moved / bandwidth
"""), {"lesson01.roofline_time"}, says="сумма времён вместо максимума", mistakes='сумма времён вместо максимума'),
    wrong("bound_reversed", fn("bound_by", "flops, bytes_moved, peak_flops, bandwidth", CHECKS + """
    return "compute" if bytes_moved / bandwidth > flops / peak_flops else "memory"
"""), {"lesson01.bound_by"}, says="сравнение перевёрнуто"),
    wrong("zero_flops_refused", fn("arithmetic_intensity", "flops, bytes_moved", """
    if flops <= 0 or bytes_moved <= 0:
        raise ValueError("flops и bytes_moved должны быть > 0")
    return flops / bytes_moved
"""), {"lesson01.arithmetic_intensity"}, says="выбросила исключение"),
    wrong("no_validation_intensity", fn("arithmetic_intensity", "flops, bytes_moved", """
    return flops / bytes_moved
"""), {"lesson01.bad_input"}, says="должна выбросить ValueError (отрицательные байты)"),
    wrong("division_by_zero_not_caught", fn("ridge_point", "peak_flops, bandwidth", """
    return peak_flops / bandwidth
"""), {"lesson01.bad_input"}, says="ZeroDivisionError"),
    wrong("assert_instead_of_value_error", fn("attainable_flops", "intensity, peak_flops, bandwidth", """
    assert intensity >= 0 and peak_flops > 0 and bandwidth > 0, "неверные аргументы"
    return min(peak_flops, intensity * bandwidth)
"""), {"lesson01.bad_input"}, says="выбросила AssertionError"),
    wrong("value_error_without_message", fn("roofline_time", "flops, bytes_moved, peak_flops, bandwidth", """
    if min(flops, bytes_moved) < 0 or min(peak_flops, bandwidth) <= 0:
        raise ValueError
    return max(flops / peak_flops, bytes_moved / bandwidth)
"""), {"lesson01.bad_input"}, says="без сообщения"),
    wrong("rmsnorm_four_passes", fn("rmsnorm_bytes_per_row", "d, bytes_per_element=2", """
    return 4 * d * bytes_per_element, 2 * d * bytes_per_element
"""), {"lesson01.rmsnorm_bytes"}, says="4 прохода вместо 5", mistakes='4 прохода вместо 5: забыто повторное чтение x или чтение x²'),
    wrong("rmsnorm_bf16_hardcoded", fn("rmsnorm_bytes_per_row", "d, bytes_per_element=2", """
    return 5 * d * 2, 2 * d * 2
"""), {"lesson01.rmsnorm_bytes"}, says="d=4096"),
    wrong("swiglu_fused_as_on_cpu", fn("swiglu_bytes_per_token", "I, bytes_per_element=2", """
    return 5 * I * bytes_per_element, 3 * I * bytes_per_element
"""), {"lesson01.swiglu_bytes"}, says="CPU-вариант", mistakes='это CPU-вариант с одним GEMM (3·I): на GPU g и u не покидают регистры'),
    wrong("scores_one_head", fn("attention_scores_bytes", "n, heads=16, bytes_per_element=2", """
    return n * n * bytes_per_element
"""), {"lesson01.attention_scores_bytes"}, says="одна голова вместо всех", mistakes='одна голова вместо всех'),
    wrong("attention_four_passes", fn("naive_attention_traffic", "n, d, bytes_per_element=2", """
    s, r = n * n * bytes_per_element, n * d * bytes_per_element
    return {"запись S": s, "чтение S для max": s, "запись P": s, "чтение P для PV": s,
            "чтение Q": r, "чтение K": r, "чтение V": r, "запись O": r}
"""), {"lesson01.naive_attention_traffic"}, says="около 134 МБ на голову"),
    wrong("attention_without_qkvo", fn("naive_attention_traffic", "n, d, bytes_per_element=2", """
    s = n * n * bytes_per_element
    return {"запись S": s, "чтение S для max": s, "чтение S для exp": s, "запись P": s, "чтение P для PV": s}
"""), {"lesson01.naive_attention_traffic"}, says="чтение Q, K, V и запись O"),
    wrong("gemm_mnk", fn("gemm_traffic", "M, N, K, bytes_per_element=2", """
    return M * N * K, (M * K + K * N + M * N) * bytes_per_element
"""), {"lesson01.gemm_traffic"}, says="FLOPs = 2·M·N·K", mistakes='M·N·K: умножение и сложение — две операции, FLOPs = 2·M·N·K'),
    wrong("plot_linear_axes", with_roof_and_points(tail="    ax.legend()\n    return ax\n"), {PLOT}, says="лог-лог"),
    wrong("plot_no_ridge_vertex", with_roof_and_points(
        roof="    grid = np.logspace(np.log10(xs[0]), np.log10(xs[-1]), 50)\n"
             "    ax.plot(grid, [attainable_flops(x, peak, bandwidth) for x in grid])\n"), {PLOT},
        says="не среди её вершин"),
    wrong("plot_points_at_peak", with_roof_and_points(points="""    for name, x in points.items():
        ax.scatter([x], [peak], label=name)
"""), {PLOT}, says="на высоте пика P", mistakes='точка на высоте пика P, а не на крыше'),
    wrong("plot_ignores_gpu_name", with_roof_and_points(
        head=PLOT_HEAD.replace("GPUS[gpu_name]", 'GPUS["H100 SXM"]')), {PLOT}, says="крыша другого GPU", mistakes='крыша другого GPU (H100 SXM), а не A100 40GB'),
    wrong("plot_in_tflops", with_roof_and_points(
        roof="    ax.plot(xs, [attainable_flops(x, peak, bandwidth) / 1e12 for x in xs])\n",
        points="""    for name, x in points.items():
        ax.scatter([x], [attainable_flops(x, peak, bandwidth) / 1e12], label=name)
"""), {PLOT}, says="TFLOP/s", mistakes='ось y в TFLOP/s: по контракту — FLOP/s'),
    wrong("plot_unlabelled", with_roof_and_points(points="""    for name, x in points.items():
        ax.scatter([x], [attainable_flops(x, peak, bandwidth)])
"""), {PLOT}, says="не подписана"),
]
