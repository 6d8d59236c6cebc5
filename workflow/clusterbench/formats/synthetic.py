"""``format: synthetic``: images and labels generated on the training device from the
dataset's ``split_seed``, as Horovod's synthetic benchmark does (no files: nothing is
downloaded, and the preprocess stage writes ``meta.json`` alone).

``samples`` images of ``shape`` ``[C, H, W]`` (default: 3 channels at the model's own input
size, ``ModelSpec.input_size``) with labels of ``classes`` classes, split into train, val and
test by ``val_fraction`` and ``test_fraction``. Pixels and labels are uniform and independent
(:mod:`clusterbench.data.synthetic`): the accuracy is not meaningful, the throughput is.
"""

FILES = (0,)
SUFFIXES = None
RESIZES = False
TASK = "classification"
SYNTHETIC = True
KEYS = ("classes", "samples")
OPTIONAL_KEYS = ("shape",)
