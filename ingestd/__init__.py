"""ingestd: ingestion appliance for a multi-tenant WORM document archive."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ingestd")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
