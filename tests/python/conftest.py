"""Shared helpers of the pytest suite: dtypes, tolerances (tests/README.md's),
strided views of test data, and comparisons with the float64 reference."""

import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # bfloat16 cases show as skipped
    ml_dtypes = None

# err = max|X - R| / max(1, max|R|), as the C suite judges (tests/README.md)
TOL = {"float64": 1e-10, "float32": 2e-4, "float16": 2e-2, "bfloat16": 5e-2}


def np_dtype(name):
    if name == "bfloat16":
        if ml_dtypes is None:
            pytest.skip("bfloat16 needs ml_dtypes (pip install ml_dtypes)")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def to64(a):
    return np.asarray(a).astype(np.float64)


def rounded(x, dtype):
    """x (float64) rounded to dtype, as an array of that dtype."""
    return np.asarray(x, np.float64).astype(dtype)


def as_view(x, view, rng=None):
    """An array equal to x but laid out in memory as `view` says, without
    the library being able to tell from its shape:
      "contig"     C-contiguous
      "transposed" memory order reversed (x.T's buffer, transposed back)
      "stepped"    every dimension sliced with a step from a larger buffer
                   whose gaps hold NaN (a read outside the view shows)
      "reversed"   negative strides on two dimensions (x[::-1] of a buffer)
      "bcast0"     (for arrays with size-1 dims) np.broadcast_to: stride 0
    """
    x = np.asarray(x)
    if view == "contig":
        return np.ascontiguousarray(x)
    if view == "transposed":
        y = np.empty(x.shape[::-1], x.dtype).T
        y[...] = x
        return y
    if view == "stepped":
        steps = [2 if n > 1 else 1 for n in x.shape]
        steps[-1] = 3 if x.shape[-1] > 1 else 1
        big = np.full([n * s + 1 for n, s in zip(x.shape, steps)], np.nan).astype(x.dtype)
        y = big[tuple(slice(1, 1 + n * s, s) for n, s in zip(x.shape, steps))]
        assert y.shape == x.shape and y.base is not None
        y[...] = x
        return y
    if view == "reversed":
        big = np.empty(x.shape, x.dtype)
        idx = [slice(None)] * x.ndim
        for d in range(max(0, x.ndim - 3), x.ndim - 1):
            idx[d] = slice(None, None, -1)
        y = big[tuple(idx)]
        y[...] = x
        return y
    raise ValueError(view)


def err(got, ref, where=None):
    """max|got - ref| / max(1, max|ref|) over `where` (bool, broadcast), as tests/README.md."""
    g, r = to64(got), to64(ref)
    if where is not None:
        w = np.broadcast_to(where, g.shape)
        g, r = g[w], r[w]
    if g.size == 0:
        return 0.0
    return float(np.max(np.abs(g - r)) / max(1.0, float(np.max(np.abs(r)))))


def assert_close(got, ref, tol, name, where=None):
    got = to64(got)
    assert got.shape == np.shape(ref), f"{name}: shape {got.shape} != reference {np.shape(ref)}"
    sel = got if where is None else got[np.broadcast_to(where, got.shape)]
    assert not np.isnan(sel).any(), f"{name}: NaN in the output"
    e = err(got, ref, where)
    assert e <= tol, f"{name}: error {e:.3g} > tolerance {tol:.3g}"


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name: every test draws its own data,
    the same on every run."""
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
