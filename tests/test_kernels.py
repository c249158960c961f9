"""The fast conv (tiled im2col + packed GEMM or OpenBLAS) against its plain direct-loop version and against torch."""

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ssd_native

CONV = {np.float32: ssd_native.conv2d_float32, np.float64: ssd_native.conv2d_float64}


@st.composite
def conv_problems(draw):
    kernel = draw(st.integers(1, 4))
    dilation = draw(st.integers(1, 3))
    pad = draw(st.integers(0, 3))
    stride = draw(st.integers(1, 3))
    reach = dilation * (kernel - 1) + 1
    size = draw(st.integers(max(1, reach - 2 * pad), 24))
    return {
        "batch": draw(st.integers(1, 3)),
        "channels": draw(st.integers(1, 6)),
        "out_channels": draw(st.integers(1, 7)),
        "size": size,
        "kernel": kernel,
        "stride": stride,
        "pad": pad,
        "dilation": dilation,
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=60)
@given(problem=conv_problems(), dtype=st.sampled_from([np.float32, np.float64]))
def test_conv2d_matches_direct_loop_and_torch(problem, dtype):
    p = problem
    rng = np.random.default_rng(p["seed"])
    x = rng.standard_normal((p["batch"], p["channels"], p["size"], p["size"])).astype(dtype)
    w = rng.standard_normal((p["out_channels"], p["channels"], p["kernel"], p["kernel"])).astype(dtype)
    b = rng.standard_normal(p["out_channels"]).astype(dtype)
    geometry = dict(stride=p["stride"], pad=p["pad"], dilation=p["dilation"])
    fast = CONV[dtype](x, w, b, **geometry)
    direct = CONV[dtype](x, w, b, reference=True, **geometry)
    expected = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
        stride=p["stride"], padding=p["pad"], dilation=p["dilation"],
    ).numpy()
    assert fast.shape == expected.shape
    # Sums of C*K*K <= 96 products of unit normals: a few hundred ulps of the largest partial sum covers any order.
    tol = 1e-5 if dtype == np.float32 else 1e-13
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(fast, direct, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(fast, expected, rtol=0, atol=tol * scale)


def test_conv2d_tiles_large_images_like_one_pass():
    # 300x300 with 64 channels forces several column tiles (the column budget is 2^21 elements).
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 60, 300)).astype(np.float64)
    w = rng.standard_normal((5, 64, 3, 3)).astype(np.float64)
    b = rng.standard_normal(5).astype(np.float64)
    fast = ssd_native.conv2d_float64(x, w, b, pad=1)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=1).numpy()
    np.testing.assert_allclose(fast, expected, rtol=0, atol=1e-11)


GEMM_PATHS = [(kernel, direct) for kernel in ssd_native.gemm_kernels() for direct in (False, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_paths_agree_bit_for_bit_on_every_edge(dtype):
    """Every register kernel this CPU runs (AVX2, AVX-512), with column panels packed or read in place."""
    rng = np.random.default_rng(1)
    before = ssd_native.gemm_kernel(), ssd_native.direct_columns()
    # out channels 1..13 (row-panel tails of 6), 1..5 column panels per tile and a partial last one, panels that
    # cross a row end or touch the border beside interior ones, K = C*KH*KW across one to three blocks of 256,
    # dilation, a 1x1 conv and a strided one (always packed).
    problems = [  # (out channels, channels, height, width, kernel, stride, pad, dilation)
        (1, 1, 11, 11, 3, 1, 1, 1), (5, 30, 13, 13, 3, 1, 1, 1), (7, 29, 40, 37, 3, 1, 1, 1),
        (13, 60, 21, 50, 3, 1, 1, 1), (6, 64, 19, 19, 3, 1, 6, 6), (7, 9, 23, 44, 3, 1, 2, 2), (5, 5, 33, 33, 1, 1, 0, 1),
        (9, 7, 20, 20, 3, 1, 0, 1), (6, 4, 17, 40, 3, 2, 1, 1),
    ]
    for out_channels, channels, height, width, kernel, stride, pad, dilation in problems:
        x = rng.standard_normal((2, channels, height, width)).astype(dtype)
        w = rng.standard_normal((out_channels, channels, kernel, kernel)).astype(dtype)
        b = rng.standard_normal(out_channels).astype(dtype)
        outputs = []
        try:
            for kernel_name, direct in GEMM_PATHS:
                ssd_native.set_gemm_kernel(kernel_name)
                ssd_native.set_direct_columns(direct)
                outputs.append(CONV[dtype](x, w, b, stride=stride, pad=pad, dilation=dilation))
        finally:
            ssd_native.set_gemm_kernel(before[0])
            ssd_native.set_direct_columns(before[1])
        problem = (out_channels, channels, height, width, kernel, stride, pad, dilation)
        for path, output in zip(GEMM_PATHS[1:], outputs[1:]):
            assert np.array_equal(outputs[0], output), (problem, GEMM_PATHS[0], path)


BACKWARD = {np.float32: ssd_native.conv2d_backward_float32, np.float64: ssd_native.conv2d_backward_float64}


def _torch_backward(x: np.ndarray, w: np.ndarray, rng, stride: int = 1, pad: int = 0, dilation: int = 1) -> tuple:
    """-> (dout, expected): a random output gradient and torch's gradients of the input, weights and a zero bias."""
    x_t, w_t = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(w).requires_grad_(True)
    b_t = torch.zeros(w.shape[0], dtype=x_t.dtype, requires_grad=True)
    out = torch.nn.functional.conv2d(x_t, w_t, b_t, stride=stride, padding=pad, dilation=dilation)
    dout = rng.standard_normal(tuple(out.shape)).astype(x.dtype)
    out.backward(torch.from_numpy(dout))
    return dout, [t.grad.numpy() for t in (x_t, w_t, b_t)]


def _assert_gradients_close(grads, expected, dtype):
    # Each gradient element here sums at most a few thousand (weights) or a few hundred (inputs) products of unit
    # normals: 1e-4 (float32) / 1e-12 (float64) of the largest magnitude covers any summation order.
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())))


