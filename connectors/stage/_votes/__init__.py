"""The driver vote channel of the aligned exactly-once mode: a small TCP vote server.

Why: Spark's ``BarrierTaskContext.allGather`` polls its RPC answer once per second in the
JVM, so every aligned epoch paid about one second. Here the write tasks of an epoch send
their votes to a server on the driver and are answered the moment the last vote arrives.
The barrier stage itself stays (gang scheduling; one failed task kills the others); only
the gathering moves here.

Protocol of one round (one run of the write stage of one epoch):

1. the driver calls :meth:`VoteServer.open_round` before the Spark job starts; it returns a
   :class:`VoteTicket` (address, round key, ``parallelism`` P and a fresh random token),
   which travels to the tasks inside the pickled task spec;
2. each task connects, sends one message: a 4-byte big-endian length, then compact JSON
   ``{"v", "sink_id", "epoch", "plan_attempt", "stage_run", "token", "vote"}``
   (JSON only: nothing received is ever unpickled), and waits for the answer;
3. the server checks the message (size, round, stage run, token, epoch, partition in
   ``0..P-1``, one vote per partition; a re-sent vote of the same partition is accepted
   only if identical) and answers an error at once when a check fails;
4. when all P votes are in, every waiting task is answered with the same full list of
   votes (sorted by partition), so every task reaches the same commit decision;
5. a task that waited :data:`txn.GATHER_TIMEOUT_S` breaks the round: it and every other
   task of the round get a timeout answer (:class:`StageCode.VOTE_TIMEOUT` in the task), and the
   tasks abort. A partial set of votes is never answered;
6. the driver closes the round when the job ends (waiting tasks get an error answer).

A round is keyed by ``(sink_id, epoch, plan attempt)``; the stage run (the sink's own
re-run of the write stage within one call, since Spark aborts a failed barrier result
stage instead of retrying it, and PySpark does not expose the JVM's stage attempt number
to Python tasks) orders the rounds of one key: opening a later stage run closes the
older round, whose late votes are rejected.

Not guaranteed: tasks that die after the last vote arrived may miss the answer; the
others commit, and the redo of the epoch redoes the dead task's partition by marker.

Claims (at-most-once): the same server answers ``{..., "op": "claim", "partition",
"attempt_id"}`` at once with ``{"ok": true, "granted": bool}``: the first task attempt
(Spark's ``taskAttemptId``, unique in the application) that claims a partition of the
plan owns it, and every other attempt (a Spark task retry, a re-run after a lost
executor) is refused, so no row of an at-most-once epoch is written twice.

Modules: ``_codec`` (the ticket and the vote document), ``_framing`` (length-prefixed
JSON over a socket), ``_server`` (rounds and the TCP server), ``_client`` (the task side),
``_hosts`` (which address the driver binds and advertises).
"""

from connectors.stage._votes._client import (
    claim_partition as claim_partition,
)
from connectors.stage._votes._client import (
    gather_votes as gather_votes,
)
from connectors.stage._votes._codec import (
    VoteTicket as VoteTicket,
)
from connectors.stage._votes._codec import (
    vote_from_doc as vote_from_doc,
)
from connectors.stage._votes._codec import (
    vote_to_doc as vote_to_doc,
)
from connectors.stage._votes._hosts import server_hosts as server_hosts
from connectors.stage._votes._server import VoteServer as VoteServer
