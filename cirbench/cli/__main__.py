"""``python -m cirbench.cli``: the command line, as ``torchrun ... -m cirbench.cli run`` starts it."""

from cirbench.cli.main import app

if __name__ == "__main__":
    app()
