// The node server of tests/test_server_zoo.py: node's own http module, the same paths as
// pyservers.py (files with their length, gzip through zlib, chunked, a redirect, a 404).
// Usage: node server.js ROOT PORT IDLE_SECONDS; one line per request on stdout names the
// connection by the client's port.
"use strict";
const fs = require("fs");
const http = require("http");
const path = require("path");
const zlib = require("zlib");

const [root, port, idle] = process.argv.slice(2);
const TYPES = { ".txt": "text/plain", ".bin": "application/octet-stream" };
const NOT_FOUND = "not found\n";

function fileUnder(prefix, urlPath) {
  if (!urlPath.startsWith(`/${prefix}/`)) return null;
  const name = urlPath.slice(prefix.length + 2);
  if (!name || name.includes("/") || name.startsWith(".")) return null;
  const file = path.join(root, prefix, name);
  try {
    return fs.statSync(file).isFile() ? file : null;
  } catch {
    return null;
  }
}

function typeOf(file) {
  return TYPES[path.extname(file)] || "application/octet-stream";
}

const server = http.createServer((req, res) => {
  const urlPath = req.url.split("?")[0];
  const head = req.method === "HEAD";
  // Read now: once the socket's handle has gone, remotePort is undefined.  Logged on "close",
  // which node emits for every response, where "finish" is lost when the socket goes first.
  const port = req.socket.remotePort;
  res.on("close", () => {
    process.stdout.write(`port=${port} "${req.method} ${req.url}" ${res.statusCode}\n`);
  });
  let file;
  if ((file = fileUnder("files", urlPath))) {
    res.writeHead(200, { "Content-Type": typeOf(file), "Content-Length": fs.statSync(file).size });
    if (head) res.end();
    else fs.createReadStream(file).pipe(res);
  } else if ((file = fileUnder("gzip", urlPath))) {
    const gzip = /\bgzip\b/.test(req.headers["accept-encoding"] || "");
    const headers = { "Content-Type": typeOf(file), Vary: "Accept-Encoding" };
    if (gzip) headers["Content-Encoding"] = "gzip";
    // Compressed as it streams, with no length: node sends it chunked.
    res.writeHead(200, headers);
    if (head) res.end();
    else if (gzip) fs.createReadStream(file).pipe(zlib.createGzip()).pipe(res);
    else fs.createReadStream(file).pipe(res);
  } else if ((file = fileUnder("chunked", urlPath))) {
    res.writeHead(200, { "Content-Type": typeOf(file) });
    if (head) res.end();
    else fs.createReadStream(file).pipe(res);
  } else if (urlPath === "/redirect") {
    res.writeHead(302, { Location: "/files/1k.bin", "Content-Length": 0 });
    res.end();
  } else {
    res.writeHead(404, { "Content-Type": "text/plain", "Content-Length": NOT_FOUND.length });
    res.end(head ? undefined : NOT_FOUND);
  }
});
server.keepAliveTimeout = Number(idle) * 1000;
server.listen(Number(port), "127.0.0.1");
process.on("SIGTERM", () => process.exit(0));
