"""The HTTP API (FastAPI): delivery rehearsals over ``RehearsalService``; errors as problem+json."""

from fencepost.api.app import create_app

__all__ = ["create_app"]
