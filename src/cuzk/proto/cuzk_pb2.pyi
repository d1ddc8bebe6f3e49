from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_LOW: _ClassVar[Priority]
    PRIORITY_NORMAL: _ClassVar[Priority]
    PRIORITY_HIGH: _ClassVar[Priority]
    PRIORITY_CRITICAL: _ClassVar[Priority]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_SYNTHESIZING: _ClassVar[JobState]
    JOB_STATE_PROVING: _ClassVar[JobState]
    JOB_STATE_DONE: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
PRIORITY_UNSPECIFIED: Priority
PRIORITY_LOW: Priority
PRIORITY_NORMAL: Priority
PRIORITY_HIGH: Priority
PRIORITY_CRITICAL: Priority
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_SYNTHESIZING: JobState
JOB_STATE_PROVING: JobState
JOB_STATE_DONE: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState

class KeyRef(_message.Message):
    __slots__ = ("name", "path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class FileIdentity(_message.Message):
    __slots__ = ("device", "inode", "size", "mtime_ns")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    INODE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MTIME_NS_FIELD_NUMBER: _ClassVar[int]
    device: int
    inode: int
    size: int
    mtime_ns: int
    def __init__(self, device: _Optional[int] = ..., inode: _Optional[int] = ..., size: _Optional[int] = ..., mtime_ns: _Optional[int] = ...) -> None: ...

class SubmitProofRequest(_message.Message):
    __slots__ = ("key", "witness", "witness_path", "input_json", "witness_identity", "priority", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    WITNESS_FIELD_NUMBER: _ClassVar[int]
    WITNESS_PATH_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    WITNESS_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: KeyRef
    witness: bytes
    witness_path: str
    input_json: str
    witness_identity: FileIdentity
    priority: Priority
    request_id: str
    def __init__(self, key: _Optional[_Union[KeyRef, _Mapping]] = ..., witness: _Optional[bytes] = ..., witness_path: _Optional[str] = ..., input_json: _Optional[str] = ..., witness_identity: _Optional[_Union[FileIdentity, _Mapping]] = ..., priority: _Optional[_Union[Priority, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SubmitProofResponse(_message.Message):
    __slots__ = ("job_id", "deduplicated")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    deduplicated: bool
    def __init__(self, job_id: _Optional[str] = ..., deduplicated: bool = ...) -> None: ...

class AwaitProofRequest(_message.Message):
    __slots__ = ("job_id", "timeout_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    timeout_s: float
    def __init__(self, job_id: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class ProveRequest(_message.Message):
    __slots__ = ("submit", "timeout_s")
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    submit: SubmitProofRequest
    timeout_s: float
    def __init__(self, submit: _Optional[_Union[SubmitProofRequest, _Mapping]] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class ProofResult(_message.Message):
    __slots__ = ("job_id", "state", "proof_json", "public_signals", "error", "timings", "circuit", "request_id")
    class TimingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROOF_JSON_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: JobState
    proof_json: str
    public_signals: _containers.RepeatedScalarFieldContainer[str]
    error: str
    timings: _containers.ScalarMap[str, float]
    circuit: str
    request_id: str
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., proof_json: _Optional[str] = ..., public_signals: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., timings: _Optional[_Mapping[str, float]] = ..., circuit: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelProofRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelProofResponse(_message.Message):
    __slots__ = ("cancelled", "state")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    state: JobState
    def __init__(self, cancelled: bool = ..., state: _Optional[_Union[JobState, str]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("status_json",)
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    status_json: str
    def __init__(self, status_json: _Optional[str] = ...) -> None: ...

class GetMetricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMetricsResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class KeyRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: KeyRef
    def __init__(self, key: _Optional[_Union[KeyRef, _Mapping]] = ...) -> None: ...

class KeyResponse(_message.Message):
    __slots__ = ("key_json",)
    KEY_JSON_FIELD_NUMBER: _ClassVar[int]
    key_json: str
    def __init__(self, key_json: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "limit")
    STATES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    limit: int
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., limit: _Optional[int] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "circuit", "priority", "state", "submitted_at", "started_at", "finished_at", "error", "request_id", "attempts")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    circuit: str
    priority: Priority
    state: JobState
    submitted_at: float
    started_at: float
    finished_at: float
    error: str
    request_id: str
    attempts: int
    def __init__(self, job_id: _Optional[str] = ..., circuit: _Optional[str] = ..., priority: _Optional[_Union[Priority, str]] = ..., state: _Optional[_Union[JobState, str]] = ..., submitted_at: _Optional[float] = ..., started_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., error: _Optional[str] = ..., request_id: _Optional[str] = ..., attempts: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...
