"""The relay's sinks (ADR 0039): a Python callable, an HTTP webhook (httpx) and RabbitMQ with publisher confirms
(pika). Each is a ``Publisher``: ``publish`` returns only once the sink accepted the event, and raises otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from fencepost.events.relay import PublishFailed, envelope_bytes
from fencepost.store.host_records import EventOutboxRecord, EventRecord

if TYPE_CHECKING:  # pika is imported when an AMQP sink connects, so that the others never need it
    import pika

#: The idempotency header: the event id, the same on every delivery of one event.
EVENT_ID_HEADER = "Fencepost-Event-Id"
#: The body signature, in the scheme of the completion endpoint (docs/api.md): ``t=<unix s>,v1=<hex HMAC>``.
SIGNATURE_HEADER = "Fencepost-Signature"


def sign_body(secret: str, timestamp: int, body: bytes) -> str:
    """``t=<timestamp>,v1=<hex HMAC-SHA256(secret, b"<timestamp>." + body)>``: the header a receiver checks.

    The timestamp is inside the signed bytes, so a captured delivery cannot be re-dated; a receiver accepts it
    only within a window around its own clock (``fencepost.api.signatures.refusal`` is such a check).
    """
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class CallableSink:
    """Calls ``fn(event, outbox)``; it accepts by returning and refuses by raising (tests, embedding)."""

    def __init__(self, fn: Callable[[EventRecord, EventOutboxRecord], object]) -> None:
        self._fn = fn

    def publish(self, event: EventRecord, outbox: EventOutboxRecord) -> None:
        """Call the function; its exception is the failure."""
        self._fn(event, outbox)


class WebhookSink:
    """POSTs each envelope as JSON to ``url``; a 2xx answer is acceptance, anything else a failure.

    Headers: ``Content-Type: application/json``, ``Fencepost-Event-Id`` (the idempotency key),
    ``Fencepost-Event-Type`` and, with a ``secret``, ``Fencepost-Signature`` over the exact body bytes.

    Args:
        url: http(s) URL. secret: the HMAC key (None sends no signature). timeout_seconds: the whole request,
            answer included (a receiver that trickles its answer fails the publish); keep it well under the
            relay's lease. client: an httpx.Client to use (the sink closes only its own).
    """

    def __init__(self, url: str, *, secret: str | None = None, timeout_seconds: float = 10.0,
                 client: httpx.Client | None = None, clock: Callable[[], float] = time.time) -> None:
        if urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"webhook URL must be http or https: {url!r}")
        self.url = url
        self._secret = secret
        self._own = client is None
        self._client = client or httpx.Client(timeout=timeout_seconds / 3)  # each phase; the whole: below
        self._timeout = timeout_seconds
        self._clock = clock

    def publish(self, event: EventRecord, outbox: EventOutboxRecord) -> None:
        """POST the envelope; raises ``PublishFailed`` on a transport error or a non-2xx status."""
        body = envelope_bytes(event, outbox)
        headers = {"Content-Type": "application/json", EVENT_ID_HEADER: event.id, "Fencepost-Event-Type": event.type}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign_body(self._secret, int(self._clock()), body)
        # httpx's timeout bounds each phase (connect, each read); a receiver that trickles its answer would keep
        # one publish going past the relay's lease. The whole request gets the budget, checked between chunks.
        deadline = time.monotonic() + self._timeout
        try:
            with self._client.stream("POST", self.url, content=body, headers=headers) as response:
                received = bytearray()
                for chunk in response.iter_bytes():
                    if len(received) < 200:
                        received += chunk[:200 - len(received)]
                    if time.monotonic() > deadline:
                        raise PublishFailed(f"webhook did not finish answering within {self._timeout:g} s")
                status = response.status_code
        except httpx.HTTPError as error:
            # Not connected at all (refused, unresolvable, no answer to the connect): nothing was sent, and no other
            # event would get through either (ADR 0109).
            unreachable = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))
            raise PublishFailed(f"webhook transport error: {type(error).__name__}: {error}",
                                sink_unavailable=unreachable) from error
        if time.monotonic() > deadline:
            raise PublishFailed(f"webhook did not finish answering within {self._timeout:g} s")
        if not 200 <= status < 300:
            raise PublishFailed(f"webhook answered HTTP {status}: {received.decode('utf-8', 'replace')}")

    def close(self) -> None:
        if self._own:
            self._client.close()


def redacted(url: str) -> str:
    """``url`` without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class _ConfirmDeadline:
    """Ends a publish's wait for its confirm after ``seconds`` (ADR 0110).

    pika's blocking ``basic_publish`` waits for the broker's confirm with no bound of its own: a broker that keeps
    the TCP connection open and answers nothing (hung, or a network path that drops packets silently) would hold
    the relay, and the rows it claimed, forever. This timer runs on the connection's own I/O loop, which pika keeps
    turning while it waits, and ends the connection the way pika's own heartbeat checker does when the broker has
    gone quiet (``Connection._terminate_stream``, pika 1.x): the wait then raises ``StreamLostError``.
    """

    def __init__(self, connection: Any, seconds: float) -> None:
        import pika.exceptions

        self.expired = False
        self._impl = connection._impl  # the blocking connection's underlying SelectConnection
        error = pika.exceptions.StreamLostError(f"no confirm from the broker within {seconds:g} s")

        def expire() -> None:
            self.expired = True
            if self._impl.is_open:
                self._impl._terminate_stream(error)

        self._handle = self._impl.ioloop.call_later(seconds, expire)

    def cancel(self) -> None:
        """Stop the timer (the publish returned or failed by itself)."""
        self._impl.ioloop.remove_timeout(self._handle)


