"""The package version, at the bottom so that any module can name it (``jaxacct.__version__``)."""

__version__ = "0.1.0"
