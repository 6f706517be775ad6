"""The bounds check that runs before kio decodes a request frame."""

import random
import struct

import pytest

from minikafka._errors import ProtocolError
from minikafka._framecheck import check_frame
from minikafka._handlers import API_TABLE
from minikafka._protocol import parse_request, request_class
from tests.minikafka.fuzzing import Drawer, typed_request

SUPPORTED = [
    (spec.api_key, version)
    for spec in API_TABLE.values()
    for version in range(spec.min_version, spec.max_version + 1)
]


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
def test_well_formed_requests_pass_and_decode(api_key, version):
    drawer = Drawer(random.Random(api_key * 100 + version), ["t", "g"])
    for correlation_id in range(20):
        frame = typed_request(drawer, api_key, version, correlation_id)
        check_frame(frame, request_class(api_key, version))
        header, _ = parse_request(frame, api_key, version)
        assert header.correlation_id == correlation_id


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
def test_cut_requests_fail_only_with_protocol_error(api_key, version):
    drawer = Drawer(random.Random(api_key * 7 + version), ["t"])
    for correlation_id in range(10):
        frame = typed_request(drawer, api_key, version, correlation_id)
        for cut in range(len(frame) - 1, 7, -max(1, len(frame) // 15)):
            try:
                parse_request(frame[:cut], api_key, version)
            except ProtocolError:
                continue


def _metadata_v1(topic_count: int, tail: bytes = b"") -> bytes:
    header = struct.pack(">hhih", 3, 1, 1, -1)
    return header + struct.pack(">i", topic_count) + tail


def test_huge_array_count_is_refused_before_decoding():
    # A count of 2**31-1 once made kio's native reader reserve ~100 GB and abort the process.
    with pytest.raises(ProtocolError, match="elements"):
        check_frame(_metadata_v1(2**31 - 1), request_class(3, 1))
    with pytest.raises(ProtocolError):
        parse_request(_metadata_v1(2**31 - 1), 3, 1)
    check_frame(_metadata_v1(1, struct.pack(">h", 1) + b"t"), request_class(3, 1))
    check_frame(_metadata_v1(-1), request_class(3, 1))  # null: every topic


def test_string_and_varint_lengths_past_the_end_are_refused():
    with pytest.raises(ProtocolError):
        check_frame(_metadata_v1(1, struct.pack(">h", 500) + b"short"), request_class(3, 1))
    # A flexible request (ApiVersions v3) whose compact string claims more than is there.
    header = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00"
    with pytest.raises(ProtocolError):
        check_frame(header + b"\x7f" + b"abc", request_class(18, 3))
    with pytest.raises(ProtocolError, match="varint"):
        check_frame(header + b"\xff" * 8, request_class(18, 3))


def test_null_for_a_non_nullable_field_is_refused():
    # CreatePartitions v2 (flexible): topics is a non-nullable compact array; 0 encodes null.
    # kio decoded it as None and the handler failed on it (found by fuzzing).
    header = struct.pack(">hhih", 37, 2, 1, -1) + b"\x00"
    body = b"\x00" + struct.pack(">i", 1000) + b"\x00" + b"\x00"
    with pytest.raises(ProtocolError, match="non-nullable field topics"):
        check_frame(header + body, request_class(37, 2))
    # Metadata v1's topics may be null (all topics); a topic name may not.
    with pytest.raises(ProtocolError, match="non-nullable field name"):
        check_frame(_metadata_v1(1, struct.pack(">h", -1)), request_class(3, 1))
