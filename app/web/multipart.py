"""A streaming multipart/form-data reader: the token before the body, files to disk.

The upload form's body is read chunk by chunk as it arrives (`request.stream()`) by a
small push parser that keeps no more than a boundary's length of bytes between chunks:

1. The token is checked first: from `Authorization: Bearer …` before any byte of the
   body is read, or else from the form's FIRST part, which must be the `token` field. A
   first part that is not it, that is not complete within TOKEN_WINDOW (64 KiB), or a
   wrong token, ends the read there: 401, the rest of the body never read.
2. Text fields are kept (each at most TEXT_MAX bytes); file fields stream into the spool
   folder (app.web.spool, hashed as they are written), each capped on its own: 413
   naming the field as soon as it passes its cap. Memory does not grow with the body.
3. The number of parts, the size of their headers and the field names are bounded;
   anything odd is a 4xx naming the field, never a 500. A refused form's files are
   deleted.

The bytes are parsed by python-multipart's streaming `MultipartParser` (the parser
under Starlette's `request.form()`), fed chunk by chunk; this module adds only the
policy: which fields, in which order, how big, and the token before anything else.
`request.form()` itself cannot be used: it reads the whole form before a route sees its
first field, so it could not refuse a missing token before the files.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser

from app.web.spool import OverCap, Spooled, SpoolWriter
from app.web.tokens import bearer_of, token_matches

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

TOKEN_FIELDS = frozenset({"token"})
"""The field that carries the submission token (a field name; the token itself is only
ever compared in constant time, by app.web.tokens)."""
TOKEN_WINDOW = 64 * 1024
"""Body bytes read, at most, before a missing or wrong token is answered with 401."""
TEXT_MAX = 4 * 1024
HEADER_MAX = 8 * 1024
MAX_PARTS = 8
PREAMBLE_MAX = 1024
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{1,70}")
_PARAM = re.compile(r';\s*([A-Za-z*]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))')


class FormRefused(Exception):
    """The form cannot be used: `status` (401, 413, 415, 422), the field, plain words."""

    def __init__(self, status: int, field: str | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message


@dataclass
class Form:
    """A form read whole: its text fields, its files on disk, and the body bytes read."""

    text: dict[str, str] = field(default_factory=dict)
    files: dict[str, Spooled] = field(default_factory=dict)
    read: int = 0

    def discard(self) -> None:
        for part in self.files.values():
            part.discard()
        self.files.clear()


@dataclass(frozen=True)
class FormPolicy:
    """What a form may hold: its file fields with each one's cap, its text fields, and
    the token it needs (None: none)."""

    files: dict[str, int]
    text: frozenset[str]
    token: str | None


def boundary_of(content_type: str) -> bytes:
    """The boundary of a multipart/form-data Content-Type (415 or 422 otherwise)."""
    media, _, rest = content_type.partition(";")
    if media.strip().lower() != "multipart/form-data":
        raise FormRefused(415, None, "send the form as multipart/form-data")
    params: dict[str, str] = {m[0].lower(): m[1] or m[2] for m in _PARAM.findall(";" + rest)}
    boundary = params.get("boundary", "")
    if not _BOUNDARY.fullmatch(boundary) or boundary.endswith(" "):
        raise FormRefused(422, None, "the form's boundary is missing or malformed")
    return boundary.encode("ascii")


def _disposition(value: bytes) -> tuple[str, str | None]:
    """(field name, file name or None) from a part's Content-Disposition value."""
    text = value.decode("utf-8", "replace")
    kind, _, rest = text.partition(";")
    if kind.strip().lower() == "form-data":
        params = {m[0].lower(): m[1] or m[2] for m in _PARAM.findall(";" + rest)}
        if "name" in params:
            return params["name"][:64], params.get("filename")
    raise FormRefused(422, None, "a part of the form has no field name")