@settings(max_examples=60)
@given(problem=conv_problems(), dtype=st.sampled_from([np.float32, np.float64]))
def test_conv2d_backward_matches_torch(problem, dtype):
    p = problem
    rng = np.random.default_rng(p["seed"])
    x = rng.standard_normal((p["batch"], p["channels"], p["size"], p["size"])).astype(dtype)
    w = rng.standard_normal((p["out_channels"], p["channels"], p["kernel"], p["kernel"])).astype(dtype)
    geometry = dict(stride=p["stride"], pad=p["pad"], dilation=p["dilation"])
    dout, expected = _torch_backward(x, w, rng, **geometry)
    # At most B*OH*OW <= 3*24*24 (weights) or OC*K*K <= 112 (inputs) products per element.
    _assert_gradients_close(BACKWARD[dtype](dout, x, w, **geometry), expected, dtype)


def _on_one_and_two_threads(run) -> list:
    """-> [run() on one native thread, run() on two]."""
    before = ssd_native.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            ssd_native.set_num_threads(threads)
            results.append(run())
    finally:
        ssd_native.set_num_threads(before)
    return results


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "channels, out_channels, size, stride",
    [(3, 64, 30, 1), (32, 24, 9, 2)],
    ids=["weight-gradient-of-27-columns", "strided-input-gradient-of-25-pixels"],
)
def test_conv2d_backward_of_a_narrow_gemm_in_row_blocks(channels, out_channels, size, stride, dtype):
    """GEMMs of one column chunk run in row blocks (gemm.h): the first layer's weight gradient (27 columns, 64 rows),
    a strided input gradient of a small map (25 pixels, 288 rows). Against torch, and bit for bit on 1 and 2 threads."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, channels, size, size)).astype(dtype)
    w = rng.standard_normal((out_channels, channels, 3, 3)).astype(dtype)
    dout, expected = _torch_backward(x, w, rng, stride=stride, pad=1)
    runs = _on_one_and_two_threads(lambda: BACKWARD[dtype](dout, x, w, stride=stride, pad=1))
    # At most 2*30*30 (weights) or 64*9 (inputs) products per element.
    _assert_gradients_close(runs[1][:2], expected[:2], dtype)
    for one_thread, two_threads in zip(*runs):
        assert np.array_equal(one_thread, two_threads)


# The native module's kernel switches: (read, set)
SWITCHES = {
    "weight_grad_gemm": (ssd_native.weight_grad_gemm, ssd_native.set_weight_grad_gemm),
    "gemm_kernel": (ssd_native.gemm_kernel, ssd_native.set_gemm_kernel),
    "tap_sets": (ssd_native.tap_sets, ssd_native.set_tap_sets),
    "conv3x3_kernel": (ssd_native.conv3x3_kernel, ssd_native.set_conv3x3_kernel),
}


@contextmanager
def switched(**settings):
    """The native kernel switches set as given (a None value leaves its switch as it is), then restored, e.g.
    switched(weight_grad_gemm="packed", gemm_kernel="avx2"): the weight gradients on the packed GEMM's AVX2 tile."""
    before = {name: SWITCHES[name][0]() for name in settings}
    try:
        for name, value in settings.items():
            if value is not None:
                SWITCHES[name][1](value)
        yield
    finally:
        for name, value in before.items():
            SWITCHES[name][1](value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "batch, channels, out_channels, size, kernel, stride, pad, dilation",
    [(2, 20, 13, 23, 3, 1, 1, 1), (1, 7, 70, 19, 3, 1, 6, 6), (2, 33, 9, 17, 1, 1, 0, 1), (1, 40, 22, 30, 3, 2, 1, 1)],
    ids=["3x3-with-row-and-column-tails", "dilated-like-conv6", "pointwise", "strided"],
)
def test_weight_gradient_on_the_packed_gemm_matches_torch_and_openblas(batch, channels, out_channels, size, kernel,
                                                                       stride, pad, dilation, dtype):
    """The weight gradients of the im2col layers on the packed GEMM (weight_grad_gemm.h: output channels not a
    multiple of the tile's 6 rows, patch columns not a multiple of its panels, tiles of more than one 256-pixel
    block) agree with torch and OpenBLAS, and give the same bits on one and two threads and on either tile."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((batch, channels, size, size)).astype(dtype)
    w = rng.standard_normal((out_channels, channels, kernel, kernel)).astype(dtype)
    geometry = dict(stride=stride, pad=pad, dilation=dilation)
    dout, expected = _torch_backward(x, w, rng, **geometry)
    with switched(weight_grad_gemm="openblas"):
        openblas = BACKWARD[dtype](dout, x, w, **geometry)
    with switched(weight_grad_gemm="packed"):
        runs = _on_one_and_two_threads(lambda: BACKWARD[dtype](dout, x, w, **geometry))
    # At most 2*23*23 products per weight gradient element.
    _assert_gradients_close(runs[1], expected, dtype)
    _assert_gradients_close(openblas, expected, dtype)
    assert np.array_equal(runs[0][1], runs[1][1])
    for tile in ssd_native.gemm_kernels():
        with switched(weight_grad_gemm="packed", gemm_kernel=tile):
            assert np.array_equal(BACKWARD[dtype](dout, x, w, **geometry)[1], runs[1][1]), tile


def test_weight_grad_gemm_choice_is_validated():
    with pytest.raises(ValueError, match="'packed' or 'openblas', got 'mkl'"):
        ssd_native.set_weight_grad_gemm("mkl")


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 3), channels=st.integers(1, 40), out_channels=st.integers(1, 70),
       size=st.integers(1, 26), kernel=st.integers(2, 4), dilation=st.integers(2, 7), pad=st.integers(0, 12),
       seed=st.integers(0, 2**16), dtype=st.sampled_from([np.float32, np.float64]))
def test_tap_sets_give_the_im2col_gemms_bits(batch, channels, out_channels, size, kernel, dilation, pad, seed, dtype):
    """A dilated convolution's output and input gradient computed per set of inside taps (conv_tap_sets.h) equal the
    im2col GEMM's, which also multiplies the padding's zeros, bit for bit, on every register tile; ragged sets, row
    panels and channel panels included (up to 70 output channels, 40 input channels, 3 images)."""
    reach = dilation * (kernel - 1) + 1
    if size + 2 * pad < reach:
        size = reach - 2 * pad
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, size, size)).astype(dtype)
    w = rng.standard_normal((out_channels, channels, kernel, kernel)).astype(dtype)
    b = rng.standard_normal(out_channels).astype(dtype)
    dout = rng.standard_normal((batch, out_channels, size + 2 * pad - reach + 1, size + 2 * pad - reach + 1))
    dout = dout.astype(dtype)
    geometry = dict(stride=1, pad=pad, dilation=dilation)
    for tile in ssd_native.gemm_kernels():
        results = []
        for on in (False, True):
            with switched(tap_sets=on, gemm_kernel=tile):
                results.append((CONV[dtype](x, w, b, **geometry), BACKWARD[dtype](dout, x, w, **geometry)[0]))
        (gemm_out, gemm_grad), (sets_out, sets_grad) = results
        assert np.array_equal(gemm_out, sets_out), tile
        assert np.array_equal(gemm_grad, sets_grad), tile


def conv3x3_problems(channels: tuple, out_channels: tuple, height: tuple, width: tuple) -> dict:
    """Strategies for a 3x3, stride-1, pad-1 convolution's test arguments, counts and sizes in the given ranges."""
    return dict(channels=st.integers(*channels), out_channels=st.integers(*out_channels), batch=st.integers(1, 3),
                height=st.integers(*height), width=st.integers(*width), seed=st.integers(0, 2**16),
                dtype=st.sampled_from([np.float32, np.float64]))


