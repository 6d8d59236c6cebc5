"""``format: synthetic-text``: byte-token sequences generated on the training device from
the dataset's ``split_seed`` (no files: nothing is downloaded, and the preprocess stage writes
``meta.json`` alone).

``samples`` sequences of ``seq_len`` tokens (default: the model's context) and their next
tokens, split into train, val and test by ``val_fraction`` and ``test_fraction``. Tokens are
uniform and independent (:mod:`clusterbench.data.synthetic`): the loss stays near ln 256, the
tokens per second are what is measured.
"""

FILES = (0,)
SUFFIXES = None
RESIZES = False
TASK = "language-model"
SYNTHETIC = True
KEYS = ("samples",)
OPTIONAL_KEYS = ("seq_len",)
