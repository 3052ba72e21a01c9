"""Events (level 4): the store conformance checks for the event log and its outbox (host-spec U, V; ADR 0040).

``fencepost.events.conformance`` holds the six event-append checks, ``fencepost.events.isolation`` the tenant
isolation checks, and ``fencepost.events.fencepost_subject`` the adapters that present a fencepost ``Store``
to them. The relay of issue 15 may add its own modules here; these modules import nothing from it.
"""
