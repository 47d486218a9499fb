"""Names shortened for table cells keep the part that tells similar names apart."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfdiff.render.names import shorten, shorten_set
from perfdiff.render.text import NameTable, md_escape

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
    assert short[a].startswith("void cutlass::Kernel<cutlass_80") and short[a].endswith("Params)")


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
    flats = {" ".join(x.split()) for x in xs}
    assert len({short[x] for x in xs}) == len(flats)  # names that differ read apart


def test_names_alike_but_for_their_middle_are_told_apart_in_every_sentence() -> None:
    """A report's NameTable gives a name one text in every sentence, apart from the report's
    other names, at any width; a name the table does not hold, and every name of the plain
    table, the plain cut."""
    a, b = GEMM.format("128, 128, 32"), GEMM.format("128, 256, 64")
    names = NameTable([a, b, "aten::mm"])
    for width in (48, 60, 80):
        assert names.short(a, width) != names.short(b, width)
        assert names.short(a, width) == shorten_set([a, b], width)[a] == names.short(a, width)
    assert names.md("aten::mm") == "aten::mm"
    assert names.md("not in the report " * 9, 40) == md_escape(shorten("not in the report " * 9, 40))
    plain = NameTable.plain()
    assert plain.short(a, 60) == plain.short(b, 60) == shorten(a, 60)
    assert plain.md(a, 60) == md_escape(shorten(a, 60)) and plain.full() == []


def test_two_differences_are_both_shown() -> None:
    """Template variants that differ in two places (2 × 2) keep a window around each, so each
    reads as what it is, with no tag."""
    base = "void k<" + "x" * 50 + "{}" + "y" * 50 + "{}" + "z" * 50 + ">"
    xs = [base.format(p, q) for p in ("cta", "warp") for q in ("2ul", "5ul")]
    for width in (48, 60, 80):
        short = shorten_set(xs, width)
        assert len(set(short.values())) == 4 and all(len(s) <= width for s in short.values())
        assert all(p in short[base.format(p, q)] and q in short[base.format(p, q)] for p in ("cta", "warp")
                   for q in ("2ul", "5ul")), (width, short)


def test_names_alike_even_around_their_difference_get_tags_the_full_list_explains() -> None:
    """Names that differ in three far places can read alike even with windows around two of
    them: those then carry their tags (the same at every width), still fit, and the list of
    full names gives each name shortened in the report, with its tags."""
    from perfdiff.render.names import name_tag

    base = "x" * 50 + "{}" + "y" * 50 + "{}" + "w" * 50 + "{}" + "z" * 50
    xs = [base.format(p, q, r) for p in "ab" for q in "cd" for r in "ef"]
    short = shorten_set(xs, 40)
    assert len(set(short.values())) == 8 and all(len(s) <= 40 for s in short.values())
    tagged = [x for x, s in short.items() if s.endswith(f" [{name_tag(x)}]")]
    assert xs[0] in tagged
    names = NameTable([*xs, "aten::mm", "y" * 70])
    assert names.full() == []  # nothing shortened yet
    assert names.short(xs[0], 60).endswith(f" [{name_tag(xs[0])}]")
    names.short("aten::mm", 60)
    names.short("y" * 70, 60)
    assert names.full() == [f"\\[{name_tag(xs[0])}\\] <code>{xs[0]}</code>", f"<code>{'y' * 70}</code>"]


def test_plain_cuts_of_other_groups_stay_apart() -> None:
    """The window's shorter head must not make names of two groups (whose plain cuts differ
    in the head's last characters) read alike: every text stays distinct across groups."""
    k = ("void at::native::vectorized_elementwise_kernel<{n}, at::native::FillFunctor<{t}>, "
         "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<{t}>, at::detail::Array<char*, 1>)")
    xs = [k.format(n=n, t=t) for n in (2, 4) for t in ("float", "double")]
    for width in (48, 60, 80, 96):
        assert len(set(shorten_set(xs, width).values())) == 4
    many = [k.format(n=n, t=t) for n in range(200) for t in ("float", "double", "c10::Half")]
    assert len(set(shorten_set(many, 80).values())) == 600


def test_a_name_spelling_another_names_cut_stays_apart() -> None:
    """A name that literally reads as another name's cut (it holds " … ") does not take its text."""
    long = "a" * 100 + "b" * 100
    short = shorten_set([long, shorten(long, 40)], 40)
    assert len(set(short.values())) == 2 and short[shorten(long, 40)] == shorten(long, 40)


