"""The data a run trains and is evaluated on, shared by the train and evaluate stages.

- :mod:`clusterbench.data.arrays`: the preprocessed splits on disk (``{split}_{x,y}.npy`` and
  ``meta.json``), read and checked against each other and their recorded checksums;
- :mod:`clusterbench.data.images`: uint8 images to the model's normalised input;
- :mod:`clusterbench.data.resident`: a run's training and validation data, resident on the
  training device, served to the training loop batch by batch.
"""
