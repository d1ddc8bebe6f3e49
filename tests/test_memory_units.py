"""Byte sizes: parse what people write, print it back, reject what is not a size."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cuzk.memory.units import GiB, KiB, MiB, TiB, SizeParseError, format_size, gib, parse_size


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("1048576", MiB), (4096, 4096), ("4GiB", 4 * GiB), ("4 GiB", 4 * GiB), ("4G", 4 * GiB), ("4g", 4 * GiB),
    ("512M", 512 * MiB), ("512MiB", 512 * MiB), ("1.5G", 3 * GiB // 2), ("1.5 GB", 1_500_000_000), ("0.1GB", 100_000_000),
    ("2T", 2 * TiB), ("64k", 64 * KiB), ("64kB", 64_000), ("7B", 7), (".5M", MiB // 2), (" 3 MiB ", 3 * MiB),
])
def test_parse_size_reads_binary_letters_and_explicit_si(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GiB", "4 XB", "-1G", "1e9", "4GiBs", "four", "1.2.3G", True, -5])
def test_parse_size_rejects_what_is_not_a_size_and_names_it(bad):
    with pytest.raises(SizeParseError) as info:
        parse_size(bad)
    assert isinstance(info.value, ValueError)
    assert str(bad) in str(info.value) or repr(bad) in str(info.value)


@given(st.integers(min_value=0, max_value=1 << 50), st.sampled_from(["B", "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB"]))
def test_parse_size_integer_multiples_are_exact(n, unit):
    multiplier = {"B": 1, "K": KiB, "KiB": KiB, "M": MiB, "MiB": MiB, "G": GiB, "GiB": GiB, "T": TiB, "TiB": TiB}[unit]
    assert parse_size(f"{n}{unit}") == n * multiplier


@given(st.integers(min_value=0, max_value=1 << 60))
@example(1070)  # "1.04 KiB" reads back as 1064: just above a unit, half a hundredth of it is more than 0.5 % of n
def test_format_size_round_trips_within_its_two_decimals(n):
    text = format_size(n)
    back = parse_size(text.replace(" ", ""))
    unit = 1 << (10 * min(4, (n.bit_length() - 1) // 10)) if n else 1  # the unit format_size chose (B up to TiB)
    # Two decimals of it: off by at most half a hundredth of the unit, plus the byte parse_size rounds down.
    assert abs(back - n) <= unit // 200 + 1, (n, text, back)


def test_format_size_names_unlimited_and_negative():
    assert format_size(None) == "unlimited"
    assert format_size(-3 * MiB) == "-3.00 MiB"
    assert format_size(1023) == "1023 B"
    assert gib(3 * GiB // 2) == 1.5 and gib(None) is None