@settings(max_examples=40)
@given(**conv3x3_problems(channels=(8, 56), out_channels=(1, 40), height=(1, 12), width=(1, 110)))
def test_conv3x3_kernel_matches_direct_loop_torch_and_the_gemm(channels, out_channels, batch, height, width, seed,
                                                                dtype):
    """The 3x3 kernel (stride 1, pad 1, 8-128 input channels; conv3x3.h) on rows narrower than its 6-pixel tile,
    across 96-pixel segments and with tails, with a last, partial tile of output channels; its input gradient (the
    transposed convolution, on the same kernel when the layer has 8 or more output channels). Against the plain
    loop, torch and the im2col GEMM; the AVX-512 tile (32 output channels) gives the AVX2 tile's bits."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, height, width)).astype(dtype)
    w = rng.standard_normal((out_channels, channels, 3, 3)).astype(dtype)
    b = rng.standard_normal(out_channels).astype(dtype)
    fast = CONV[dtype](x, w, b, pad=1)
    with switched(conv3x3_kernel=False):
        gemm = CONV[dtype](x, w, b, pad=1)
    direct = CONV[dtype](x, w, b, reference=True, pad=1)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=1)
    # Sums of at most 56*9 products of unit normals: a few hundred ulps of the largest partial sum.
    tol = 1e-5 if dtype == np.float32 else 1e-13
    scale = max(1.0, float(np.abs(direct).max()))
    for other in (direct, expected.numpy(), gemm):
        np.testing.assert_allclose(fast, other, rtol=0, atol=tol * scale)
    for tile in ssd_native.gemm_kernels():
        with switched(gemm_kernel=tile):
            assert np.array_equal(CONV[dtype](x, w, b, pad=1), fast), tile
    dout, expected_grads = _torch_backward(x, w, rng, pad=1)
    _assert_gradients_close(BACKWARD[dtype](dout, x, w, pad=1), expected_grads, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("on", [True, False], ids=["3x3-kernel", "im2col-gemm"])
def test_conv3x3_identical_patches_give_identical_outputs(on, dtype):
    """An image repeating with a period of 8 pixels along rows and 5 along columns: pixels whose windows lie inside
    it see identical patches, from different places in the 6-pixel tiles and 96-pixel segments (or GEMM panels),
    and must come out bit-identical, on both kernels and at 1 and 2 threads: max-pool routes ties by them."""
    rng = np.random.default_rng(3)
    period = rng.standard_normal((2, 40, 5, 8)).astype(dtype)
    x = np.ascontiguousarray(np.tile(period, (1, 1, 6, 25)))  # 30 x 200
    w = rng.standard_normal((64, 40, 3, 3)).astype(dtype)
    b = rng.standard_normal(64).astype(dtype)
    with switched(conv3x3_kernel=on):
        outputs = _on_one_and_two_threads(lambda: CONV[dtype](x, w, b, pad=1))
    out = outputs[0]
    assert np.array_equal(out, outputs[1])
    inner = out[:, :, 1:-1, 1:-1]  # windows inside the image
    assert np.array_equal(inner[:, :, :, 8:], inner[:, :, :, :-8])
    assert np.array_equal(inner[:, :, 5:, :], inner[:, :, :-5, :])


@settings(max_examples=30)
@given(**conv3x3_problems(channels=(1, 16), out_channels=(1, 16), height=(1, 100), width=(128, 170)))
def test_conv3x3_weight_gradient_matches_torch_and_the_gemm(channels, out_channels, batch, height, width, seed,
                                                             dtype):
    """The direct weight gradient of 3x3 convolutions (conv3x3_weight_grad.h: maps at least 128 wide) over one to
    four blocks of rows, with every tail of a vector along the row, odd channel counts among them (the tiles take
    channels in pairs). Against torch and the im2col GEMM."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, height, width)).astype(dtype)
    w = rng.standard_normal((out_channels, channels, 3, 3)).astype(dtype)
    dout, expected = _torch_backward(x, w, rng, pad=1)
    grads = BACKWARD[dtype](dout, x, w, pad=1)
    with switched(conv3x3_kernel=False):
        gemm = BACKWARD[dtype](dout, x, w, pad=1)
    # At most 3*100*170 products per weight gradient element.
    _assert_gradients_close(grads, expected, dtype)
    _assert_gradients_close(grads, gemm, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv3x3_weight_gradient_is_the_same_on_one_and_two_threads_and_either_tile(dtype):
    """Its work items (blocks of rows of one image: 12 here) each sum into their own slot, added in item order: the
    same bits whatever thread ran which item and whichever finished first (three runs on two threads). The AVX-512
    tile (four output channels, and the AVX2 tile for a last pair: 6 here) gives the AVX2 tile's bits."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 5, 100, 130)).astype(dtype)
    w = rng.standard_normal((6, 5, 3, 3)).astype(dtype)
    dout = rng.standard_normal((3, 6, 100, 130)).astype(dtype)
    runs = _on_one_and_two_threads(lambda: [BACKWARD[dtype](dout, x, w, pad=1)[1] for _ in range(3)])
    for two_threads in runs[1]:
        assert np.array_equal(runs[0][0], two_threads)
    for tile in ssd_native.gemm_kernels():
        with switched(gemm_kernel=tile):
            assert np.array_equal(BACKWARD[dtype](dout, x, w, pad=1)[1], runs[0][0]), tile


def test_conv2d_backward_names_a_misshaped_gradient():
    x, w = np.zeros((1, 2, 8, 8), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"dout of the output's shape \(1, 3, 6, 6\), got \(1, 3, 8, 8\)"):
        ssd_native.conv2d_backward_float32(np.zeros((1, 3, 8, 8), np.float32), x, w)


POOL = {np.float32: ssd_native.maxpool2d_float32, np.float64: ssd_native.maxpool2d_float64}


@st.composite
def pool_problems(draw):
    kernel = draw(st.integers(1, 3))
    return {
        "shape": (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(kernel, 20)),
                  draw(st.integers(kernel, 45))),  # rows up to 45 wide: several 8-output vector groups and a rest
        "kernel": kernel,
        "stride": draw(st.integers(1, 3)),
        "pad": draw(st.integers(0, kernel // 2)),
        "ceil_mode": draw(st.booleans()),
        "levels": draw(st.integers(1, 4)),  # few distinct values: windows full of ties
        "specials": draw(st.integers(0, 6)),  # NaN, -inf, +inf dropped at random places
        "seed": draw(st.integers(0, 2**16)),
    }


def pool_input(p, dtype):
    rng = np.random.default_rng(p["seed"])
    x = rng.integers(0, p["levels"], p["shape"]).astype(dtype)
    flat = x.reshape(-1)
    for special in rng.choice([np.nan, -np.inf, np.inf], p["specials"]):
        flat[rng.integers(flat.size)] = special
    return x


@settings(max_examples=150)
@given(problem=pool_problems(), dtype=st.sampled_from([np.float32, np.float64]))
def test_maxpool_matches_torch_on_ties_and_nan(problem, dtype):
    # torch's CPU rule, which the backward's routing depends on: the first maximum in scan order, NaN wins (the
    # last NaN). Values and indices must match exactly; the windows are full of ties.
    p = problem
    x = pool_input(p, dtype)
    expected, expected_idx = torch.nn.functional.max_pool2d(
        torch.from_numpy(x), p["kernel"], p["stride"], p["pad"], ceil_mode=p["ceil_mode"], return_indices=True)
    out, idx = POOL[dtype](x, p["kernel"], p["stride"], p["pad"], p["ceil_mode"])
    np.testing.assert_array_equal(out, expected.numpy())
    np.testing.assert_array_equal(idx, expected_idx.numpy())


@pytest.mark.parametrize("size, kernel, stride, pad, ceil_mode", [(300, 2, 2, 0, False), (75, 2, 2, 0, True),
                                                                  (19, 3, 1, 1, False)])
def test_maxpool_matches_torch_at_ssd_geometries(size, kernel, stride, pad, ceil_mode):
    p = {"shape": (1, 2, size, size), "levels": 3, "specials": 40, "seed": size}
    x = pool_input(p, np.float32)
    expected, expected_idx = torch.nn.functional.max_pool2d(
        torch.from_numpy(x), kernel, stride, pad, ceil_mode=ceil_mode, return_indices=True)
    out, idx = ssd_native.maxpool2d_float32(x, kernel, stride, pad, ceil_mode)
    np.testing.assert_array_equal(out, expected.numpy())
    np.testing.assert_array_equal(idx, expected_idx.numpy())


def test_maxpool_names_bad_geometry():
    with pytest.raises(ValueError, match=r"pad <= kernel/2; got kernel=2 stride=2 pad=2"):
        ssd_native.maxpool2d_float32(np.zeros((1, 1, 4, 4), np.float32), 2, 2, 2)
    with pytest.raises(ValueError, match=r"expects inp \(B,C,H,W\), got \(4, 4\)"):
        ssd_native.maxpool2d_float32(np.zeros((4, 4), np.float32), 2, 2)
