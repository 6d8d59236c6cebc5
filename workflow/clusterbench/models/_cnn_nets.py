"""The convolutional networks of :mod:`clusterbench.models.cnn`: a small CNN (digits, MNIST)
and a CIFAR-style ResNet.

Both take *normalised* NCHW float input (:func:`clusterbench.data.images.normalize_images`
makes it from the preprocessed uint8 ``(N, H, W, C)`` arrays, with the dataset's per-channel
mean/std: ``meta.json``, and repeated in ``model.pt``).
"""

from __future__ import annotations

import torch
from torch import nn


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
