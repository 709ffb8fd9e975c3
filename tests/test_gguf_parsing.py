"""A .gguf file is parsed once per model load, and gguf's own functions are back in place afterwards."""

from __future__ import annotations

import gguf
import pytest

from behavioral.inference.gguf_parsing import parsed_once


def write_gguf(path, name: str) -> None:
    """A tiny .gguf file with one metadata field and no tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", name)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def field(reader, key: str) -> str:
    return bytes(reader.fields[key].parts[-1]).decode()


def test_each_file_is_parsed_once_while_active_and_anew_after(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_gguf(a, "first")
    write_gguf(b, "second")
    with parsed_once():
        first = gguf.GGUFReader(a)
        assert gguf.GGUFReader(str(a)) is first
        assert gguf.GGUFReader(tmp_path / "." / "a.gguf") is first
        other = gguf.GGUFReader(b)
        assert other is not first
        assert (field(first, "general.name"), field(other, "general.name")) == ("first", "second")
    assert gguf.GGUFReader(a) is not first


def test_the_tensor_name_map_is_built_once_per_architecture_and_depth():
    arch = gguf.MODEL_ARCH.LLAMA
    with parsed_once():
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 3) is not gguf.get_tensor_name_map(arch, 2)
    assert gguf.get_tensor_name_map(arch, 2) is not gguf.get_tensor_name_map(arch, 2)


def test_gguf_is_restored_after_an_error():
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError), parsed_once():
        raise RuntimeError("load failed")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
