"""A stand-in for the parts of TorchRL that wsync.rl meets (TorchRL cannot
be installed here: it needs a newer torch than Debian's). Written from
TorchRL's documented interface (torchrl.weight_update, 0.11 to 0.15); see
weight_update/__init__.py. Tests put this directory first on sys.path."""
__version__ = "0.0-standin"
