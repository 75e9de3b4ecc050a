"""Are the lessons' memory plots readable: one line per function, reference lines told apart?"""
import matplotlib

matplotlib.use("Agg")

from autograder.lessons.plots import MiB, plot_peaks  # noqa: E402


def test_reference_lines_are_grey_and_each_has_its_own_dash():
    sizes = [256, 512, 1024]
    fig = plot_peaks(sizes, {"naive": [4 * MiB, 8 * MiB, 16 * MiB], "fused": [MiB, 2 * MiB, 4 * MiB]},
                     xlabel="T", title="t",
                     reference={"2 массива (T, D)": [4 * MiB, 8 * MiB, 16 * MiB], "выход": [MiB, 2 * MiB, 4 * MiB]})
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {"naive", "fused", "2 массива (T, D)", "выход"}
    references = [lines["2 массива (T, D)"], lines["выход"]]
    assert all(line.get_color() == "gray" for line in references)
    assert len({line.get_linestyle() for line in references}) == 2
    assert list(lines["fused"].get_ydata()) == [1, 2, 4]  # MiB on the axis
    legend = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert legend == list(lines)
