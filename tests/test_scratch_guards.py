"""The guard regions around native scratch buffers: a write just outside a buffer is reported, naming the kernel,
the side and the element; writes inside it are not."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ssd_native

GUARD = 64  # GuardedScratch::kGuardElements


@pytest.mark.parametrize("size", [0, 1, 1000])
def test_writes_inside_the_buffer_pass(size):
    ssd_native.guarded_scratch_probe(size, 0, size)


@pytest.mark.parametrize(("size", "begin", "end", "side", "element"), [
    (1000, 0, 1001, "past the end", 1000),
    (1000, 1000 + GUARD - 1, 1000 + GUARD, "past the end", 1000 + GUARD - 1),
    (1000, -1, 10, "before the start", -1),
    (1000, -GUARD, -GUARD + 1, "before the start", -GUARD),
    (0, 0, 1, "past the end", 0),
])
def test_a_write_outside_the_buffer_is_reported(size, begin, end, side, element):
    with pytest.raises(RuntimeError, match=rf"guarded_scratch_probe wrote {side} of its {size}-element scratch "
                                           rf"buffer: element {element} changed"):
        ssd_native.guarded_scratch_probe(size, begin, end)


def test_the_probe_refuses_writes_beyond_the_guards():
    with pytest.raises(ValueError, match="got size=10 write_begin=0 write_end=75"):
        ssd_native.guarded_scratch_probe(10, 0, 10 + GUARD + 1)


@given(size=st.integers(-5, 300), begin=st.integers(-200, 400), end=st.integers(-200, 400))
@settings(max_examples=300)
def test_the_guard_verdict_matches_the_write_range(size, begin, end):
    inside_guards = 0 <= size and -GUARD <= begin <= end <= size + GUARD
    outside_buffer = begin < end and (begin < 0 or end > size)
    if not inside_guards:
        with pytest.raises(ValueError, match="guarded_scratch_probe writes must stay within the guards"):
            ssd_native.guarded_scratch_probe(size, begin, end)
    elif outside_buffer:
        with pytest.raises(RuntimeError, match="guarded_scratch_probe wrote"):
            ssd_native.guarded_scratch_probe(size, begin, end)
    else:
        ssd_native.guarded_scratch_probe(size, begin, end)