class AmqpSink:
    """Publishes each envelope to a RabbitMQ exchange with publisher confirms: ``publish`` returns only after the
    broker confirmed the message (persistent, ``mandatory``: an unroutable message is a failure, not a loss).

    Properties: ``message_id`` = the event id, ``type`` = the event type, ``content_type`` JSON,
    ``delivery_mode`` 2; the routing key is ``routing_key`` or, when None, the row's destination.
    A dropped connection fails that publish and the next one reconnects.

    Args:
        url: ``amqp://user:pass@host:port/vhost``. exchange: an existing exchange ("" is the default exchange,
            which routes to the queue named by the routing key). timeout_seconds: the bound on connecting and on
            each publish's wait for its confirm (past it the broker counts as unreachable: ADR 0110).
    """

    def __init__(self, url: str, *, exchange: str = "", routing_key: str | None = None,
                 timeout_seconds: float = 10.0) -> None:
        if urlsplit(url).scheme not in ("amqp", "amqps"):
            raise ValueError(f"AMQP URL must be amqp:// or amqps://: {redacted(url)!r}")
        self.url, self.exchange, self.routing_key = url, exchange, routing_key
        self._timeout = timeout_seconds
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None
        self._lock = threading.Lock()  # pika's blocking connection is not thread-safe

    def _connect(self) -> Any:
        import pika

        if self._channel is not None and self._channel.is_open:
            return self._channel
        self.close()
        params = pika.URLParameters(self.url)
        params.socket_timeout = self._timeout
        params.stack_timeout = self._timeout  # the whole handshake: a broker that accepts and then says nothing
        params.blocked_connection_timeout = self._timeout
        params.connection_attempts = 1
        self._connection = pika.BlockingConnection(params)
        self._channel = self._connection.channel()
        self._channel.confirm_delivery()
        return self._channel

    def startup_problem(self) -> str | None:
        """What would make every publish fail, checked before a relay starts so that it refuses a misconfigured
        sink instead of dead-lettering the whole backlog against it: credentials the broker refuses, or an
        exchange it does not have (a passive declare; the default exchange always exists).

        Returns:
            The problem in one sentence, or None when the sink looks usable or the broker cannot be reached now
            (a relay then pauses for an unreachable broker, spending no attempt: ADR 0109).
        """
        import pika.exceptions
        from pika.adapters.utils.connection_workflow import AMQPConnectorException

        try:
            channel = self._connect()
            if self.exchange:
                channel.exchange_declare(self.exchange, passive=True)
        except (pika.exceptions.ProbableAuthenticationError, pika.exceptions.ProbableAccessDeniedError):
            self.close()
            return "the broker refused these credentials or this virtual host"
        except pika.exceptions.ChannelClosedByBroker as error:
            self._channel = None
            if error.reply_code == 404:
                return f"the exchange {self.exchange!r} does not exist at the broker: declare it first"
            return f"the broker refused the exchange {self.exchange!r}: {error.reply_text}"
        except (pika.exceptions.AMQPError, AMQPConnectorException, OSError):
            self.close()  # not reached now (refused, or no handshake within the timeout): the relay will pause
        return None

    def publish(self, event: EventRecord, outbox: EventOutboxRecord) -> None:
        """Publish and wait for the broker's confirm; raises ``PublishFailed`` on a nack, an unroutable message,
        or a connection error (after one reconnect, for a connection the broker closed while idle); with
        ``sink_unavailable`` when the broker cannot be reached or sent no confirm within ``timeout_seconds``."""
        import pika
        import pika.exceptions
        from pika.adapters.utils.connection_workflow import AMQPConnectorException

        body = envelope_bytes(event, outbox)
        properties = pika.BasicProperties(message_id=event.id, type=event.type, content_type="application/json",
                                          delivery_mode=2, headers={"fencepost-event-id": event.id})
        key = self.routing_key if self.routing_key is not None else outbox.destination
        with self._lock:
            for attempt in (1, 2):
                deadline: _ConfirmDeadline | None = None
                try:
                    channel = self._connect()
                    deadline = _ConfirmDeadline(self._connection, self._timeout)
                    channel.basic_publish(self.exchange, key, body, properties, mandatory=True)
                    return
                except pika.exceptions.UnroutableError as error:
                    # The event's: with routing by destination, other destinations may route (ADR 0109).
                    raise PublishFailed(f"broker returned the message as unroutable (exchange {self.exchange!r}, "
                                        f"routing key {key!r})") from error
                except pika.exceptions.NackError as error:
                    raise PublishFailed("broker nacked the message") from error
                except (pika.exceptions.AMQPError, AMQPConnectorException, OSError) as error:
                    self.close()
                    if deadline is not None and deadline.expired:
                        # No answer at all, not even to heartbeats: the broker cannot be reached (ADR 0110). Not
                        # retried: a silent broker would hold a second attempt just as long.
                        raise PublishFailed(f"AMQP broker at {redacted(self.url)} did not confirm within "
                                            f"{self._timeout:g} s", sink_unavailable=True) from error
                    # A connection closed while idle (heartbeat missed, broker restart) is retried once at once;
                    # a second failure means the broker cannot be reached: the relay pauses (ADR 0109). A handshake
                    # the broker never answers ends after the timeout as pika's AMQPConnectorException, which is
                    # not an AMQPError: it is the same unreachable broker.
                    if attempt == 2 or isinstance(error, pika.exceptions.ChannelClosedByBroker):
                        raise PublishFailed(f"AMQP error at {redacted(self.url)}: {type(error).__name__}: "
                                            f"{error}", sink_unavailable=True) from error
                finally:
                    if deadline is not None:
                        deadline.cancel()

    def close(self) -> None:
        """Close the connection (safe to call twice)."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing more to do
                connection.close()
