#!/bin/sh
# A CGI script for the static servers of tests/test_server_zoo.py: it sends the document
# root's file at the script's own path with no length, which the server then sends chunked.
printf 'Content-Type: text/plain\r\n\r\n'
exec cat "$DOCUMENT_ROOT$SCRIPT_NAME"
