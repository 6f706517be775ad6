"""A Protobuf message class for the format tests, built like generated code (no protoc).

``Order`` (package ``eos.test``): ``int64 id = 1; string name = 2; repeated string tags = 3``.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FILE = descriptor_pb2.FileDescriptorProto(
    name="eos_test_order.proto", package="eos.test", syntax="proto3"
)
_MSG = _FILE.message_type.add(name="Order")
_F = descriptor_pb2.FieldDescriptorProto
_MSG.field.add(name="id", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
_MSG.field.add(name="name", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
_MSG.field.add(name="tags", number=3, type=_F.TYPE_STRING, label=_F.LABEL_REPEATED)

_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_FILE)
Order = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("eos.test.Order"))
