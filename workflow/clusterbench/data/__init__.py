"""The data a run trains and is evaluated on, shared by the train and evaluate stages.

- :mod:`clusterbench.config.storage`: how preprocessing stores a dataset (arrays, or an image
  folder's files) and which runs may read it how (standard library only: the Snakefile
  imports it);
- :mod:`clusterbench.data.arrays`: the preprocessed splits on disk (``{split}_{x,y}.npy`` and
  ``meta.json``), read and checked against each other and their recorded checksums;
- :mod:`clusterbench.data.extract` and :mod:`clusterbench.data.folder`: an image folder stored
  as files, extracted by preprocessing, read and decoded per image by the loader;
- :mod:`clusterbench.data.images`: uint8 images to the model's normalised input;
- :mod:`clusterbench.data.augment`: reproducible augmentation (``augment``);
- :mod:`clusterbench.data.loading`: resident or streamed (``loading``), and why;
- :mod:`clusterbench.data.resident`: the data resident on the training device;
- :mod:`clusterbench.data.stream`: the data streamed from disk by loader processes;
- :mod:`clusterbench.data.staging`: a node-local copy of the data, made before training;
- :mod:`clusterbench.data.source`: the one choice of a run's data source, and its record.
"""


class DataError(ValueError):
    """Data that cannot be used as the run needs it (an unreadable image, a missing input
    size, a node-local copy that cannot be made); the message names the file or the key."""
