r"""The URL rules, in one package: what a request sends, what the frontier stores, what a link resolves to.

A URL is an absolute http or https URL with a host (docs/guarantees.md, "URLs").  It
takes one of three forms, each made by one function of this package:

- :func:`parse_target` gives the fetcher its request target (the Origin key
  of the connection table, the Host header and the path);
- :func:`normalize_url` gives the form a URL is stored and de-duplicated in;
- :func:`absolute_url` gives the link an href of a page (or a ``Location``)
  leads to, as a browser would send it.

What each accepts, refuses and guarantees.  "=" means as the column before.

==================  =======================  ===========================  ===================================
rule                parse_target(url)        normalize_url(url)           absolute_url(href, base)
==================  =======================  ===========================  ===================================
accepts             an absolute http(s)      =                            any reference, resolved against
                    URL with a host                                       ``base`` as WHATWG resolves it
                                                                          (``special_form``, then urljoin;
                                                                          ``base=""``: ``href`` must be
                                                                          absolute)
refuses, by         ValueError (a non-str    ValueError; TypeError for    None (never raises for the text of
                    too)                     a non-str                    a page; a lone surrogate in the
                                                                          path or query: UnicodeEncodeError)
... what            not http(s), no host,    =                            =; but it %-encodes NUL, keeps
                    a port not 0-65535, a                                 the host "." and ends the
                    broken IPv6 literal, a                                authority at a ``\`` as browsers
                    host WHATWG refuses                                   do, which the other two refuse
                    (a forbidden code point
                    ``% ^ | < > / \ @ [ ]``,
                    space or control once
                    %-decoded, a name IDNA
                    cannot encode, a name
                    ending in a number that
                    is no IPv4 address), a
                    ``\`` in the authority
                    with an "@" after it,
                    NUL, a lone surrogate
ends                C0 controls and space    =                            =
                    stripped
tab, CR, LF inside  removed                  =                            =
scheme              lower case; after it     =                            lower case; any number of "/"
                    "//", one "/" or none,                                or ``\`` after it (``///h/x`` is
                    ``\`` as "/"; three                                   ``h``); ``http:x`` is relative to
                    are an empty authority                                an http base, the host ``x`` to
                    (``http:///x``: no host)                              any other
host                %-decoded, lower case,   =                            =, trailing dots kept (WHATWG)
                    IDNA A-labels (UTS
                    #46), IPv4 in dotted
                    decimal (``0x7f.1`` is
                    ``127.0.0.1``), trailing
                    dots dropped
IPv6 literal        Origin.host bare, Host   in brackets, canonical       =
                    header in brackets;      (``[0:0::1]`` is ``[::1]``)
                    canonical (RFC 5952)
port                Origin: explicit; Host   default dropped, any other   =
                    header: default dropped  as a number (``:08080``)
userinfo            not in Host or target    dropped: never stored        %-encoded as WHATWG writes it,
                                                                          ``:`` of an empty password and
                                                                          an empty ``@`` dropped
path                at least "/"; ``\`` is   =                            =
                    "/" before the query
dot segments        removed (RFC 3986        =                            =
                    5.2.4); ``%2e`` is a
                    dot in them (WHATWG)
%-encoded as UTF-8  WHATWG's sets: any        =                            =
                    character but visible
                    ASCII, and ``" < > `
                    { }`` (path), ``" < >
                    '`` (query)
``%xx`` escapes     kept, in upper case      =                            kept as written
query               kept; an empty "?" too   =                            =
                    (WHATWG keeps it)
fragment            dropped                  =                            =
==================  =======================  ===========================  ===================================

Where they agree, they agree exactly (tests/test_url_rules.py holds them to
this table):

- ``parse_target(normalize_url(u)) == parse_target(u)``: the stored form asks
  for what the URL asked for, and ``normalize_url`` of a normal form is
  that form;
- when ``absolute_url(u, "")`` and ``normalize_url(u)`` both give a URL,
  ``normalize_url(absolute_url(u, "")) == normalize_url(u)``.  A link therefore lands in the frontier in the form its URL typed as a seed
  has, whichever the spelling of host, port, escapes or dot segments.

The rules behind the table:

- a host is read as the WHATWG host parser reads it (:func:`whatwg_host`,
  :func:`normal_host`): a non-ASCII name becomes IDNA A-labels as UTS #46
  maps it (``faß.de`` is ``xn--fa-hia.de``, as browsers send it), a name that
  ends in a number an IPv4 address;
- web-platform-tests' ``urltestdata.json`` is the reference
  (tests/test_url_rulebook.py): every http(s) case agrees, but for the
  differences listed there with their reasons;
- an existing ``%XX`` escape is kept, so ``/%C3%BC`` and ``/ü`` are one URL;
- an IPv6 literal goes in brackets wherever a host meets a port or a scheme
  (:func:`bracketed`);
- a redirect ``Location`` is decoded as UTF-8 first, Latin-1 only when that
  fails (:func:`decode_location`), as wget and curl read nginx's raw bytes;
  the fetcher follows it to :func:`redirect_url` (urljoin, fragment dropped:
  the next request's target is then parse_target's), the crawler reads it
  with :func:`absolute_url`;
- a proxy setting is read by :func:`parse_proxy`, and ``no_proxy`` by
  :class:`NoProxy` (curl's rules), with the same host rules; so is an
  allowed domain of a crawl, by :func:`domain_host`.

Each function has a fast path for the URLs no rule changes (nearly all of
them, one regular expression each, because each form's "nothing to change"
differs) and a general one built on urlsplit (and urljoin); the tests check
with hypothesis and on every href of the real corpus that the two always
agree.

One module a job, each importing only those listed before it:

- ``credentials``: a URL's ``user:pass@`` taken out of it, and masked where it is shown;
- ``hosts``: the host parser (IPv4 forms, A-labels, IPv6 literals);
- ``paths``: percent-encoding, escapes and dot segments of paths and queries;
- ``reading``: the WHATWG reading of a reference's text before urlsplit and urljoin;
- ``targets``: :func:`parse_target`, :func:`normalize_url`, :func:`host_key`;
- ``links``: :func:`absolute_url`, :class:`LinkResolver`, :func:`redirect_url`;
- ``domains``: the allowed-domain entries of a crawl (:func:`domain_host`);
- ``proxies``: :func:`parse_proxy` and :class:`NoProxy`;
- ``traps``: the rules a crawl applies before it stores a URL (:class:`QueryCleaner`, :func:`path_repeats`).

The names other modules use are importable from the package itself.
"""

from __future__ import annotations

from .credentials import basic_authorization, shown_url, split_credentials
from .domains import domain_host
from .hostnames import bracketed, normal_host, whatwg_host
from .links import LinkResolver, absolute_url, decode_location, redirect_url
from .paths import remove_dot_segments
from .proxies import NoProxy, Proxy, parse_proxy
from .reading import C0_CONTROL_OR_SPACE, DEFAULT_PORTS
from .targets import Origin, Target, check_url_characters, host_key, normal_or_none, normalize_url, parse_target
from .traps import QueryCleaner, path_repeats

__all__ = [
    "C0_CONTROL_OR_SPACE",
    "DEFAULT_PORTS",
    "LinkResolver",
    "NoProxy",
    "Origin",
    "Proxy",
    "QueryCleaner",
    "Target",
    "absolute_url",
    "basic_authorization",
    "bracketed",
    "check_url_characters",
    "decode_location",
    "domain_host",
    "host_key",
    "normal_host",
    "normal_or_none",
    "normalize_url",
    "parse_proxy",
    "parse_target",
    "path_repeats",
    "redirect_url",
    "remove_dot_segments",
    "shown_url",
    "split_credentials",
    "whatwg_host",
]
