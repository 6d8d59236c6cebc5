"""Network definitions (torch modules) behind the model families of :mod:`clusterbench.models`."""