def test_tags_that_coincide_grow() -> None:
    """Names whose four-digit tags coincide get longer tags, not one text."""
    from perfdiff.render.names import name_tag

    base = "x" * 50 + "{}" + "y" * 50 + "{}" + "z" * 50
    seen: dict[str, int] = {}
    for i in range(100_000):  # two names alike but for a number, with one tag
        t = name_tag(base.format(i, "c"))
        if t in seen:
            break
        seen[t] = i
    a, b = base.format(seen[t], "c"), base.format(i, "c")
    assert name_tag(a) == name_tag(b)
    xs = [a, b, base.format(seen[t], "d"), base.format(i, "d")]
    short = shorten_set(xs, 40)
    assert len(set(short.values())) == 4
    assert short[a].endswith(f" [{name_tag(a, 8)}]") and short[b].endswith(f" [{name_tag(b, 8)}]")


def test_narrow_widths_with_tags_still_fit() -> None:
    """At widths where a tag leaves no room for a window (30 characters and a 4- to 16-digit
    tag), the tagged texts are still no wider than asked, and apart."""
    fam = ["void k<" + "x" * 50 + a + "y" * 50 + b + "z" * 50 + ">" for a in "12" for b in "34"]
    for width in range(20, 50):
        short = shorten_set(fam, width)
        assert all(len(s) <= width for s in short.values()), width
        assert len(set(short.values())) == 4, width


def test_names_alike_but_for_white_space_are_listed_once() -> None:
    """Two raw names that flatten to one (runs of white space) are one line of the list."""
    a = "void k< " + "x" * 80 + ">"
    b = a.replace("< ", "<\t\n  ")
    names = NameTable([a, b])
    names.short(a, 40)
    names.short(b, 40)
    assert [n for n, _ in names.shortened()] == [a]


def test_a_name_table_answers_alike_whoever_asks_and_when() -> None:
    """Two reports' tables used in turn (a name of both, alike in one report to another of its
    names, unlike any in the other) answer as each does on its own, one after the other: what
    a table gives depends on its names alone, never on another table or on the caller."""
    a, b, c = GEMM.format("128, 128, 32"), GEMM.format("128, 256, 64"), "aten::mm " * 12

    def alone(names: list[str], asked: list[tuple[str, int]]) -> tuple[list[str], list[str]]:
        table = NameTable(names)
        return [table.md(n, w) for n, w in asked], table.full()

    asked1, asked2 = [(a, 60), (b, 60), (a, 48)], [(a, 60), (c, 60), (a, 48)]
    one, two = NameTable([a, b]), NameTable([a, c])
    first = [one.md(*asked1[0])]
    second = [two.md(n, w) for n, w in asked2]
    full2 = two.full()
    first += [one.md(n, w) for n, w in asked1[1:]]
    assert (first, one.full()) == alone([a, b], asked1)
    assert (second, full2) == alone([a, c], asked2)
    assert first[0] != second[0] == md_escape(shorten(a, 60))  # one name, two reports, two texts
    assert md_escape(shorten(b, 60)) not in full2 and "128, 256, 64" not in "".join(full2)


