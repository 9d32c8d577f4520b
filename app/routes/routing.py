"""Route registration shared by the routers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
RouteDecorator = Callable[[Endpoint], Endpoint]


def reads(router: APIRouter) -> Callable[..., Callable[[Endpoint], Endpoint]]:
    """`read_route(path, **options)` for `router`: GET that also answers HEAD.

    FastAPI answers HEAD on a GET-only route with 405; this registers both, with the
    route documented once in OpenAPI, under GET.
    """

    def read_route(path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        def register(endpoint: Endpoint) -> Endpoint:
            router.add_api_route(path, endpoint, methods=["GET"], **options)
            router.add_api_route(
                path, endpoint, methods=["HEAD"], include_in_schema=False, **options
            )
            return endpoint

        return register

    return read_route
