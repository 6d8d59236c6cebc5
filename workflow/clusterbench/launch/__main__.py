"""``python -m clusterbench.launch``: see :mod:`clusterbench.launch`."""

from clusterbench.launch.cli import cli

if __name__ == "__main__":
    cli()
