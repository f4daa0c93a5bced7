"""Every KServe v2 datatype survives the wire forms both ways (binary and JSON), shared by server and client."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailrace.contract.tensors import (
    DATATYPES,
    NUMPY_DTYPES,
    deserialize_bytes,
    from_json_data,
    from_raw,
    serialize_bytes,
    to_json_data,
    to_raw,
)


def sample(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    n = int(np.prod(shape))
    if datatype == "BYTES":
        out = np.empty(n, dtype=object)
        out[:] = [bytes(rng.integers(0, 256, rng.integers(0, 9)).astype(np.uint8)) for _ in range(n)]
        return out.reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).reshape(shape)
    return rng.normal(0, 100, n).astype(dtype).reshape(shape)


@pytest.mark.parametrize("datatype", DATATYPES)
@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple), seed=st.integers(0, 2**32 - 1))
def test_every_datatype_round_trips_binary_and_json(datatype, shape, seed):
    arr = sample(datatype, shape, np.random.default_rng(seed))
    back = from_raw("t", datatype, shape, to_raw(arr, datatype))
    json_back = from_json_data("t", datatype, shape, to_json_data(arr, datatype))
    if datatype == "BYTES":
        assert back.tolist() == arr.tolist()
        # JSON strings carry UTF-8 text; other bytes travel as latin-1 text (binary is the lossless form)
        expected = [b if _utf8(b) else b.decode("latin-1").encode() for b in arr.reshape(-1)]
        assert json_back.shape == arr.shape and json_back.reshape(-1).tolist() == expected
    else:
        assert back.dtype == arr.dtype and np.array_equal(back, arr)
        assert json_back.dtype == arr.dtype and np.array_equal(json_back, arr)


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


def test_bytes_wire_form_is_length_prefixed_and_refuses_torn_data():
    arr = np.array([b"ab", b"", "é"], dtype=object)
    raw = serialize_bytes(arr)
    assert raw == b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x02\x00\x00\x00\xc3\xa9"
    assert deserialize_bytes("t", raw).tolist() == [b"ab", b"", "é".encode()]
    with pytest.raises(ValueError, match="runs past the data"):
        deserialize_bytes("t", raw[:-1])
    with pytest.raises(ValueError, match="3 BYTES elements, shape \\[2\\] needs 2"):
        deserialize_bytes("t", raw, (2,))


def test_a_wrong_byte_count_or_value_names_the_tensor():
    with pytest.raises(ValueError, match="tensor 'x': 6 bytes of binary data, shape \\[2\\] of FP32 needs 8"):
        from_raw("x", "FP32", (2,), b"\x00" * 6)
    with pytest.raises(ValueError, match="tensor 'x': values cannot be read as INT32"):
        from_json_data("x", "INT32", (1,), ["seven"])
    bf16 = from_json_data("x", "BF16", (2,), [1.0, 3.140625])
    assert bf16.dtype.name == "bfloat16" and bf16.astype(np.float32).tolist() == [1.0, 3.140625]
