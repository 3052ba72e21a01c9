"""``python -m fencepost.cli``: the same command line as the ``fencepost`` console script (``main``: so that a
non-UTF-8 argument is one line and exit 2 here too, not a traceback)."""

from fencepost.cli.entry import main

if __name__ == "__main__":
    main(prog_name="fencepost")
