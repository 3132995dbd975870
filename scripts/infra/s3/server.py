"""An S3-compatible server for cdcapply's object-storage tests: moto's S3
(an independent implementation of the S3 REST API, PyPI `moto[server]`)
served on one address, with its requests handled one at a time.

moto checks If-None-Match: * and answers 412 for an existing key, but it
checks and stores in two steps; two racing conditional PUTs can both win
(1 round in 300 of eight writers, measured). S3 makes the pair atomic, and
the tests of Delta's put-if-absent race writers on purpose, so a lock
around each request gives the tests the store they are written against.

usage: server.py HOST PORT
"""
import sys
import threading

from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()


def serialized(environ, start_response):
    with lock:
        # The whole body is built under the lock: moto answers with bytes,
        # and its state changes while the application runs.
        return list(app(environ, start_response))


if __name__ == "__main__":
    run_simple(sys.argv[1], int(sys.argv[2]), serialized, threaded=True,
               request_handler=MotoRequestHandler)
