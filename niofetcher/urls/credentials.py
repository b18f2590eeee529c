"""Userinfo: the credentials a URL carries, taken out of it, and kept out of what is shown of it.

A ``user:pass@`` typed in a URL is sent as a header (:func:`split_credentials`,
:func:`basic_authorization`), never stored, recorded or logged; an error
message repeats a URL through :func:`shown_url`, which masks the password.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote


def basic_authorization(user: str, password: str | None) -> str:
    """The value of an ``Authorization`` (or ``Proxy-Authorization``) header for the userinfo
    ``user:password`` of a URL: each part percent-decoded as UTF-8, ``Basic`` (RFC 7617)."""
    token = base64.b64encode(f"{unquote(user)}:{unquote(password or '')}".encode()).decode("ascii")
    return f"Basic {token}"


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the ``Authorization`` value that userinfo stands for
    (``Basic``, as curl and browsers send ``http://user:pass@host/``), None when it has none.

    The one place that takes credentials out of a URL: what a user types as
    ``user:pass@`` is sent as a header to that origin, and the URL that is
    stored, recorded and logged carries no password.  The rest of ``url`` is
    left as written; a URL that the URL rules refuse is returned as it is.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, None
    end = len(rest)
    for delimiter in "/\\?#":  # a "\\" ends an http(s) authority too, as browsers read it
        found = rest.find(delimiter)
        if found >= 0:
            end = min(end, found)
    # The last "@" of the authority: a password may hold an unescaped one, and urlsplit takes the host after it.
    userinfo, at, hostport = rest[:end].rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = f"{scheme}{sep}{hostport}{rest[end:]}"
    # "http://@h/" and "http://:@h/" carry no credentials: browsers send no header for them.
    return bare, basic_authorization(user, password) if user or password else None


#: The longest URL an error message repeats: a line of a seeds file may be megabytes long.
_SHOWN_LENGTH = 200


def shown_url(url: str) -> str:
    """``url`` as an error message may repeat it: the password of a userinfo masked (``user:***@``),
    and cut to 200 characters.  The password is taken to end at the last "@" of the whole URL,
    where a URL's rules end it earlier: a password may hold an unescaped "@" or "/", and a message
    that masks a little too much is better than one that shows a little of a password."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostport = rest.rpartition("@")
    if at and ":" in userinfo:
        url = f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hostport}"
    return url if len(url) <= _SHOWN_LENGTH else url[:_SHOWN_LENGTH] + "..."
