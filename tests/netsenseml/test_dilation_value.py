"""The dilation value (netsenseml.dilation): its conversions, their round trips, and the
bits of the expressions they replace."""

from __future__ import annotations

import numpy as np
import pytest

from netsenseml.dilation import NONE, Dilation


@pytest.mark.parametrize("k", [1, 1.0, 2.5, 40, 1234.5])
def test_times_and_rates_round_trip(k: float) -> None:
    d = Dilation(k)
    for x in (0.0, 0.001, 1.0, 3.7, 1e6):
        assert d.virtual_s(d.real_s(x)) == pytest.approx(x)
        assert d.real_s(d.virtual_s(x)) == pytest.approx(x)
        assert d.virtual_mbit(d.real_mbit(x)) == pytest.approx(x)
        assert d.real_per_s(d.virtual_per_s(x)) == pytest.approx(x)


def test_directions() -> None:
    d = Dilation(40)
    assert d.real_s(2.0) == 80.0  # a virtual second lasts k real ones
    assert d.virtual_s(80.0) == 2.0
    assert d.real_mbit(1000.0) == 25.0  # a virtual link runs k times slower
    assert d.virtual_mbit(25.0) == 1000.0
    assert d.virtual_per_s(3.0) == 120.0  # k times as many per virtual second
    assert d.real_per_s(120.0) == 3.0


def test_same_bits_as_the_expressions_replaced() -> None:
    k = 7.3
    d = Dilation(k)
    for x in (0.1, 1 / 3, 123.456, 9e9):
        assert d.real_s(x) == x * k and d.virtual_s(x) == x / k
        assert d.real_mbit(x) == x / k and d.virtual_mbit(x) == x * k
        assert d.virtual_per_s(x) == x * k and d.real_per_s(x) == x / k


def test_arrays_convert_elementwise() -> None:
    a = np.array([1.0, 2.0, 4.0])
    assert (Dilation(4).virtual_mbit(a) == a * 4).all()
    assert (Dilation(4).virtual_s(a) == a / 4).all()


def test_k_stays_the_number_given() -> None:
    assert Dilation(40).k == 40 and type(Dilation(40).k) is int
    assert Dilation(2.5).k == 2.5
    assert Dilation.of(3.0) == Dilation(3.0) and Dilation.of(NONE) is NONE


def test_dilated_and_none() -> None:
    assert not NONE.dilated and NONE.k == 1
    assert not Dilation(1.0).dilated and Dilation(1.01).dilated


@pytest.mark.parametrize("bad", [0.5, 0, -1, float("nan"), True, "2"])
def test_refuses_less_than_one(bad: object) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        Dilation(bad)  # type: ignore[arg-type]


def test_parse_and_text() -> None:
    assert Dilation.parse("") == NONE and Dilation.parse(" 40 ") == Dilation(40.0)
    with pytest.raises(ValueError, match="NETSENSE_DILATION"):
        Dilation.parse("fast")
    with pytest.raises(ValueError, match="NETSENSE_DILATION"):
        Dilation.parse("0.5")
    assert Dilation(40).arg() == "40" and Dilation(2.5).arg() == "2.5"
    assert Dilation(40).env() == "40.0"
    assert Dilation.parse(Dilation(2.5).env()) == Dilation(2.5)


def test_the_clock_holds_the_value_and_passes_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from netsenseml import clock
    from netsenseml.dilation import ENV

    before = clock.current()
    monkeypatch.setenv(ENV, os.environ.get(ENV, ""))  # restored after the test
    try:
        clock.set_dilation(Dilation(40))
        assert clock.current() == Dilation(40.0) and clock.dilation() == 40.0
        assert os.environ[ENV] == "40.0" and Dilation.parse(os.environ[ENV]) == clock.current()
        assert clock.real_s(0.5) == 20.0
        clock.set_dilation(2.5)  # a number still does
        assert clock.current() == Dilation(2.5)
        with pytest.raises(ValueError, match=">= 1"):
            clock.set_dilation(0.5)
    finally:
        clock.set_dilation(before)
