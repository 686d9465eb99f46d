import pytest

from trainmeter.core.scalars import ScalarReader


def test_python_numbers_are_read_directly():
    r = ScalarReader()
    assert r.read(2, "k") == 2.0 and r.read(1.5, "k") == 1.5


def test_cpu_zero_dim_tensor_is_read_without_deferral():
    torch = pytest.importorskip("torch")
    r = ScalarReader()
    assert r.read(torch.tensor(3.5, requires_grad=True) * 1, "k") == 3.5
    assert r.pending == 0


def test_non_scalars_are_rejected_with_the_shape():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"\(2,\)"):
        ScalarReader().read(torch.zeros(2), "k")
    with pytest.raises(TypeError, match="str"):
        ScalarReader().read("x", "k")


def test_numpy_scalars_are_accepted():
    np = pytest.importorskip("numpy")
    assert ScalarReader().read(np.float32(0.5), "k") == 0.5
