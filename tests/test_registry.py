"""The plugin registry every extension point uses (clusterbench.core.registry)."""

from __future__ import annotations

import sys

import pytest
from clusterbench.core.registry import Registry, UnknownPlugin, closest, module_name, plugin_name


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``toyplugins`` with plugins ``alpha``, ``image_folder`` and a helper ``_util``."""
    root = tmp_path / "toyplugins"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "alpha.py").write_text("VALUE = 'a'\n")
    (root / "image_folder.py").write_text("VALUE = 'if'\n")
    (root / "_util.py").write_text("raise RuntimeError('a helper is no plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "toyplugins"
    for name in [m for m in sys.modules if m.startswith("toyplugins")]:
        del sys.modules[name]


def test_names_come_from_the_files_without_importing_them(package):
    reg = Registry(package, "toy")
    assert reg.names() == ("alpha", "image-folder")
    assert f"{package}.alpha" not in sys.modules
    assert "image-folder" in reg and "_util" not in reg and "util" not in reg


def test_a_plugin_is_imported_when_used(package):
    reg = Registry(package, "toy")
    assert reg.get("image-folder", "VALUE") == "if"
    assert reg.module("alpha").VALUE == "a"


def test_underscored_names_stay_as_they_are(package):
    assert Registry(package, "toy", underscores=True).names() == ("alpha", "image_folder")


def test_an_unknown_name_names_the_closest(package):
    reg = Registry(package, "toy")
    with pytest.raises(UnknownPlugin, match=r"unknown toy 'image-fold' \(closest: image-folder;"):
        reg.check("image-fold")
    with pytest.raises(AttributeError, match="toy plugin 'alpha' .* defines no 'MISSING'"):
        reg.get("alpha", "MISSING")


def test_name_mapping_and_closest():
    assert module_name("synthetic-text") == "synthetic_text"
    assert plugin_name("cifar_binary") == "cifar-binary"
    assert closest("resnt50", ["resnet50", "resnet18", "vgg11"])[0] == "resnet50"
