# mypy: disable-error-code="type-arg"
from gpusteward.integrations.prometheus.remote_write.proto import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WriteRequest(_message.Message):
    __slots__ = ("timeseries",)
    TIMESERIES_FIELD_NUMBER: _ClassVar[int]
    timeseries: _containers.RepeatedCompositeFieldContainer[_types_pb2.TimeSeries]
    def __init__(self, timeseries: _Optional[_Iterable[_Union[_types_pb2.TimeSeries, _Mapping]]] = ...) -> None: ...

class WriteRequestRaw(_message.Message):
    __slots__ = ("timeseries",)
    TIMESERIES_FIELD_NUMBER: _ClassVar[int]
    timeseries: _containers.RepeatedCompositeFieldContainer[TimeSeriesRaw]
    def __init__(self, timeseries: _Optional[_Iterable[_Union[TimeSeriesRaw, _Mapping]]] = ...) -> None: ...

class TimeSeriesRaw(_message.Message):
    __slots__ = ("labels", "samples")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[bytes]
    samples: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, labels: _Optional[_Iterable[bytes]] = ..., samples: _Optional[_Iterable[bytes]] = ...) -> None: ...

class WriteRequestFlat(_message.Message):
    __slots__ = ("timeseries",)
    TIMESERIES_FIELD_NUMBER: _ClassVar[int]
    timeseries: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, timeseries: _Optional[_Iterable[bytes]] = ...) -> None: ...
