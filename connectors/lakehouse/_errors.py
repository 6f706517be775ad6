"""The one error class of the lakehouse sinks; everything else raises ``txn``'s or the stage's codes.

:class:`LakehouseError` is what a table library or its storage refused while the sink
wrote or committed, with a stable ``code`` (a :class:`LakehouseCode`) and the
:class:`txn.ErrorAction` it asks for. Its ``retry_stage`` is True: a failed write aborts
the epoch (the replay writes it again) and a failed commit leaves a logged commit decision
that the replay or the next driver delivers again. What no re-run can fix is raised with
``txn``'s or the stage's code: a bad option ``txn.TxnCode.CONFIG``, a DataFrame the table
cannot take ``connectors.stage.StageCode.INPUT_SCHEMA`` (naming the column and the change
that fixes it), an epoch whose prepared files are gone ``txn.TxnCode.PREPARED_WORK_LOST``
(the epoch is redone).
"""

from __future__ import annotations

from typing import ClassVar

from txn import ErrorCode, TxnError


class LakehouseCode(ErrorCode):
    """What failed, never how the library worded it."""

    WRITE_FAILED = ("write-failed", True)  # a data file or a vote record could not be written
    COMMIT_FAILED = ("commit-failed", True)  # the table commit failed after its bounded retries
    READ_FAILED = ("read-failed", True)  # the table or its staging area could not be read


WRITE_FAILED = LakehouseCode.WRITE_FAILED
COMMIT_FAILED = LakehouseCode.COMMIT_FAILED
READ_FAILED = LakehouseCode.READ_FAILED


class LakehouseError(TxnError):
    """A Delta Lake or Iceberg table (or its storage) refused a call of the sink.

    ``code``: a :class:`LakehouseCode` (or a core or stage code); ``action``: retry the
    call, abort the epoch, or drop the client (:class:`txn.ErrorAction`).
    """

    default_code: ClassVar[ErrorCode] = LakehouseCode.WRITE_FAILED
