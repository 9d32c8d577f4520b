"""The baseline for bench/reader_load.py: a plain Starlette "hello" route."""

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def hello(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


app = Starlette(routes=[Route("/", hello)])
