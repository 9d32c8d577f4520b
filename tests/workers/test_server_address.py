"""How every `--server` option reads the server it names (workers.export.server_address): a
URL or a unix socket, each page's address as the commands print it, and a value that is
neither refused with what one looks like."""

from __future__ import annotations

import os

import pytest

from app.mcp.stdio import _arguments as mcp_arguments
from workers.cli.export_fn import build_parser as export_parser
from workers.cli.fit import build_parser as fit_parser
from workers.cli.run import parse_command_line
from workers.cli.worker import build_parser as worker_parser
from workers.export.server_address import ServerAddress


def test_a_url_or_a_unix_socket() -> None:
    web = ServerAddress.parse("https://boundary.internal:8443/")
    assert (web.url, web.socket) == ("https://boundary.internal:8443", None)
    assert web.link("/runs/ab12") == "https://boundary.internal:8443/runs/ab12"
    for spelled in ("unix:/run/b.sock", "unix:///run/b.sock"):
        sock = ServerAddress.parse(spelled)
        assert (sock.url, sock.socket) == ("http://localhost", "/run/b.sock")
        assert sock.link("/runs/ab12") == "http://unix:/run/b.sock:/runs/ab12"
        assert str(sock) == "unix:/run/b.sock"
    assert ServerAddress.parse("unix:b.sock").socket == os.path.join(os.getcwd(), "b.sock")


@pytest.mark.parametrize("wrong", ["localhost:8000", "ftp://host", "unix:", "unix://"])
def test_anything_else_is_refused_saying_what_a_server_looks_like(wrong: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. http://127\.0\.0\.1:8000 or unix:/"):
        ServerAddress.parse(wrong)


def test_every_command_reads_its_server_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    needed = {
        "worker": lambda s: worker_parser().parse_args(["--server", s]),
        "run": lambda s: parse_command_line(["matmul", "--server", s]),
        "fit": lambda s: fit_parser().parse_args(
            ["w", "--range", "1:2", "--target", "h100:1", "--server", s]
        ),
        "mcp": lambda s: mcp_arguments(["--server", s]),
        "export-fn": lambda s: export_parser().parse_args(["m:f", "--upload", s]),
    }
    for command, parse in needed.items():
        named = parse("unix:/run/b.sock")
        got = named.upload if command == "export-fn" else named.server
        assert got == ServerAddress.parse("unix:/run/b.sock"), command
        with pytest.raises(SystemExit) as refused:
            parse("localhost:8000")
        assert refused.value.code == 2, command
        said = capsys.readouterr().err
        option = "--upload" if command == "export-fn" else "--server"
        assert f"argument {option}: give the server's address" in said, command
