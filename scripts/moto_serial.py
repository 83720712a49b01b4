#!/usr/bin/env python3
"""Serves moto (all its services) on a loopback port, one request at a time.

moto_server runs werkzeug threaded: its requests run side by side, and
moto's DynamoDB backend takes no lock, so two conditional writes on one key
can both succeed. This launcher serves moto's own application with werkzeug
unthreaded (threaded=False): the server accepts the next connection only
once the current request's response is written (and, unthreaded, werkzeug
answers HTTP/1.0 and closes every connection), so each request, a
TransactWriteItems or a conditional write among them, runs alone and is
atomic.

Usage: moto_serial.py [--host 127.0.0.1] [--port 0]
It prints its URL (http://host:port) on its first line, then serves until
SIGTERM or SIGINT. Port 0, the default, takes a free port.
"""

import argparse
import logging
import os
import signal

from werkzeug.serving import WSGIRequestHandler, make_server

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


class Handler(WSGIRequestHandler):
    """Gives up on a client that sends nothing, or half a request, for 15 s:
    served one at a time, such a client would hold every other one."""

    timeout = 15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind, 0 for a free one (default 0)")
    args = parser.parse_args()

    # Exit at once: the state is in memory, and freeing it can take minutes.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: os._exit(0))
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(args.host, args.port, app, threaded=False, processes=1, request_handler=Handler)
    host, port = server.server_address[:2]
    print(f"http://{host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
