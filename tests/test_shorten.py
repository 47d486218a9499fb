"""Names shortened for table cells keep the part that tells similar names apart."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfdiff.render.text import shorten, shorten_set

GEMM = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass::gemm::kernel::"
        "GemmUniversal<cutlass::gemm::threadblock::MmaMultistage<cutlass::gemm::GemmShape<{}>, float, "
        "cutlass::layout::RowMajor>>::Params)")


def test_names_differing_in_the_middle_stay_apart() -> None:
    a, b = GEMM.format("128, 128, 32"), GEMM.format("128, 256, 64")
    assert shorten(a, 60) == shorten(b, 60)  # the plain head … tail cut hides the difference
    short = shorten_set([a, b], 60)
    assert short[a] != short[b]
    assert "128, 128, 32" in short[a] and "128, 256, 64" in short[b]
    assert all(len(s) <= 60 for s in short.values())
    assert short[a].startswith("void cutlass") and short[a].endswith("::Params)")


def test_a_difference_the_plain_cut_keeps_gives_the_plain_cut() -> None:
    a = "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn"
    b = a.replace("64x5_tn", "64x6_tn")
    assert shorten_set([a, b, "short"], 40) == {a: shorten(a, 40), b: shorten(b, 40), "short": "short"}


names = st.text(alphabet="ab<>:, _xyz0123456789", min_size=0, max_size=300)


@settings(max_examples=200, derandomize=True)
@given(st.lists(names, max_size=8), st.integers(min_value=30, max_value=120))
def test_short_names_fit_and_short_names_are_kept(xs: list[str], width: int) -> None:
    short = shorten_set(xs, width)
    assert set(short) == set(xs)
    for name, s in short.items():
        flat = " ".join(name.split())
        assert len(s) <= width
        if len(flat) <= width:
            assert s == flat
