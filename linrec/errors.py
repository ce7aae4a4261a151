"""linrec's exception hierarchy: every bad input raises one of these with a message that says
what was wrong (file, line, field, value) and how to fix it. The CLI prints them without a
traceback."""


class LinrecError(Exception):
    """Base class of every error linrec raises on purpose."""


class ConfigError(LinrecError, ValueError):
    """A parameter or config value is outside its allowed range (names the field and the value)."""


class DataError(LinrecError, ValueError):
    """A data file is malformed, a column is unknown, or the data is empty after filtering."""


class DownloadError(LinrecError):
    """A dataset file could not be fetched or failed its checksum (says which file goes where)."""


class MemoryBudgetError(LinrecError, MemoryError):
    """A dense matrix would not fit in memory; the message gives the estimate and an alternative."""


class NumericalError(LinrecError, ArithmeticError):
    """A solve failed numerically (a singular or indefinite system) even after linrec's safe
    retries; the message says why and which setting avoids it."""
