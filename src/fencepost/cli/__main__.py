"""``python -m fencepost.cli``: the same command line as the ``fencepost`` console script."""

from fencepost.cli.app import app

if __name__ == "__main__":
    app(prog_name="fencepost")
