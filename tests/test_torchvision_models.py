"""torchvision's classification models by name (clusterbench.models.torchvision): the static
list the config check reads is torchvision's own, each is built randomly initialised (never
downloading weights) for the data's shape, and the names a user might try are answered."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
import torchvision
from clusterbench.models import ModelError, build_model, fit_problems, problems, resolve
from clusterbench.models import torchvision as family
from conftest import REPO


def test_the_static_list_is_the_installed_torchvisions_classification_models():
    from torchvision import models

    assert torchvision.__version__.split("+")[0] == family.TORCHVISION_VERSION
    names = models.list_models(module=models)
    assert sorted(family.CLASSIFIERS) == sorted(names)
    for name in names:
        trained_at = min(w.transforms().crop_size[0] for w in models.get_model_weights(name))
        assert family.CLASSIFIERS[name][0] == trained_at, name
        assert resolve(f"torchvision.{name}").input_size == (trained_at, trained_at)


def test_the_config_check_imports_no_torchvision():
    code = (
        "import sys; from clusterbench import config; "
        "config.validate({'runs': [{'name': 'a', 'dataset': 'digits', "
        "'model': 'torchvision.resnet50'}], 'report': {'title': 't'}}); "
        "print('torchvision' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "workflow")},
        check=False,
    )
    # digits has 1 channel: refused, but only after the model was looked up
    assert "takes 3-channel images" in out.stderr, out.stderr
    code = code.replace("'digits'", "'cifar10'").replace(
        "'report'", "'datasets': {'cifar10': {}}, 'report'"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO / "workflow")},
        check=True,
    )
    assert out.stdout.split() == ["False", "False"]


def no_download(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)


def test_a_model_is_built_randomly_initialised_for_the_data(monkeypatch):
    no_download(monkeypatch)
    torch.manual_seed(0)
    net = build_model("torchvision.resnet18", 7, [3, 32, 32])
    torch.manual_seed(1)
    other = build_model("torchvision.resnet18", 7, [3, 32, 32])
    assert not torch.equal(net.conv1.weight, other.conv1.weight)
    out = net.train()(torch.randn(4, 3, 32, 32))
    assert out.shape == (4, 7)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


@pytest.mark.parametrize("name, size", [("inception_v3", 75), ("googlenet", 32)])
def test_models_with_auxiliary_logits_give_the_main_logits_alone_in_training(name, size):
    net = build_model(f"torchvision.{name}", 5, [3, size, size]).train()
    out = net(torch.randn(2, 3, size, size))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())  # no head without a gradient


def test_a_vision_transformer_is_built_for_the_datas_side():
    net = build_model("torchvision.vit_b_32", 3, [3, 64, 64])
    assert net(torch.randn(1, 3, 64, 64)).shape == (1, 3)
    with pytest.raises(ModelError, match="multiple of its patch \\(32\\), got 48x48"):
        build_model("torchvision.vit_b_32", 3, [3, 48, 48])


def test_an_input_the_network_cannot_take_is_named_when_it_is_built():
    with pytest.raises(ModelError, match=r"'torchvision.maxvit_t' cannot take images of shape"):
        build_model("torchvision.maxvit_t", 3, [3, 256, 256])


@pytest.mark.parametrize(
    "name, match",
    [
        ("torchvision.resnet50(weights='IMAGENET1K_V2')", "weights are never downloaded"),
        ("torchvision.resnet50(pretrained=True)", "random initialisation"),
        ("torchvision.ResNet50_Weights.IMAGENET1K_V2", "weights are never downloaded"),
        ("torchvision.resnet50(num_classes=3)", "takes no arguments: write torchvision.resnet50"),
        ("torchvision.models.resnet50", "write torchvision.resnet50"),
        ("torchvision.models:resnet50", "write torchvision.resnet50"),
        ("torchvision.resnet5", r"closest: torchvision.resnet50"),
        ("resnet50", "did you mean torchvision.resnet50"),
        ("vit_b_16", "did you mean torchvision.vit_b_16"),
    ],
)
def test_names_a_user_might_try_are_answered(name, match):
    (problem,) = problems(name, "runs[0].model")
    assert problem.startswith("runs[0].model: ")
    assert re.search(match, problem), problem


def test_what_a_torchvision_model_takes_is_checked_against_the_data():
    assert fit_problems("torchvision.resnet50", "classification", [3, 224, 224]) == []
    assert "3-channel" in fit_problems("torchvision.resnet50", "classification", [1, 28, 28])[0]
    (small,) = fit_problems("torchvision.inception_v3", "classification", [3, 32, 32])
    assert "at least 75x75" in small
    (wrong,) = fit_problems("torchvision.resnet50", "language-model", [64])
    assert "classification model" in wrong and "holds token sequences" in wrong


@pytest.mark.parametrize("name", ["resnet18", "vit_b_32", "efficientnet_b0"])
def test_bf16_autocast_trains_on_the_cpu(name):
    torch.manual_seed(0)
    net = build_model(f"torchvision.{name}", 3, [3, 32, 32]).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(torch.randn(4, 3, 32, 32))
    assert logits.dtype == torch.bfloat16
    loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
