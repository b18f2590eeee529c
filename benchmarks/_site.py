"""Start the test site in its own process, so that it never shares a GIL with the client measured."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


def free_port_block(count: int) -> int:
    """A first port P such that P..P+count-1 are free on 127.0.0.1 right now.

    Looked for below Linux's ephemeral range (32768-60999), where a benchmark's
    own thousands of client sockets cannot be in the way.
    """
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(10000, 32768 - count)
        socks = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports found")


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for an HTTPS test site: a CA for the client, a certificate and key for the site."""

    ca_file: str
    cert_file: str
    key_file: str


def make_tls_files(directory: str) -> TLSFiles:
    """A fresh trustme CA and a certificate for 127.0.0.1 (and localhost), written into ``directory``."""
    import trustme  # only the --tls benchmarks need it

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    files = TLSFiles(
        ca_file=os.path.join(directory, "ca.pem"),
        cert_file=os.path.join(directory, "cert.pem"),
        key_file=os.path.join(directory, "key.pem"),
    )
    ca.cert_pem.write_to_path(files.ca_file)
    with open(files.cert_file, "wb") as out:
        out.writelines(pem.bytes() for pem in leaf.cert_chain_pems)
    leaf.private_key_pem.write_to_path(files.key_file)
    return files


class SiteURLs(list):
    """The base URLs of a running site process (a list, as before), plus ``process`` (its Popen)."""

    process: subprocess.Popen


@contextmanager
def site_process(hosts: int = 1, pages: int = 1000, delay_ms: float = 0.0, page_size: int = 4096,
                 tls: TLSFiles | None = None, tickets: bool = True) -> Iterator[SiteURLs]:
    """Run ``niofetcher testsite`` in a subprocess; yields its base URLs.

    With ``tls`` the site serves HTTPS with that certificate; ``tickets=False``
    makes it send no session tickets, so every new connection is a full handshake.
    """
    port = free_port_block(hosts)
    cmd = [sys.executable, "-m", "niofetcher", "testsite", "--port", str(port), "--hosts", str(hosts),
           "--pages", str(pages), "--delay", str(delay_ms), "--page-size", str(page_size)]
    if tls is not None:
        cmd += ["--tls-cert", tls.cert_file, "--tls-key", tls.key_file]
        if not tickets:
            cmd.append("--no-tickets")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        urls = SiteURLs()
        urls.process = proc
        deadline = time.monotonic() + 30
        while len(urls) < hosts and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError("test site exited before it was ready")
            if line.startswith("serving "):
                urls.append(line.split()[1])
        yield urls
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
