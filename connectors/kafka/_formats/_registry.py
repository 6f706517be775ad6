"""Registry clients: the real one on the driver, a pinned stand-in in the tasks.

* :func:`driver_client` builds confluent-kafka's ``SchemaRegistryClient`` from the
  ``schema_registry`` settings. A ``mock://SCOPE`` URL gives the library's in-process
  ``MockSchemaRegistryClient``, one per scope and process (as Confluent's Java serdes
  scope ``mock://`` registries), so a test reads back through the registry the sink wrote to.
* :func:`call` runs one registry request: a registry that does not answer is retried for
  :data:`REGISTRY_WAIT_S` (tenacity), then :class:`KafkaCode.SCHEMA_REGISTRY_UNAVAILABLE`; an
  HTTP refusal becomes :class:`KafkaCode.SCHEMA_RESOLUTION` at once (secrets scrubbed).
* :class:`PinnedRegistry` answers the library's serializers and deserializers in a write
  (or read) task from the epoch's plan alone: the schema ids resolved on the driver. The
  tasks make no registry request and hold no registry credentials.
* :class:`RecordingRegistry` wraps the driver client and records every subject the
  library registers or looks up (Protobuf references), for the plan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from connectors.kafka._client import Settings, scrub
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.kafka._formats._config import client_settings, confluent_registry

# Seconds the driver keeps retrying a registry that does not answer (a registry restart
# takes a few seconds; beyond this the epoch fails before it is logged and Spark replays it).
REGISTRY_WAIT_S = 30.0
_T = TypeVar("_T")
_mocks: dict[str, Any] = {}
_mocks_lock = threading.Lock()


@dataclass(frozen=True)
class Registered:
    """One schema the library asked the registry for: its subject, id and version."""

    subject: str
    schema_id: int
    version: int | None = None


def driver_client(settings: Settings) -> Any:
    """Return a registry client for ``settings`` (shared per scope for ``mock://`` URLs)."""
    sr = confluent_registry()
    conf = client_settings(settings)
    url = str(conf["url"])
    if not url.startswith("mock://"):
        return sr.SchemaRegistryClient(conf)
    with _mocks_lock:
        if url not in _mocks:
            _mocks[url] = sr.SchemaRegistryClient.new_client(conf)
        return _mocks[url]


class _Unavailable(Exception):
    """A registry request that did not reach the registry (retried)."""


def call(what: str, request: Callable[[], _T]) -> _T:
    """Run one registry request on the driver (module docstring: retries, typed errors)."""
    sr = confluent_registry()

    @retry(
        retry=retry_if_exception_type(_Unavailable),
        stop=stop_after_delay(REGISTRY_WAIT_S),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        reraise=True,
    )
    def attempt() -> _T:
        try:
            return request()
        except sr.SchemaRegistryError as exc:
            if exc.http_status_code >= 500 or exc.http_status_code == 429:
                raise _Unavailable(_describe(exc)) from exc
            msg = f"the Schema Registry refused {what}: {_describe(exc)}; {_fix(exc)}"
            raise KafkaConnectorError(msg, code=KafkaCode.SCHEMA_RESOLUTION) from None
        except (OSError, ConnectionError) as exc:
            raise _Unavailable(scrub(str(exc))) from None
        except Exception as exc:
            if _is_transport_error(exc):
                raise _Unavailable(scrub(f"{type(exc).__name__}: {exc}")) from None
            raise

    try:
        return attempt()
    except _Unavailable as exc:
        msg = (
            f"the Schema Registry did not answer {what} for {REGISTRY_WAIT_S:.0f}s ({exc}); "
            "check schema_registry['url'] and that the registry runs"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.SCHEMA_REGISTRY_UNAVAILABLE) from None


def _is_transport_error(exc: Exception) -> bool:
    """Return whether ``exc`` is one of the HTTP library's connection and timeout errors (httpx or httpx2)."""
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"TransportError", "TimeoutException", "NetworkError"})


