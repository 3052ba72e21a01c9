"""``python -m fencepost.cli``: the same command line as the ``fencepost`` console script."""

from fencepost.cli.app import main

if __name__ == "__main__":
    main(prog_name="fencepost")
