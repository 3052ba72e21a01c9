"""SimPay: a real local HTTP payment provider with a ground-truth ledger, for the payments demo and its tests.

It runs as a ``ThreadingHTTPServer`` on loopback, either in a thread (``SimPay(ledger).start()``) or in its own
process (``python -m fencepost.demo.simpay --port N --ledger FILE``). What it really did is in its ledger
(``fencepost.demo.ledger``), a SQLite file that the demo reads to check fencepost's verdicts against it.

Endpoints:
    ``POST /v1/charges``   ``{"amount": int > 0, "currency": "eur", ...}``: makes a charge. The
                           ``Idempotency-Key`` header makes it once per key. The same key with the same body
                           answers the first charge again (``Idempotent-Replayed: true``). The same key with a
                           different body is a 409 and changes nothing. No key makes a new charge every time.
    ``GET /v1/charges``    ``?key=K``: the charge made with key K (404 if none); without ``key``, every charge.
    ``POST /v1/payouts``   asynchronous: answers 202 ``{"id": "po_...", "status": "pending"}``, idempotent
                           like charges. Its webhook mode (below) says when SimPay settles it and POSTs a
                           webhook signed with HMAC-SHA256 (``sign_webhook``) to the configured callback URL;
                           ``SimPay.settle_payout`` settles a pending one on demand (a late webhook).
    ``GET /_ledger``       ``{"charges": [...], "payouts": [...], "calls": [...], "webhooks": [...]}``.

The ``X-SimPay-Mode`` header of each request picks how the provider behaves (``MODES``):
    ``ok``                  charge and answer 200 with the charge;
    ``decline``             402 card declined, nothing charged;
    ``flaky``               503 with ``Retry-After`` for the first ``flaky_failures`` requests with its key
                            (nothing charged), then as ``ok`` (a 400 without a key: there is nothing to count);
    ``slow-after-charge``   charge, then sleep ``slow_seconds`` (past the client's timeout) before answering;
    ``garbage``             charge, then answer 200 with the body ``[]``;
    ``reset-after-charge``  charge, then close the connection with no answer.
Payouts only (a charge is synchronous: these modes are a 400 there), each answering 202 first:
    ``webhook``             deliver ``payout.paid`` once, shortly after;
    ``webhook-twice``       deliver ``payout.paid``, then the same body again (a re-sent delivery);
    ``webhook-contradict``  deliver ``payout.paid``, then ``payout.failed`` for the same payout;
    ``webhook-never``       deliver nothing: the payout stays pending until ``settle_payout`` (as ``ok`` does).
A mode never changes what a key means: a charge made under any mode is what that key answers afterwards, and a
replayed payout schedules no second webhook.

Webhook delivery behaves like a real provider's: each event is retried on any answer but a 2xx (fencepost
answers 404 to a callback that outran its handoff and 409 to one that arrived before parking: both mean "later")
and on connection errors, every ``webhook_retry_seconds``, up to ``webhook_attempts`` times. The next event of a
payout is sent only once the previous one was taken. Every attempt and its answer go into the ledger's
``webhooks`` table, so the receiver's answers are part of the ground truth.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fencepost.demo.ledger import KeyConflict, Ledger

#: Modes of payouts only: when the webhooks of an accepted payout are delivered, and which.
WEBHOOK_MODES = ("webhook", "webhook-twice", "webhook-contradict", "webhook-never")
MODES = ("ok", "decline", "flaky", "slow-after-charge", "garbage", "reset-after-charge", *WEBHOOK_MODES)
#: The webhook plan of each payout mode: the statuses announced, in order (``ok``: none until ``settle_payout``).
WEBHOOK_PLANS: dict[str, tuple[str, ...]] = {"webhook": ("paid",), "webhook-twice": ("paid", "paid"),
                                             "webhook-contradict": ("paid", "failed"), "webhook-never": ()}
MODE_HEADER = "X-SimPay-Mode"
#: SimPay signs its webhooks for fencepost's completion endpoint, in the header and scheme ADR 0036 defines. The
#: signing below is SimPay's own code, as a vendor's would be; a test checks it against fencepost's verifier.
SIGNATURE_HEADER = "Fencepost-Signature"
_MAX_BODY = 1 << 20


def sign_webhook(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Fencepost-Signature`` value of a webhook: ``t=<unix seconds>,v1=<hex HMAC-SHA256>`` over
    ``"<t>." + body`` with ``secret``. The timestamp is signed so that a receiver can refuse old replays."""
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_webhook(secret: str, header: str, body: bytes, *, tolerance_seconds: float = 300.0,
                   now: float | None = None) -> bool:
    """Whether ``header`` (a ``Fencepost-Signature`` value) signs ``body`` with ``secret`` and is no older than
    ``tolerance_seconds`` (by ``now``, unix seconds, default the current time). Compares in constant time."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        return False
    expected = sign_webhook(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


class SimPay:
    """The provider: an HTTP server over a ``Ledger``.

    Args:
        ledger: the ledger file (created if missing; reopened as it is after a restart).
        host, port: where to listen (port 0: a free port, see ``url``).
        slow_seconds: how long ``slow-after-charge`` sleeps before answering (cut short by ``stop``).
        flaky_failures: how many requests with one key ``flaky`` refuses with 503.
        retry_after_seconds: the ``Retry-After`` of those 503s.
        webhook_url: where payout webhooks are POSTed; None sends none. It may be set after construction (the
            receiver may start later), but before a payout with a webhook mode arrives.
        webhook_secret: the HMAC-SHA256 key of the webhook's signature (required with ``webhook_url``).
        webhook_delay_seconds: how long after accepting a payout its first webhook is sent.
        webhook_retry_seconds, webhook_attempts: the pause between deliveries of an event that was not taken
            (no 2xx, or no answer), and how many deliveries an event gets.
    """

    def __init__(self, ledger: str | Path, *, host: str = "127.0.0.1", port: int = 0, slow_seconds: float = 5.0,
                 flaky_failures: int = 2, retry_after_seconds: int = 1, webhook_url: str | None = None,
                 webhook_secret: str | None = None, webhook_delay_seconds: float = 0.2,
                 webhook_retry_seconds: float = 0.25, webhook_attempts: int = 40) -> None:
        if webhook_url is not None and not webhook_secret:
            raise ValueError("a webhook URL needs a webhook secret to sign with")
        self.ledger = Ledger(ledger)
        self.slow_seconds = slow_seconds
        self.flaky_failures = flaky_failures
        self.retry_after_seconds = retry_after_seconds
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.webhook_delay_seconds = webhook_delay_seconds
        self.webhook_retry_seconds = webhook_retry_seconds
        self.webhook_attempts = webhook_attempts
        self._deliveries: dict[str, threading.Thread] = {}
        self.stopping = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> SimPay:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="simpay", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``stop``."""
        self._server.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving (from another thread than ``serve_forever``'s), wake sleeping answers, close the socket."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> SimPay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def settle_payout(self, payout_id: str, status: str = "paid") -> int | None:
        """Settle a pending payout now and deliver its webhook (retried until taken, like every event).

        Args:
            payout_id: the ``po_...`` id a ``POST /v1/payouts`` answered.
            status: ``"paid"`` or ``"failed"``.
        Returns:
            The HTTP status of the receiver's last answer (a 2xx once taken), or None when no webhook URL is
            configured.
        Raises:
            KeyError: no such payout. ValueError: another status. OSError: the receiver could never be reached.
        """
        payout = self.ledger.set_payout_status(payout_id, status)
        if payout is None:
            raise KeyError(payout_id)
        if self.webhook_url is None or self.webhook_secret is None:
            return None
        return self._deliver_until_taken(payout_id, json.dumps({"type": f"payout.{status}", "data": payout},
                                                                sort_keys=True).encode("utf-8"), f"payout.{status}")

    def deliver_webhook(self, event: dict[str, Any]) -> int:
        """POST ``event`` as JSON to the webhook URL with its signature, once; returns the receiver's HTTP status.

        Raises:
            ValueError: no webhook URL is configured. OSError: the receiver could not be reached.
        """
        return self._post(json.dumps(event, sort_keys=True).encode("utf-8"))[0]

    def wait_for_webhooks(self, timeout: float) -> bool:
        """Wait until every scheduled payout webhook was delivered (or given up); returns whether all were."""
        deadline = time.monotonic() + timeout
        for thread in list(self._deliveries.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._deliveries.values())

    def _schedule(self, payout: dict[str, Any], mode: str) -> None:
        """Deliver the webhooks of ``mode``'s plan for a newly accepted payout, on a thread of its own."""
        plan = WEBHOOK_PLANS.get(mode, ())
        if not plan or self.webhook_url is None:
            return
        thread = threading.Thread(target=self._run_plan, args=(payout["id"], plan), daemon=True,
                                  name=f"simpay-webhooks-{payout['id']}")
        self._deliveries[payout["id"]] = thread
        thread.start()

    def _run_plan(self, payout_id: str, plan: tuple[str, ...]) -> None:
        if self.stopping.wait(self.webhook_delay_seconds):
            return
        sent: dict[str, bytes] = {}
        for status in plan:
            # A repeated status is the very same body again: a provider re-sending a delivery, not a new event.
            body = sent.get(status)
            if body is None:
                payout = self.ledger.set_payout_status(payout_id, status)
                body = json.dumps({"type": f"payout.{status}", "data": payout}, sort_keys=True).encode("utf-8")
                sent[status] = body
            with suppress(OSError):  # given up: the ledger's webhooks table shows every attempt
                code = self._deliver_until_taken(payout_id, body, f"payout.{status}")
                if not 200 <= code < 300:
                    return

    def _deliver_until_taken(self, payout_id: str, body: bytes, event_type: str) -> int:
        """POST ``body`` until the receiver answers 2xx, ``webhook_attempts`` times at most, each attempt recorded
        in the ledger; returns the last HTTP status. Raises ``OSError`` when no attempt got an answer."""
        code: int | None = None
        for attempt in range(1, self.webhook_attempts + 1):
            try:
                code, answer = self._post(body)
            except OSError as error:
                self.ledger.record_webhook(payout_id, event_type, body, attempt, None, f"no answer: {error}")
            else:
                self.ledger.record_webhook(payout_id, event_type, body, attempt, code, answer)
                if 200 <= code < 300:
                    return code
            if self.stopping.wait(self.webhook_retry_seconds):
                break
        if code is None:
            raise OSError(f"the webhook receiver never answered {event_type} of {payout_id}")
        return code

    def _post(self, body: bytes) -> tuple[int, str | None]:
        """One signed POST of ``body``: the receiver's status and what its JSON answer says (the completion's
        ``disposition``, or a problem's ``type``; None when it is not JSON)."""
        if self.webhook_url is None or self.webhook_secret is None:
            raise ValueError("SimPay has no webhook URL")
        request = urllib.request.Request(self.webhook_url, data=body, method="POST", headers={
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign_webhook(self.webhook_secret, int(time.time()), body)})
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        try:
            with direct.open(request, timeout=10) as response:
                return int(response.status), _answer(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), _answer(error.read())


def _answer(raw: bytes) -> str | None:
    """The gist of a webhook receiver's JSON answer: its ``disposition``, else the last segment of a problem's
    ``type`` (``.../unknown-reference``)."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    found = value.get("disposition") or value.get("type")
    return str(found).rsplit("/", 1)[-1][:100] if found else None


def _validate(body: object) -> tuple[dict[str, Any] | None, str | None]:
    """The body if it is a valid charge or payout request, else the reason it is not."""
    if not isinstance(body, dict):
        return None, "the request body must be a JSON object"
    amount = body.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        return None, "amount must be a positive integer (minor units)"
    currency = body.get("currency")
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
        return None, "currency must be a three-letter code"
    return body, None


def _handler_for(simpay: SimPay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "SimPay/1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _json(self, status: int, value: object, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(value, sort_keys=True).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, header in (headers or {}).items():
                self.send_header(name, header)
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
            self._json(status, {"error": {"type": kind, "message": message}}, headers)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path != "/_ledger":  # reading the ledger is the observer's, not a call to the provider
                simpay.ledger.record_call("GET", url.path, self.headers.get("Idempotency-Key"), None)
            if url.path == "/_ledger":
                ledger = simpay.ledger
                self._json(200, {"charges": ledger.charges(), "payouts": ledger.payouts(), "calls": ledger.calls(),
                                 "webhooks": ledger.webhooks()})
            elif url.path == "/v1/charges":
                keys = parse_qs(url.query).get("key")
                if not keys:
                    self._json(200, {"data": simpay.ledger.charges()})
                    return
                charge = simpay.ledger.find("charge", key=keys[0])
                if charge is None:
                    self._error(404, "not_found", "no charge was made with this idempotency key")
                else:
                    self._json(200, charge)
            else:
                self._error(404, "not_found", f"no such endpoint: GET {url.path}")

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            key = self.headers.get("Idempotency-Key")
            mode = self.headers.get(MODE_HEADER, "ok")
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self.close_connection = True
                self._error(413, "invalid_request", "the request body is too large")
                return
            raw = self.rfile.read(length) if length else b""
            earlier = simpay.ledger.record_call("POST", path, key, mode)
            if path not in ("/v1/charges", "/v1/payouts"):
                self._error(404, "not_found", f"no such endpoint: POST {path}")
                return
            if mode not in MODES:
                self._error(400, "invalid_request", f"unknown {MODE_HEADER} {mode[:40]!r}; one of {list(MODES)}")
                return
            try:
                parsed = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                parsed = None
            body, invalid = _validate(parsed)
            if body is None:
                self._error(400, "invalid_request", invalid or "invalid request")
                return
            if mode in WEBHOOK_MODES and path != "/v1/payouts":
                self._error(400, "invalid_request", f"{mode} is a payout mode: a charge sends no webhook")
                return
            if mode == "flaky" and key is None:
                self._error(400, "invalid_request", "flaky counts requests per Idempotency-Key; send one")
                return
            if mode == "flaky" and earlier < simpay.flaky_failures:
                self._error(503, "unavailable", "SimPay is briefly unavailable; nothing was charged",
                            {"Retry-After": str(simpay.retry_after_seconds)})
                return
            if mode == "decline":
                self._error(402, "card_error", "card declined; nothing was charged")
                return
            kind = "charge" if path == "/v1/charges" else "payout"
            try:
                made = simpay.ledger.create(kind, key, body)
            except KeyConflict:
                self._error(409, "idempotency_error",
                            "this idempotency key was first used with other parameters; nothing was charged")
                return
            headers = {"Idempotent-Replayed": "true"} if made.replayed else {}
            status = 202 if kind == "payout" else 200
            if kind == "payout" and not made.replayed:
                simpay._schedule(made.record, mode)
            if mode == "garbage":
                self._json(200, [])
            elif mode == "reset-after-charge":
                self.close_connection = True  # no byte of an answer
            elif mode == "slow-after-charge":
                simpay.stopping.wait(simpay.slow_seconds)
                with suppress(OSError):  # the client gave up and left, as it was meant to
                    self._json(status, made.record, headers)
            else:
                self._json(status, made.record, headers)

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fencepost.demo.simpay``: serve until SIGTERM or SIGINT. Prints ``simpay listening on URL``
    (one line, flushed) once it accepts connections, so a parent process that passed ``--port 0`` learns the
    port."""
    parser = argparse.ArgumentParser(prog="python -m fencepost.demo.simpay", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--ledger", required=True, type=Path, help="the SQLite ledger file")
    parser.add_argument("--slow-seconds", type=float, default=5.0, help="sleep of slow-after-charge")
    parser.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds of flaky")
    parser.add_argument("--webhook-url", default=None, help="where payout webhooks are POSTed")
    parser.add_argument("--webhook-secret", default=None, help="HMAC-SHA256 key of webhook signatures")
    args = parser.parse_args(argv)
    try:
        simpay = SimPay(args.ledger, port=args.port, slow_seconds=args.slow_seconds,
                        retry_after_seconds=args.retry_after, webhook_url=args.webhook_url,
                        webhook_secret=args.webhook_secret)
    except (OSError, ValueError) as error:
        print(f"simpay: {error}", file=sys.stderr)
        return 2
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    simpay.start()
    print(f"simpay listening on {simpay.url}", flush=True)
    while not done.wait(0.5):
        pass
    simpay.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