def _describe(exc: Any) -> str:
    return scrub(f"HTTP {exc.http_status_code}, error {exc.error_code}: {exc.error_message}")


def _fix(exc: Any) -> str:
    status = exc.http_status_code
    if status in (401, 403):
        return "check schema_registry['basic.auth.user.info'] and the registry's ACLs"
    if status == 404:
        return "register the schema (or pass auto_register=True), or fix the subject/version"
    if status == 409:
        return (
            "the schema is incompatible with the subject's compatibility setting: "
            "evolve it compatibly, or change the subject's compatibility"
        )
    return "see the registry's message"


class PinnedRegistry:
    """The registry as a task sees it: only the plan's subjects, ids and schemas.

    Duck-types the part of ``SchemaRegistryClient`` the library's serdes call with
    ``auto.register.schemas`` off (``lookup_schema``, ``get_schema``, ``config``). A
    subject the plan does not hold means the task would serialize otherwise than the
    driver planned: :class:`KafkaCode.SCHEMA_RESOLUTION`, never a silent registration.
    """

    def __init__(
        self, registered: tuple[Registered, ...], schemas: Mapping[int, Any] | None = None
    ) -> None:
        self._by_subject = {r.subject: r for r in registered}
        self._schemas = dict(schemas or {})

    def config(self) -> dict[str, Any]:
        """No client settings: the tasks hold none."""
        return {}

    def lookup_schema(self, subject_name: str, schema: Any, *args: Any, **kwargs: Any) -> Any:
        """Return the plan's registration of ``subject_name`` for ``schema``."""
        found = self._by_subject.get(subject_name)
        if found is None:
            planned = sorted(self._by_subject)
            msg = (
                f"the write task asked for subject {subject_name!r}, which the epoch's plan "
                f"does not hold (planned: {planned}); the topic or format changed under the "
                "plan. Restore the sink's options until the epoch committed."
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SCHEMA_RESOLUTION)
        sr = confluent_registry()
        self._schemas.setdefault(found.schema_id, schema)
        return sr.RegisteredSchema(
            schema_id=found.schema_id,
            guid=None,
            schema=schema,
            subject=subject_name,
            version=found.version,
        )

    register_schema_full_response = lookup_schema

    def get_schema(self, schema_id: int, *args: Any, **kwargs: Any) -> Any:
        """Return a schema the plan holds by id (readers: the writer schemas)."""
        if schema_id not in self._schemas:
            msg = (
                f"schema id {schema_id} is not among the schemas known when the reader was "
                f"built ({sorted(self._schemas)}); build the decoder again (a new version "
                "was registered since)"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SCHEMA_RESOLUTION)
        return self._schemas[schema_id]


class RecordingRegistry:
    """The driver client, recording each subject the library registers or looks up."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.registered: list[Registered] = []

    def config(self) -> dict[str, Any]:
        """Nothing for the serdes' rule executors (none are used)."""
        return {}

    def register_schema_full_response(self, subject_name: str, schema: Any, **kw: Any) -> Any:
        """Register through the real client and record the answer."""
        found = call(
            f"registering subject {subject_name!r}",
            lambda: self._client.register_schema_full_response(subject_name, schema, **kw),
        )
        self.registered.append(Registered(subject_name, int(found.schema_id), found.version))
        return found

    def register_schema(self, subject_name: str, schema: Any, **kw: Any) -> int:
        """Register (a reference) through the real client and record the answer."""
        return int(self.register_schema_full_response(subject_name, schema, **kw).schema_id)

    def lookup_schema(self, subject_name: str, schema: Any, *args: Any, **kw: Any) -> Any:
        """Look up through the real client and record the answer."""
        found = call(
            f"looking up subject {subject_name!r}",
            lambda: self._client.lookup_schema(subject_name, schema, *args, **kw),
        )
        self.registered.append(Registered(subject_name, int(found.schema_id), found.version))
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
