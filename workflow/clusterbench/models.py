"""Network definitions: a small CNN (digits, MNIST) and a CIFAR-style ResNet.

Both models take *normalised* NCHW float input: use :func:`normalize_images` to turn the uint8
``(N, H, W, C)`` arrays of the preprocess stage into model input with the dataset's per-channel
mean/std (``meta.json``, and repeated in ``model.pt``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from clusterbench.model_registry import MODEL_CLASSES

#: Smallest image side the models accept (two 2x down-samplings must leave >= 2 pixels).
MIN_IMAGE_SIZE = 4


def _image_hw(image_size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(image_size, int):
        hw = (image_size, image_size)
    else:
        hw = tuple(int(s) for s in image_size)
        if len(hw) != 2:
            raise ValueError(f"image_size must be an int or [height, width], got {image_size!r}")
    if min(hw) < MIN_IMAGE_SIZE:
        raise ValueError(f"image_size {list(hw)} is too small: both sides must be >= 4")
    return hw  # type: ignore[return-value]


def _conv_bn_relu(cin: int, cout: int, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    ]


class SmallCNN(nn.Sequential):
    """Three conv-BN-ReLU stages with two max-pools and global average pooling.

    Size-agnostic thanks to the global pooling: 8x8 digits and 28x28 MNIST alike.
    """

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__(
            *_conv_bn_relu(in_channels, width),
            nn.MaxPool2d(2),
            *_conv_bn_relu(width, 2 * width),
            nn.MaxPool2d(2),
            *_conv_bn_relu(2 * width, 2 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(2 * width, num_classes),
        )


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv-BN layers plus a (projected when needed) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet (He et al. 2016, sec. 4.2): 3 stages of ``blocks`` basic blocks each,
    widths ``width, 2*width, 4*width``, down-sampling by stride 2 at stages 2 and 3.
    The default (3 blocks, width 16) is ResNet-20."""

    def __init__(
        self, in_channels: int, num_classes: int, blocks: int = 3, width: int = 16
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn_relu(in_channels, width))
        layers: list[nn.Module] = []
        cin = width
        for stage in range(3):
            cout = width * 2**stage
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, stride=2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)))


#: The built-in models by name (the names and their order come from the registry).
MODELS: dict[str, Callable[[int, int], nn.Module]] = {
    name: globals()[cls] for name, cls in MODEL_CLASSES.items()
}


def build_model(
    model: str, in_channels: int, num_classes: int, image_size: int | Sequence[int]
) -> nn.Module:
    """Build an untrained network; ``model.pt``'s ``arch`` dict is exactly these arguments."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r} (choose from: {', '.join(MODELS)})")
    if in_channels < 1 or num_classes < 2:
        raise ValueError(
            f"need in_channels >= 1 and num_classes >= 2, got {in_channels}, {num_classes}"
        )
    _image_hw(image_size)
    return MODELS[model](in_channels, num_classes)


def normalize_images(
    images: np.ndarray | torch.Tensor,
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
) -> torch.Tensor:
    """uint8 ``(N, H, W, C)`` images -> float32 NCHW ``(x / 255 - mean) / std`` per channel.

    ``images`` may be a NumPy array or a tensor (on any device; the result stays there).
    """
    x = torch.as_tensor(images)
    if x.ndim != 4:
        raise ValueError(f"expected (N, H, W, C) images, got shape {tuple(x.shape)}")
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
    x = x.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
    return (x - mean_t) / std_t
