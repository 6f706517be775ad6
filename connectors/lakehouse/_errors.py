"""The one error class of the lakehouse sinks; everything else raises ``txn``'s own classes.

:class:`LakehouseError` is what a table library or its storage refused while the sink
wrote or committed, with a stable ``code`` (one of :data:`CODES`) and the
:class:`txn.ErrorAction` it asks for. Its ``retry_stage`` is True: a failed write aborts
the epoch (the replay writes it again) and a failed commit leaves a logged commit decision
that the replay or the next driver delivers again. What no re-run can fix is raised as
``txn``'s or the stage's class: a bad option :class:`txn.ConfigError`, a DataFrame the table
cannot take :class:`connectors.stage.InputSchemaError` (naming the column and the change
that fixes it), an epoch whose prepared files are gone :class:`txn.PreparedWorkLostError`
(the epoch is redone).
"""

from __future__ import annotations

from txn import ErrorAction, TxnError

# Stable codes of LakehouseError: what failed, never how the library worded it.
WRITE_FAILED = "write-failed"  # a data file or a vote record could not be written
COMMIT_FAILED = "commit-failed"  # the table commit failed after its bounded retries
READ_FAILED = "read-failed"  # the table or its staging area could not be read
CODES = (WRITE_FAILED, COMMIT_FAILED, READ_FAILED)


class LakehouseError(TxnError):
    """A Delta Lake or Iceberg table (or its storage) refused a call of the sink.

    ``code``: one of :data:`CODES`; ``action``: retry the call, abort the epoch, or drop the
    client (:class:`txn.ErrorAction`). Pickled from the write tasks with both kept.
    """

    def __init__(self, message: str, *, code: str, action: ErrorAction = ErrorAction.ABORT) -> None:
        super().__init__(message)
        self.code = code
        self.action = action

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), self.code, self.action))


def _rebuild(
    cls: type[LakehouseError], message: str, code: str, action: ErrorAction
) -> LakehouseError:
    return cls(message, code=code, action=action)
