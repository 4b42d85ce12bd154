"""A stand-in for the parts of TorchRL that wsync.rl meets (TorchRL cannot
be installed here: it needs a newer torch than Debian's). Written from
TorchRL's documented interface (torchrl.weight_update, 0.11 to 0.15) and
what TorchRL 0.14.0's collectors do with a scheme (torchrl.collectors: a
meta policy sent to the workers, a worker's error rebuilt from its
message); see weight_update/ and collectors/. Tests put this directory
first on sys.path."""
__version__ = "0.0-standin"
