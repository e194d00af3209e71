"""Exception dumps written in the documented layout are read back into numpy arrays."""

import numpy as np
import pytest
from tilewright.errors import TilewrightError
from tilewright_ascend.exception_dump import encode_descriptor, parse_exception_dump


def _write_dump(root, kernel, arrays, stamp):
    folder = root / "extra-info" / "data-dump" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    desc = encode_descriptor(kernel, [(a.nbytes, 0x1000 * (i + 1), str(a.dtype))
                                      for i, a in enumerate(arrays)])
    (folder / f"{kernel}.custom.{stamp}").write_bytes(
        b"\0" * 16 + desc + b"".join(a.tobytes() for a in arrays))


def test_parse_newest_dump(tmp_path):
    a = np.arange(12, dtype=np.float32)
    b = np.arange(6, dtype=np.float16)
    _write_dump(tmp_path, "main_kernel", [np.zeros(3, np.float32)], "100")
    _write_dump(tmp_path, "main_kernel", [a, b], "200")
    tensors = parse_exception_dump(tmp_path, "main_kernel")
    assert [(t["index"], t["dtype"], t["address"]) for t in tensors] == [
        (0, "float32", 0x1000), (1, "float16", 0x2000)]
    np.testing.assert_array_equal(tensors[0]["data"], a)
    np.testing.assert_array_equal(tensors[1]["data"], b)


def test_missing_and_truncated_dumps_are_explained(tmp_path):
    with pytest.raises(TilewrightError, match="ASCEND_DUMP_SCENE=aic_err_brief_dump"):
        parse_exception_dump(tmp_path, "main_kernel")
    _write_dump(tmp_path, "k", [np.arange(4, dtype=np.int32)], "1")
    path = next((tmp_path / "extra-info" / "data-dump" / "0").iterdir())
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(TilewrightError, match="truncated in tensor 0"):
        parse_exception_dump(tmp_path, "k")
