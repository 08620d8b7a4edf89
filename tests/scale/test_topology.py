"""Topology names, libtpu's device lists, and the errors for names and libtpu."""

import importlib.util

import pytest

from jaxrl_llm.scale import chip, get_topology, parse_topology_name
from jaxrl_llm.scale import topology as topology_module


@pytest.mark.parametrize(
    "name, family, shape, cloud",
    [
        ("v5e-256", "v5e", (16, 16), "v5e-256"),
        ("v5e-16", "v5e", (4, 4), "v5e-16"),
        ("v5p-128", "v5p", (4, 4, 4), "v5p-128"),  # 128 TensorCores = 64 chips
        ("V5P-1024", "v5p", (8, 8, 8), "v5p-1024"),
        ("v5e:4x4", "v5e", (4, 4), "v5e-16"),
        ("v5p:4x8x8", "v5p", (4, 8, 8), "v5p-512"),
    ],
)
def test_names(name, family, shape, cloud):
    assert parse_topology_name(name) == (cloud, family, shape)


@pytest.mark.parametrize("name", ["v5e-300", "v7x-8", "v5e:4y4", "tpu"])
def test_unknown_name_lists_the_known_ones(name):
    with pytest.raises(ValueError, match="Unknown TPU topology") as info:
        parse_topology_name(name)
    assert "v5e-256" in str(info.value) and "v5p:4x4x4" in str(info.value)


def test_missing_libtpu_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        topology_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "libtpu" else real(name, *a),
    )
    get_topology.cache_clear()
    with pytest.raises(ImportError, match=r'pip install "jaxrl_llm\[tpu\]"'):
        get_topology("v5e-16")
    get_topology.cache_clear()


def test_devices_from_libtpu(v5e_2x2):
    assert v5e_2x2.num_chips == 4 and v5e_2x2.chip == chip("v5e")
    assert {d.device_kind for d in v5e_2x2.devices} == {"TPU v5 lite"}
    assert sorted(tuple(d.coords) for d in v5e_2x2.devices) == [
        (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)
    ]  # fmt: skip
    assert topology_module.dims_spanned(v5e_2x2.devices[:2]) == 1
    assert topology_module.dims_spanned(v5e_2x2.devices) == 2


def test_every_named_slice_has_its_chip_count(v5e_2x2):
    """libtpu's device list against the chips Cloud's names mean (a v5e-N has N chips; a v5p-N
    N TensorCores, two per chip), counted by hand: a table or parser that took v5p's N as
    chips, or libtpu describing another slice, fails here."""
    del v5e_2x2  # libtpu present
    for name, chips in (("v5e-256", 256), ("v5p-128", 64), ("v5p-1024", 512)):
        assert get_topology(name).num_chips == chips