class _Parser:
    """python-multipart's streaming parser, bounded: `feed(chunk)` calls `on_begin(name,
    filename)`, `on_data(bytes)` and `on_end()` as each part begins, carries data and
    ends. It keeps no more than a boundary's length of bytes between chunks."""

    def __init__(
        self,
        boundary: bytes,
        on_begin: Callable[[str, str | None], None],
        on_data: Callable[[bytes], None],
        on_end: Callable[[], None],
    ) -> None:
        self.on_begin, self.on_data, self.on_end = on_begin, on_data, on_end
        self.state = "preamble"
        self.parts = 0
        self._field = bytearray()
        self._value = bytearray()
        self._headers = 0
        self._disposition: bytes | None = None
        callbacks: MultipartCallbacks = {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }
        self._parser = MultipartParser(
            boundary, callbacks, max_header_count=8, max_header_size=HEADER_MAX
        )
        self._seen = 0

    def feed(self, chunk: bytes) -> None:
        if self.state == "done":
            return  # an epilogue is ignored
        self._seen += len(chunk)
        try:
            self._parser.write(chunk)
        except MultipartParseError as exc:
            if self.state == "preamble":
                raise FormRefused(422, None, "the body is not multipart/form-data") from None
            if "header" in str(exc).lower():
                raise FormRefused(422, None, "a part's headers are too long") from None
            raise FormRefused(422, None, "the form's parts are malformed") from None
        if self.state == "preamble" and self._seen > PREAMBLE_MAX:
            raise FormRefused(422, None, "the body is not multipart/form-data")

    def _part_begin(self) -> None:
        self.state = "headers"
        self._headers = 0
        self._disposition = None
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise FormRefused(422, None, f"the form has more than {MAX_PARTS} parts")

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._count(end - start)
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._count(end - start)
        self._value += data[start:end]

    def _count(self, n: int) -> None:
        self._headers += n
        if self._headers > HEADER_MAX:
            raise FormRefused(422, None, "a part's headers are too long")

    def _header_end(self) -> None:
        if bytes(self._field).strip().lower() == b"content-disposition":
            self._disposition = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        if self._disposition is None:
            raise FormRefused(422, None, "a part of the form has no field name")
        self.state = "data"
        self.on_begin(*_disposition(self._disposition))

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        self.on_data(bytes(data[start:end]))

    def _part_end(self) -> None:
        self.state = "between"
        self.on_end()

    def _end(self) -> None:
        self.state = "done"


class _Reader:
    """The callbacks of one form's parse: fields kept, files written, the token checked."""

    def __init__(self, policy: FormPolicy, spool: Path, need_token: bool) -> None:
        self.policy = policy
        self.spool = spool
        self.form = Form()
        self.token_checked = not need_token
        self.parts = 0
        self.name = ""
        self.size = 0
        self.text = bytearray()
        self.file: SpoolWriter | None = None

    def begin(self, name: str, filename: str | None) -> None:
        self.parts += 1
        if not self.token_checked and (self.parts > 1 or name not in TOKEN_FIELDS):
            raise FormRefused(401, "token", "this server needs its submission token, first")
        if name in self.form.text or name in self.form.files:
            raise FormRefused(422, name, "this field is in the form twice")
        self.name, self.size = name, 0
        if name in self.policy.files:
            self.file = SpoolWriter(self.spool, self.policy.files[name], filename)
        elif name in self.policy.text or name in TOKEN_FIELDS:
            self.text.clear()
        else:
            raise FormRefused(422, name[:40], "the form has no such field")

    def data(self, piece: bytes) -> None:
        if self.file is not None:
            try:
                self.file.write(piece)
            except OverCap as exc:
                self.file = None
                raise FormRefused(413, self.name, f"over {exc.limit:,} bytes") from None
            return
        self.size += len(piece)
        if self.size > TEXT_MAX:
            if not self.token_checked:  # no token is that long
                raise FormRefused(401, "token", "this server needs its submission token")
            raise FormRefused(422, self.name, f"over {TEXT_MAX:,} characters")
        self.text.extend(piece)

    def end(self) -> None:
        if self.file is not None:
            spooled = self.file.close()
            self.file = None
            if spooled.size:  # a file input left empty sends a part with no bytes
                self.form.files[self.name] = spooled
            else:
                spooled.discard()
            return
        value = self.text.decode("utf-8", "replace")
        if self.name in TOKEN_FIELDS and not self.token_checked:
            if not token_matches(value, self.policy.token):
                raise FormRefused(401, "token", "this server needs its submission token")
            self.token_checked = True
        self.form.text[self.name] = value

    def abandon(self) -> None:
        if self.file is not None:
            self.file.abandon()
            self.file = None
        self.form.discard()


async def read_form(
    chunks: AsyncIterator[bytes],
    content_type: str,
    policy: FormPolicy,
    spool: Path,
    authorization: str = "",
) -> Form:
    """Read a multipart form from `chunks` under `policy`, its files into `spool`.

    FormRefused on any problem, after deleting what was spooled; the caller answers it
    with `Connection: close`, so the unread rest of the body is never read.
    """
    boundary = boundary_of(content_type)
    bearer = bearer_of(authorization)
    need_token = policy.token is not None and not token_matches(bearer, policy.token)
    reader = _Reader(policy, spool, need_token)
    parser = _Parser(boundary, reader.begin, reader.data, reader.end)
    form = reader.form
    try:
        async for chunk in chunks:
            rest = chunk
            if not reader.token_checked:
                # The token's window: never more than TOKEN_WINDOW bytes before it is checked.
                piece = chunk[: TOKEN_WINDOW - form.read]
                form.read += len(piece)
                parser.feed(piece)
                if not reader.token_checked:
                    if form.read >= TOKEN_WINDOW:
                        raise FormRefused(
                            401, "token", "this server needs its submission token, first"
                        )
                    continue
                rest = chunk[len(piece) :]
            form.read += len(rest)
            parser.feed(rest)
        if parser.state != "done":
            raise FormRefused(422, None, "the form ended before its last part did")
        if not reader.token_checked:
            raise FormRefused(401, "token", "this server needs its submission token")
    except BaseException:
        reader.abandon()
        raise
    return form
