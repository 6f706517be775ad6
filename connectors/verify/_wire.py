"""Independent ground truth of transactions: scan raw record batches with Fetch v4.

librdkafka hides control records and (for ``read_committed``) aborted data, so the checker
reads the log itself to learn which offsets were committed, aborted or are still open:

1. find each partition's leader from the cluster metadata and connect to it as the
   cluster's ``client_config`` says (TLS, SASL PLAIN / SCRAM: ``_wire_auth``);
2. send ``Fetch`` v4 with ``isolation_level = READ_UNCOMMITTED`` from offset 0 up to the high
   watermark, decoding only record-batch headers (magic 2): base offset, last offset delta,
   attributes (transactional bit 4, control bit 5), producer id and epoch;
3. per producer id, transactional data batches stay *open* until that producer's next control
   batch; its control record's type (0 = ABORT, 1 = COMMIT) settles them all;
4. batches still open at the high watermark are open transactions.

Compressed data batches need no decompression: only headers are read, and control batches
are never compressed. Every number on the wire is big-endian.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from connectors.kafka._client import ClientConfig, admin_client, cluster_of
from connectors.verify._errors import WireError
from connectors.verify._wire_auth import open_broker, recv_exact

# Seconds one request/response round trip may take on a busy machine.
SOCKET_TIMEOUT_S = 30.0
# Milliseconds the broker may wait for data before answering a fetch (none is expected: we
# fetch only below the high watermark).
FETCH_MAX_WAIT_MS = 100
# Bytes per fetch response and per partition (large enough for any single batch we write).
FETCH_MAX_BYTES = 16 * 1024 * 1024

_API_FETCH = 1
_FETCH_VERSION = 4
_READ_UNCOMMITTED = 0
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # 61 bytes, record batch v2
_CONTROL_ABORT = 0
_CONTROL_COMMIT = 1


@dataclass(frozen=True, kw_only=True)
class BatchSpan:
    """Offsets ``first..last`` (inclusive) of one data batch and the producer that wrote it."""

    first: int
    last: int
    producer_id: int
    producer_epoch: int
    transactional: bool


@dataclass(frozen=True, kw_only=True)
class PartitionScan:
    """What the raw log of one partition says about its transactions."""

    partition: int
    high_watermark: int
    last_stable_offset: int
    committed: tuple[BatchSpan, ...] = ()
    aborted: tuple[BatchSpan, ...] = ()
    open: tuple[BatchSpan, ...] = ()
    non_transactional: tuple[BatchSpan, ...] = ()
    commit_markers: int = 0
    abort_markers: int = 0


@dataclass(kw_only=True)
class _ScanState:
    open_by_pid: dict[int, list[BatchSpan]] = field(default_factory=dict)
    committed: list[BatchSpan] = field(default_factory=list)
    aborted: list[BatchSpan] = field(default_factory=list)
    plain: list[BatchSpan] = field(default_factory=list)
    commit_markers: int = 0
    abort_markers: int = 0


def scan_topic(
    bootstrap: str, topic: str, *, client_config: ClientConfig = None
) -> dict[int, PartitionScan]:
    """Scan every partition of ``topic`` (see the module docstring for the steps).

    ``client_config``: the settings every client shares (security, as the sink's option);
    the raw connections honour them too (``_wire_auth``).
    """
    cluster = cluster_of(bootstrap, client_config)
    admin = admin_client(cluster)  # typed if refused
    md = admin.list_topics(topic=topic, timeout=SOCKET_TIMEOUT_S)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        msg = f"topic {topic!r} is not available for a raw scan"
        raise WireError(msg)
    out: dict[int, PartitionScan] = {}
    for pid, pmd in sorted(tmd.partitions.items()):
        broker = md.brokers.get(pmd.leader)
        if broker is None:
            msg = f"partition {topic}/{pid} has no leader in the metadata"
            raise WireError(msg)
        with open_broker(str(broker.host), int(broker.port), cluster, SOCKET_TIMEOUT_S) as sock:
            out[pid] = _scan_partition(sock, topic, pid)
    return out


def _scan_partition(sock: socket.socket, topic: str, partition: int) -> PartitionScan:
    state = _ScanState()
    offset, hwm, lso, correlation = 0, -1, -1, 0
    while hwm < 0 or offset < hwm:
        correlation += 1
        hwm, lso, records = _fetch(sock, correlation, topic, partition, offset)
        if offset >= hwm:
            break
        advanced = _consume_batches(records, state, offset)
        if advanced <= offset:
            msg = f"fetch of {topic}/{partition} at {offset} returned no complete batch"
            raise WireError(msg)
        offset = advanced
    return PartitionScan(
        partition=partition,
        high_watermark=hwm,
        last_stable_offset=lso,
        committed=tuple(state.committed),
        aborted=tuple(state.aborted),
        open=tuple(s for spans in state.open_by_pid.values() for s in spans),
        non_transactional=tuple(state.plain),
        commit_markers=state.commit_markers,
        abort_markers=state.abort_markers,
    )


def _consume_batches(data: bytes, state: _ScanState, offset: int) -> int:
    pos = 0
    while pos + _BATCH_HEADER.size <= len(data):
        (
            base,
            length,
            _leader_epoch,
            magic,
            _crc,
            attrs,
            last_delta,
            _ts0,
            _ts1,
            producer_id,
            producer_epoch,
            _seq,
            _count,
        ) = _BATCH_HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data):
            break  # a partial batch at the end of the response: fetch it again
        if magic != 2:
            msg = f"record batch at offset {base} has magic {magic}; only magic 2 is supported"
            raise WireError(msg)
        last = base + last_delta
        if last >= offset:
            span = BatchSpan(
                first=base,
                last=last,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=bool(attrs & _ATTR_TRANSACTIONAL),
            )
            if attrs & _ATTR_CONTROL:
                _settle(state, producer_id, _control_type(data[pos + _BATCH_HEADER.size : end]))
            elif span.transactional:
                state.open_by_pid.setdefault(producer_id, []).append(span)
            else:
                state.plain.append(span)
            offset = last + 1
        pos = end
    return offset


def _settle(state: _ScanState, producer_id: int, control_type: int) -> None:
    spans = state.open_by_pid.pop(producer_id, [])
    if control_type == _CONTROL_COMMIT:
        state.committed.extend(spans)
        state.commit_markers += 1
    elif control_type == _CONTROL_ABORT:
        state.aborted.extend(spans)
        state.abort_markers += 1
    else:
        msg = f"unknown control record type {control_type}"
        raise WireError(msg)


def _control_type(records: bytes) -> int:
    """Decode the type of the single control record of a control batch (key: version, type)."""
    pos = 0
    _length, pos = _varint(records, pos)
    pos += 1  # attributes
    _ts_delta, pos = _varint(records, pos)
    _offset_delta, pos = _varint(records, pos)
    key_len, pos = _varint(records, pos)
    if key_len < 4:
        msg = f"control record key of {key_len} bytes is too short"
        raise WireError(msg)
    _version, control_type = struct.unpack_from(">hh", records, pos)
    return int(control_type)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift, raw = 0, 0
    while True:
        if pos >= len(data):
            msg = "varint runs past the end of the record"
            raise WireError(msg)
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


def _fetch(
    sock: socket.socket, correlation: int, topic: str, partition: int, offset: int
) -> tuple[int, int, bytes]:
    topic_raw = topic.encode()
    body = struct.pack(">iiiib", -1, FETCH_MAX_WAIT_MS, 1, FETCH_MAX_BYTES, _READ_UNCOMMITTED)
    body += struct.pack(">i", 1) + struct.pack(">h", len(topic_raw)) + topic_raw
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, FETCH_MAX_BYTES)
    client = b"eos-verify"
    header = struct.pack(">hhi", _API_FETCH, _FETCH_VERSION, correlation)
    header += struct.pack(">h", len(client)) + client
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return _parse_fetch(recv_exact(sock, size), correlation, topic, partition, offset)


def _parse_fetch(
    data: bytes, correlation: int, topic: str, partition: int, offset: int
) -> tuple[int, int, bytes]:
    got_corr, _throttle, n_topics = struct.unpack_from(">iii", data, 0)
    if got_corr != correlation or n_topics != 1:
        msg = f"unexpected fetch response (correlation {got_corr}, {n_topics} topics)"
        raise WireError(msg)
    pos = 12
    name_len = struct.unpack_from(">h", data, pos)[0]
    pos += 2 + name_len + 4  # topic name, partition count (1)
    pid, error, hwm, lso = struct.unpack_from(">ihqq", data, pos)
    pos += 22
    if error != 0 or pid != partition:
        msg = f"fetch {topic}/{partition}@{offset} failed with Kafka error code {error}"
        raise WireError(msg)
    n_aborted = struct.unpack_from(">i", data, pos)[0]
    pos += 4 + max(n_aborted, 0) * 16
    size = struct.unpack_from(">i", data, pos)[0]
    pos += 4
    return hwm, lso, data[pos : pos + max(size, 0)]
