"""Dataset readers, one module per public format (`<format>.py`), behind one registry
(`linrec.data.sources.registry`: `load_source`, `source_config`, `source_loader`, `SOURCES`)."""

from linrec.data.sources.registry import SOURCES, load_source, source_config, source_loader

__all__ = ["SOURCES", "load_source", "source_config", "source_loader"]