def test_reports_worded_interleaved_read_as_worded_one_after_the_other() -> None:
    """The view of one report, then another's, then the rest of the first: each reads as when
    built alone.  The example pair's flash-attention kernel, a cause, read apart from a look-alike
    in one report and as its plain cut in the other; the first report's sentences worded around
    the second's (by its table, as build_view words them) are its view's sentences, and the
    names it lists in full are its own."""
    import dataclasses

    import perfdiff
    from conftest import EXAMPLES
    from perfdiff.render.markdown import build_view, report_names
    from perfdiff.render.wording import finding_text, plan_text, verdict_lines

    res = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal")
    c, findings, verdict = res.analysis, list(res.findings), list(res.verdict)
    flash = next(f.name for f in c.functions if f.name.startswith("void flash::flash_fwd_kernel<"))
    assert flash in {x.function for x in findings}
    alike = flash.replace("<128, 128, 64,", "<128, 256, 64,", 1)  # the same cut, head … tail
    assert alike != flash and shorten(alike, 80) == shorten(flash, 80)
    k = next(i for i, f in enumerate(c.functions) if f.name.startswith("void at::native::vectorized"))
    other = dataclasses.replace(c, functions=tuple(dataclasses.replace(f, name=alike) if i == k else f
                                                  for i, f in enumerate(c.functions)))
    alone = [build_view(c, findings, verdict), build_view(other, findings, verdict)]
    assert alone[0]["findings"] != alone[1]["findings"]  # the kernel reads otherwise in each

    first = NameTable(report_names(other))
    half = len(findings) // 2
    begun = [finding_text(other, x, first) for x in findings[:half]]
    assert build_view(c, findings, verdict) == alone[0]  # the second report, whole, in between
    second = NameTable(report_names(c))
    assert [finding_text(c, x, second) for x in findings] == alone[0]["findings"]
    assert verdict_lines(c, verdict, findings, second) == alone[0]["verdict"]
    begun += [finding_text(other, x, first) for x in findings[half:]]
    assert begun == alone[1]["findings"]
    assert verdict_lines(other, verdict, findings, first) == alone[1]["verdict"]
    assert plan_text(other.plan, first) == alone[1]["plan"]
    assert set(first.full()) <= set(alone[1]["full_names"]) and set(second.full()) <= set(alone[0]["full_names"])
    assert any("256, 64" in line for line in alone[1]["full_names"])
    assert not any("256, 64" in line for line in alone[0]["full_names"] + second.full())


def test_a_renamed_function_is_cut_around_what_the_rename_changed() -> None:
    """`A ⇄ B` (a function matched under another name) writes what A and B share once, around
    their differing middles, and cuts the shared parts first, never the middles."""
    name = ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__ ⇄ "
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert shorten(name, 96) == "enumerate(DataLoader)#_{MultiProcessing ⇄ SingleProcess}DataLoaderIter.__next__"
    for width in (40, 48, 60):
        cut = shorten(name, width)
        assert len(cut) <= width and "{MultiProcessing ⇄ SingleProcess}" in cut and cut.startswith("enum")
    # Middles too long for the width: each cut at its end, still a rename.
    assert shorten("x_" + "a" * 30 + " ⇄ " + "x_" + "b" * 30, 20) == "x_{aaaaa… ⇄ bbbbb…}"
    # A number is never split ("16 ⇄ 160", not "16{ ⇄ 0}").
    assert shorten("kernel_16_x" + "y" * 100 + " ⇄ kernel_160_x" + "y" * 100, 40).startswith("kernel_{16 ⇄ 160}_x")
    # Nor is a word (HTA's trace pair: "C{loneBackward0 ⇄ ompiledFunctionBackward}" read as neither name).
    autograd = "autograd::engine::evaluate_function: "
    cut = shorten(f"{autograd}CloneBackward0 ⇄ {autograd}CompiledFunctionBackward", 60)
    assert cut.endswith("{CloneBackward0 ⇄ CompiledFunctionBackward}") and len(cut) <= 60, cut
    # Nothing shared at either end: the plain head … tail.
    unshared = "aten::mm " * 8 + "⇄ " + "cublas " * 8
    cut = shorten(unshared, 40)
    assert "{" not in cut and " … " in cut and cut.startswith(unshared[:20]), cut


def test_narrow_plain_cuts_fit() -> None:
    """At 8–14 characters the plain cut still keeps a tail and fits (it once kept the whole name)."""
    for width in range(8, 15):
        cut = shorten("aten::conv_forward_abcdefgh_xyz", width)
        assert len(cut) == width and " … " in cut


def test_two_windows_keep_both_differences_at_any_mark() -> None:
    """Whatever the two marks (in the head, next to each other, in the tail), a cut with two
    windows keeps both differing characters and fits; it once lost the second one when the
    head reached the first."""
    import random

    from perfdiff.render.names import _around_two

    rng = random.Random(0)
    for _ in range(3000):
        n, width = rng.randint(20, 300), rng.randint(43, 130)
        lo1, lo2 = sorted(rng.sample(range(n), 2))
        s = "".join(rng.choice("ab<>:, _xyz0123") for _ in range(n))
        s = s[:lo1] + "Q" + s[lo1 + 1:lo2] + "W" + s[lo2 + 1:]
        if n <= width:
            continue
        cut = _around_two(s, width, lo1, lo2)
        assert len(cut) <= width and "Q" in cut and "W" in cut, (width, lo1, lo2, cut)
    assert "Y" in _around_two("a" * 6 + "X" + "a" * 16 + "Y" + "a" * 76, 43, 6, 23)
