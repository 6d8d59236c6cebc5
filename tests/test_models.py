"""Models by name (clusterbench.models): shapes on every supported input size, input
normalisation, model.pt round trip (an older model.pt's arch too)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from clusterbench.core.atomic import atomic_path
from clusterbench.data.images import normalize_images
from clusterbench.evaluate import build, load_model_file
from clusterbench.models import ModelError, build_model, builtin_models
from torch import nn


@pytest.mark.parametrize(
    "model, channels, size",
    [("small_cnn", 1, 8), ("small_cnn", 1, 28), ("resnet", 3, 32), ("resnet", 1, 8)],
)
def test_models_give_logits_per_class_and_contain_batchnorm(model, channels, size):
    torch.manual_seed(0)
    net = build_model(model, num_classes=10, input_shape=[channels, size, size])
    out = net(torch.randn(5, channels, size, size))
    assert out.shape == (5, 10)
    assert any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_resnet_has_residual_blocks():
    net = build_model("resnet", 10, [3, 32, 32])
    blocks = [m for m in net.modules() if type(m).__name__ == "BasicBlock"]
    assert len(blocks) == 9  # ResNet-20: 3 stages x 3 blocks


def test_same_seed_same_initial_weights():
    def weights():
        torch.manual_seed(7)
        return build_model("small_cnn", 10, [1, 8, 8]).state_dict()

    a, b = weights(), weights()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"model": "vgg"}, "unknown model 'vgg'.*resnet, small_cnn"),
        ({"model": "small_cnnn"}, r"unknown model 'small_cnnn' \(closest: small_cnn[;,]"),
        ({"input_shape": [1, 3, 3]}, "too small"),
        ({"input_shape": [8, 8]}, r"takes images \[C, H, W\]"),
        ({"num_classes": 1}, "num_classes"),
    ],
)
def test_build_model_rejects_bad_arguments(kwargs, match):
    args = {"model": "small_cnn", "num_classes": 10, "input_shape": [1, 8, 8], **kwargs}
    with pytest.raises(ModelError, match=match):
        build_model(**args)


def test_normalize_images_scales_per_channel_to_nchw():
    images = np.zeros((2, 3, 4, 2), dtype=np.uint8)  # N, H, W, C
    images[..., 0] = 255
    images[1, 0, 0, 1] = 51
    x = normalize_images(images, mean=[0.5, 0.1], std=[0.25, 0.2])
    assert x.shape == (2, 2, 3, 4) and x.dtype == torch.float32
    torch.testing.assert_close(x[:, 0], torch.full((2, 3, 4), 2.0))  # (1 - .5) / .25
    assert x[1, 1, 0, 0].item() == pytest.approx((0.2 - 0.1) / 0.2)
    assert x[0, 1, 0, 0].item() == pytest.approx(-0.5)


def test_normalize_images_rejects_wrong_rank():
    with pytest.raises(ValueError, match=r"\(N, H, W, C\)"):
        normalize_images(np.zeros((8, 8), dtype=np.uint8), [0.5], [0.5])


@pytest.mark.parametrize(
    "name", sorted(n for n, spec in builtin_models().items() if spec.task == "classification")
)
@pytest.mark.parametrize(
    "arch",
    [
        {"num_classes": 4, "input_shape": [1, 8, 8]},
        # written by an older clusterbench: the same network
        {"in_channels": 1, "num_classes": 4, "image_size": [8, 8]},
    ],
)
def test_model_file_round_trip(tmp_path, name, arch):
    arch = {"model": name, **arch}
    torch.manual_seed(1)
    net = build_model(name, 4, [1, 8, 8]).train()
    net(torch.randn(16, 1, 8, 8))  # move the BatchNorm running statistics
    net.eval()
    with atomic_path(tmp_path / "model.pt") as tmp:
        torch.save({"arch": arch, "state_dict": net.state_dict(), "mean": [0.3], "std": [0.4]}, tmp)

    ckpt = load_model_file(tmp_path / "model.pt")  # the evaluate stage's loader
    loaded = build(ckpt, tmp_path / "model.pt").eval()

    assert ckpt["mean"] == [0.3]
    x = torch.randn(3, 1, 8, 8)
    torch.testing.assert_close(loaded(x), net(x), rtol=0, atol=0)
