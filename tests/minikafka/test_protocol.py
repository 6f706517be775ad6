from kio.schema.errors import ErrorCode
from kio.schema.metadata.v8.response import MetadataResponse
from kio.serial import entity_reader

from minikafka._handlers import API_TABLE
from minikafka._protocol import build_response, encode_response, request_class


def test_build_fills_missing_fields_and_drops_unknown():
    resp = build_response(
        3,
        8,
        {
            "brokers": [{"node_id": 0, "host": "h", "port": 9}],
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0}], "topic_id": "ignored-in-v8"}
            ],
        },
    )
    assert isinstance(resp, MetadataResponse)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.none
    frame = encode_response(3, 42, resp)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 42
    parsed, _ = entity_reader(MetadataResponse)(frame, 8)
    assert parsed == resp


def test_every_advertised_version_has_kio_schemas_and_error_builder():
    for spec in API_TABLE.values():
        for v in range(spec.min_version, spec.max_version + 1):
            req_cls = request_class(spec.api_key, v)
            assert req_cls.__api_key__ == spec.api_key
            # every handler's error builder must produce a buildable response
            build_response(spec.api_key, v, {"error_code": ErrorCode.none})


def test_flexible_response_header_except_api_versions():
    resp = build_response(18, 3, {"api_keys": []})
    frame = encode_response(18, 1, resp)
    assert frame[8:10] == b"\x00\x00"  # ApiVersions keeps header v0: body starts at once
    resp22 = build_response(22, 4, {})
    frame22 = encode_response(22, 1, resp22)
    assert frame22[8] == 0  # tagged-field count of response header v1
