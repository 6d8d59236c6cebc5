"""The built-in models by name: the registry the config schema's ``model`` choices come from.

Kept apart from :mod:`clusterbench.models` so that the Snakefile can validate a config without
importing torch; :data:`clusterbench.models.MODELS` maps the same names to the classes.
"""

from __future__ import annotations

#: Model name (the config's ``model``) -> class in :mod:`clusterbench.models`.
MODEL_CLASSES: dict[str, str] = {
    "small_cnn": "SmallCNN",  # digits, MNIST
    "resnet": "ResNet",  # CIFAR-style ResNet
}
