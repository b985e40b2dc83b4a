"""The package's version (ml_comm.__version__; the TensorFlow op cache keys on it)."""

VERSION = "0.1.0"
