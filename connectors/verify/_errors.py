"""Exception hierarchy of the exactly-once checker."""

from __future__ import annotations


class VerifyError(Exception):
    """Base class of every error raised by ``connectors.verify``."""


class ReadTimeoutError(VerifyError):
    """A topic could not be read to its end offset in time; the message names the partition."""


class WireError(VerifyError):
    """The broker sent a fetch response the raw batch scanner cannot decode."""


class RecordFormatError(VerifyError):
    """A record does not carry the id/key/seq fields the checker needs; says which record."""


class IdentityOptionError(VerifyError):
    """An identity option is malformed, or an expected set cannot be read.

    A bad field path, an import path naming nothing, a range that does not parse, a file
    that cannot be read.
    """
