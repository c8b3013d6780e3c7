"""The web console's static files (``static/``: HTML, ES modules, CSS), served at ``/console`` on
every gateway's port by :mod:`actors.console`. No Python runs here; the package exists so that
``pip install`` ships the files beside the code that serves them."""

from __future__ import annotations

from pathlib import Path

#: the console's own files
STATIC = Path(__file__).resolve().parent / "static"
#: the JavaScript client, as an image build (or a wheel build) copies it in from clients/js/src
BUNDLED_CLIENT = STATIC / "client"
#: the JavaScript client in a checkout (an editable install)
CHECKOUT_CLIENT = Path(__file__).resolve().parent.parent / "clients" / "js" / "src"
